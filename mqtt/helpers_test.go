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
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// env is a registry over a real store in a temp dir and a broker on
// 127.0.0.1:0, as Main wires them.
type env struct {
	t   testing.TB
	dir string
	cfg Config
	// regOpts are the registry's options (its Logger is set by start).
	regOpts hub.RegistryOptions
	join    joinPolicy
	db      *store.DB
	reg     *hub.Registry
	b       *Broker
	addr    string
}

func newEnv(t testing.TB, edit func(*Config)) *env {
	t.Helper()
	return newEnvJoin(t, joinPolicy{}, edit)
}

// joinPolicy is what start passes hub.NewAdmission for the broker's
// Config.Admission: the Admission is built over the registry each start
// opens. The zero value is open with the default rate.
type joinPolicy struct {
	mode  string
	rate  float64
	burst int
}

// newEnvJoin is newEnv with a join policy.
func newEnvJoin(t testing.TB, jp joinPolicy, edit func(*Config)) *env {
	t.Helper()
	cfg := Config{Anonymous: true, Version: "test", DirectoryURL: "http://127.0.0.1:1/.well-known/wot"}
	if edit != nil {
		edit(&cfg)
	}
	return newEnvWith(t, hub.RegistryOptions{}, jp, cfg)
}

// newEnvWith is newEnv with registry options (limits and quotas) and a
// join policy.
func newEnvWith(t testing.TB, opts hub.RegistryOptions, jp joinPolicy, cfg Config) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), cfg: cfg, regOpts: opts, join: jp}
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
	if cfg.Admission, err = hub.NewAdmission(reg, db, e.join.mode, e.join.rate, e.join.burst); err != nil {
		e.t.Fatal(err)
	}
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

// client is the shared MQTT test client (test/kit/hubtest/mqttclient) with
// this package's shorthands.
type client struct {
	*mqttclient.Client
	t testing.TB
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
	return wrap(t)(mqttclient.DialFrom(t, from, addr, cp))
}

// connectOver connects with cp over conn, a connection the test made.
func connectOver(t testing.TB, conn net.Conn, cp *paho.Connect) (*client, *paho.Connack, error) {
	t.Helper()
	return wrap(t)(mqttclient.Connect(t, conn, cp))
}

func wrap(t testing.TB) func(*mqttclient.Client, *paho.Connack, error) (*client, *paho.Connack, error) {
	return func(c *mqttclient.Client, ack *paho.Connack, err error) (*client, *paho.Connack, error) {
		if err != nil {
			return nil, ack, err
		}
		return &client{c, t}, ack, nil
	}
}

func mustDial(t testing.TB, addr string, cp *paho.Connect) *client {
	t.Helper()
	cl, _, err := dial(t, addr, cp)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cl
}

func withCreds(c *credentials) *paho.Connect { return mqttclient.WithCreds(c.Username, c.Password) }

func (c *client) close() { c.Close() }

func (c *client) sub(filter string) (*paho.Suback, error) { return c.Sub(filter) }

func (c *client) mustSub(filter string) {
	c.t.Helper()
	c.MustSub(filter)
}

func (c *client) pub(topic string, payload []byte, qos byte, retain bool, contentType string) (*paho.PublishResponse, error) {
	return c.Pub(topic, payload, qos, retain, contentType)
}

func (c *client) mustPub(topic string, payload []byte, qos byte, retain bool) {
	c.t.Helper()
	c.MustPub(topic, payload, qos, retain)
}

// next returns the next message on topic, skipping others, or fails.
func (c *client) next(topic string) *paho.Publish {
	c.t.Helper()
	return c.Next(topic)
}

// none checks that no message arrives on topic within d.
func (c *client) none(topic string, d time.Duration) {
	c.t.Helper()
	c.None(topic, d)
}

// join publishes td to its td topic and returns the result.
func (c *client) join(tid string, td []byte, contentType string) joinResult {
	c.t.Helper()
	p := c.Join(tid, td, contentType)
	var res joinResult
	if err := json.Unmarshal(p, &res); err != nil {
		c.t.Fatalf("result %s: %v", p, err)
	}
	return res
}

// thing joins a new Thing id anonymously and returns its credentials:
// the identity a test needs for a persistent session (anonymous sessions
// never persist, anonymous.go).
func (e *env) thing(t testing.TB, id string) *credentials {
	t.Helper()
	c := mustDial(t, e.addr, nil)
	defer c.close()
	res := c.join(lmos.TopicKey(id), tdgen.MakeTD(id, id), "")
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

// rawConnect5 connects an MQTT 5 client that never acknowledges anything
// (session expiry 3600 s unless clean; Receive Maximum 65,535 by default).
func rawConnect5(t *testing.T, addr, id string, clean bool) net.Conn {
	t.Helper()
	return rawConnect5As(t, addr, id, clean, nil)
}

// rawConnect5As is rawConnect5 with a Thing's credentials (nil: anonymous).
func rawConnect5As(t *testing.T, addr, id string, clean bool, cred *credentials) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	connectRaw5(t, conn, id, clean, cred)
	return conn
}

// connectRaw5 writes rawConnect5As's CONNECT on conn.
func connectRaw5(t *testing.T, conn net.Conn, id string, clean bool, cred *credentials) {
	t.Helper()
	flags := byte(0)
	if clean {
		flags = 2
	}
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, flags, 0, 60, 5, 0x11, 0, 0, 0x0e, 0x10}
	vh = append(vh, 0, byte(len(id)))
	vh = append(vh, id...)
	if cred != nil {
		vh[7] |= 0xc0 // user name and password
		vh = append(vh, 0, byte(len(cred.Username)))
		vh = append(vh, cred.Username...)
		vh = append(vh, 0, byte(len(cred.Password)))
		vh = append(vh, cred.Password...)
	}
	if _, err := conn.Write(append([]byte{0x10, byte(len(vh))}, vh...)); err != nil {
		t.Fatal(err)
	}
}

// discard reads conn until it closes, acknowledging nothing.
func discard(conn net.Conn) {
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	}()
}

// subscribeRaw sends a SUBSCRIBE of topic at QoS 1 with packet id.
func subscribeRaw(t *testing.T, conn net.Conn, id uint16, topic string) {
	t.Helper()
	body := []byte{byte(id >> 8), byte(id), 0, byte(len(topic) >> 8), byte(len(topic))}
	body = append(append(body, topic...), 1)
	if _, err := conn.Write(append(appendVarInt([]byte{0x82}, len(body)), body...)); err != nil {
		t.Fatal(err)
	}
}
