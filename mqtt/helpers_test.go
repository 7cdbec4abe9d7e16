package mqtt

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// env is a registry over a real store in a temp dir and a broker on
// 127.0.0.1:0, as Main wires them.
type env struct {
	t   testing.TB
	dir string
	cfg Config
	// regOpts are the registry's options (its Logger is set by start).
	regOpts hub.RegistryOptions
	db      *store.DB
	reg     *hub.Registry
	b       *Broker
	addr    string
}

func newEnv(t testing.TB, edit func(*Config)) *env {
	t.Helper()
	cfg := Config{Anonymous: true, Version: "test", DirectoryURL: "http://127.0.0.1:1/.well-known/wot"}
	if edit != nil {
		edit(&cfg)
	}
	return newEnvWith(t, hub.RegistryOptions{}, cfg)
}

// newEnvWith is newEnv with registry options (limits and quotas).
func newEnvWith(t testing.TB, opts hub.RegistryOptions, cfg Config) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), cfg: cfg, regOpts: opts}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) start() {
	e.t.Helper()
	logger := slog.New(slog.NewTextHandler(testLog{e.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, err := store.Open(e.dir, store.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	opts := e.regOpts
	opts.Logger = logger
	reg, err := hub.NewRegistry(db, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Logger = logger
	cfg.HubID = db.HubID()
	b, err := New(reg, db, db, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	addr, err := b.Listen("127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	if err := b.Serve(); err != nil {
		e.t.Fatal(err)
	}
	e.db, e.reg, e.b, e.addr = db, reg, b, addr.String()
}

// stop closes broker, registry and store in Main's order; twice is fine.
func (e *env) stop() {
	if e.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.b.Close(ctx); err != nil {
		e.t.Errorf("close broker: %v", err)
	}
	e.reg.Close()
	e.db.Close()
	e.b = nil
}

func (e *env) restart() {
	e.t.Helper()
	e.stop()
	e.start()
}

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// client is a paho MQTT 5 client with every received message on msgs.
type client struct {
	t    testing.TB
	c    *paho.Client
	conn net.Conn
	msgs chan *paho.Publish
}

// dial connects with cp (a fresh anonymous clean start when nil).
func dial(t testing.TB, addr string, cp *paho.Connect) (*client, *paho.Connack, error) {
	t.Helper()
	return dialFrom(t, "", addr, cp)
}

// dialFrom is dial from the local address from (a loopback address such
// as 127.0.0.2 is another source to the hub; "" lets the system choose).
func dialFrom(t testing.TB, from, addr string, cp *paho.Connect) (*client, *paho.Connack, error) {
	t.Helper()
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := &client{t: t, conn: conn, msgs: make(chan *paho.Publish, 256)}
	cl.c = paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			select {
			case cl.msgs <- pr.Packet:
			default:
				t.Errorf("test client queue full; dropped %s", pr.Packet.Topic)
			}
			return true, nil
		}},
	})
	if cp == nil {
		cp = &paho.Connect{CleanStart: true}
	}
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := cl.c.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		return nil, ack, err
	}
	t.Cleanup(func() { cl.close() })
	return cl, ack, nil
}

func mustDial(t testing.TB, addr string, cp *paho.Connect) *client {
	t.Helper()
	cl, _, err := dial(t, addr, cp)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cl
}

func withCreds(c *credentials) *paho.Connect {
	return &paho.Connect{CleanStart: true, Username: c.Username, UsernameFlag: true, Password: []byte(c.Password), PasswordFlag: true}
}

func (c *client) close() {
	_ = c.c.Disconnect(&paho.Disconnect{})
	c.conn.Close()
}

func (c *client) sub(filter string) (*paho.Suback, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
}

func (c *client) mustSub(filter string) {
	c.t.Helper()
	if _, err := c.sub(filter); err != nil {
		c.t.Fatalf("subscribe %s: %v", filter, err)
	}
}

func (c *client) pub(topic string, payload []byte, qos byte, retain bool, contentType string) (*paho.PublishResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p := &paho.Publish{Topic: topic, Payload: payload, QoS: qos, Retain: retain}
	if contentType != "" {
		p.Properties = &paho.PublishProperties{ContentType: contentType}
	}
	return c.c.Publish(ctx, p)
}

func (c *client) mustPub(topic string, payload []byte, qos byte, retain bool) {
	c.t.Helper()
	if _, err := c.pub(topic, payload, qos, retain, ""); err != nil {
		c.t.Fatalf("publish %s: %v", topic, err)
	}
}

// next returns the next message on topic, skipping others, or fails.
func (c *client) next(topic string) *paho.Publish {
	c.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m := <-c.msgs:
			if m.Topic == topic {
				return m
			}
		case <-timeout:
			c.t.Fatalf("no message on %s within 5s", topic)
			return nil
		}
	}
}

// none checks that no message arrives on topic within d.
func (c *client) none(topic string, d time.Duration) {
	c.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m := <-c.msgs:
			if m.Topic == topic {
				c.t.Fatalf("unexpected message on %s: %q", topic, m.Payload)
			}
		case <-timeout:
			return
		}
	}
}

// join publishes td to its td topic and returns the result.
func (c *client) join(tid string, td []byte, contentType string) joinResult {
	c.t.Helper()
	// A SUBSCRIBE to a td/result topic is refused (0x87) while the hub is
	// still delivering an earlier result on it, which the test may already
	// have received: retry.
	eventually(c.t, 2*time.Second, "subscribed to td/result", func() bool {
		_, err := c.sub(lmos.ThingsPrefix + tid + "/td/result")
		return err == nil
	})
	if _, err := c.pub(lmos.ThingsPrefix+tid+"/td", td, 1, true, contentType); err != nil {
		c.t.Fatalf("publish td: %v", err)
	}
	m := c.next(lmos.ThingsPrefix + tid + "/td/result")
	var res joinResult
	if err := json.Unmarshal(m.Payload, &res); err != nil {
		c.t.Fatalf("result %s: %v", m.Payload, err)
	}
	return res
}

// makeTD returns a small valid TD.
func makeTD(id, title string) []byte {
	b, _ := json.Marshal(map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Agent",
		"id":                  id,
		"title":               title,
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{"chat": map[string]any{
			"forms": []any{map[string]any{"href": "mqtt://hub/lmos/v1/things/x/actions/chat"}},
		}},
	})
	return b
}

// eventually polls cond every 10 ms for up to d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// thing joins a new Thing id anonymously and returns its credentials:
// the identity a test needs for a persistent session (anonymous sessions
// never persist, anonymous.go).
func (e *env) thing(t testing.TB, id string) *credentials {
	t.Helper()
	c := mustDial(t, e.addr, nil)
	defer c.close()
	res := c.join(lmos.TopicKey(id), makeTD(id, id), "")
	if res.Status != "accepted" || res.Credentials == nil {
		t.Fatalf("join %s: %+v", id, res)
	}
	return res.Credentials
}

// persistentAs is a CONNECT with the Thing's credentials and client id
// that resumes or starts a session kept for expiry seconds (MQTT 5).
func persistentAs(c *credentials, clientID string, expiry uint32) *paho.Connect {
	cp := withCreds(c)
	cp.CleanStart = false
	cp.ClientID = clientID
	cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &expiry}
	return cp
}
