// Package bridge is the hub's MQTT bridge to an upstream broker or cluster
// (PROTOCOL §9): chosen topics cross between the hub's embedded broker and
// an MQTT 5 upstream with mosquitto's topic semantics (Topic). It speaks
// only MQTT upstream, through autopaho (reconnect with backoff and jitter,
// a durable outbox for QoS 1/2 messages, queue.go; the session, session.go), and
// reaches the local broker through the small Port it needs, which app
// plugs in (the mqtt adapter's BridgePort).
//
// No message loops: one the bridge published locally is never sent up
// again (Port tells it its own), and upstream subscriptions carry No Local,
// so what it published there never comes back; a topic bridged both ways
// crosses once.
package bridge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Port is what the bridge needs of the local broker.
type Port interface {
	// Publish publishes pk on the local broker as the bridge.
	Publish(pk packets.Packet) error
	// Subscribe calls handler with every local publish filter matches
	// (retained ones included), own true for those the bridge published
	// through Publish. handler must not block. The returned function ends
	// the subscription.
	Subscribe(filter string, handler func(pk packets.Packet, own bool)) (func(), error)
}

// Defaults of Config.
const (
	DefaultName           = "upstream"
	DefaultKeepAlive      = 30 * time.Second
	DefaultRetryMin       = time.Second
	DefaultRetryMax       = 2 * time.Minute
	DefaultSessionExpiry  = 24 * time.Hour
	DefaultMaxQueued      = 100_000
	qos0Buffer            = 1024
	connectTimeout        = 10 * time.Second
	publishTimeout        = 10 * time.Second
	subscribeTimeout      = 10 * time.Second
	stateTopicLevel       = "bridge"
	stateConnected        = "1"
	stateDisconnected     = "0"
	maxUpstreamPacketSize = 1 << 20
)

// Config configures a Bridge.
type Config struct {
	// Name names the connection (LinkState.Name, the state topic).
	Name string
	// URL is the upstream broker: mqtt://, mqtts://, ws:// or wss://
	// host:port.
	URL      string
	ClientID string
	Username string
	Password string
	// CAFile is a PEM bundle of CAs trusted for mqtts/wss (empty: the
	// system's); Fingerprint pins the upstream certificate instead
	// (sha256:…, as lmos.ParseFingerprint reads it).
	CAFile      string
	Fingerprint string
	Topics      []Topic
	// QueueDir holds the durable outbox and the MQTT session.
	QueueDir      string
	KeepAlive     time.Duration
	RetryMin      time.Duration // first reconnect delays are drawn in [RetryMin, 2×RetryMin]
	RetryMax      time.Duration // upper bound of the reconnect delay
	SessionExpiry time.Duration // the upstream keeps the bridge's session this long
	// MaxQueued bounds the outbox: beyond it QoS 1/2 messages are dropped
	// (counted, reported as the link's last error).
	MaxQueued int
	Logger    *slog.Logger
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// SettingError names the setting (as in the YAML file, below bridge.)
// that is wrong.
type SettingError struct {
	Setting string
	Err     error
}

func (e *SettingError) Error() string { return "bridge." + e.Setting + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

func bad(setting, format string, a ...any) error {
	return &SettingError{Setting: setting, Err: fmt.Errorf(format, a...)}
}

// Validate says which setting is wrong (a *SettingError).
func (c *Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || u.Host == "" {
		return bad("url", "%q is not a broker URL such as mqtt://host:1883", c.URL)
	}
	switch u.Scheme {
	case "mqtt", "tcp", "mqtts", "ssl", "tls", "ws", "wss":
	default:
		return bad("url", "%q: the scheme must be mqtt, mqtts, ws or wss", c.URL)
	}
	if !nameRE.MatchString(c.Name) {
		return bad("name", "%q: use 1 to 64 letters, digits, '.', '_' or '-'", c.Name)
	}
	if c.Fingerprint != "" {
		if _, err := lmos.ParseFingerprint(c.Fingerprint); err != nil {
			return bad("fingerprint", "%w", err)
		}
	}
	if len(c.Topics) == 0 {
		return bad("topics", "is empty: name at least one topic to bridge")
	}
	for i, t := range c.Topics {
		if err := t.validate(); err != nil {
			return bad(fmt.Sprintf("topics[%d]", i), "%w", err)
		}
	}
	if c.RetryMin < 0 || c.RetryMax < 0 || (c.RetryMax > 0 && c.RetryMin > c.RetryMax) {
		return bad("retryMin", "%s is more than bridge.retryMax %s", c.RetryMin, c.RetryMax)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.RetryMin <= 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax <= c.RetryMin {
		c.RetryMax = max(DefaultRetryMax, 2*c.RetryMin)
	}
	if c.SessionExpiry <= 0 {
		c.SessionExpiry = DefaultSessionExpiry
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	for i := range c.Topics {
		if c.Topics[i].Direction == "" {
			c.Topics[i].Direction = Out
		}
	}
}

// StateTopic is the retained topic on the hub's broker that says whether
// the bridge is connected ("1") or not ("0"), as mosquitto's
// $SYS/broker/connection/<name>/state does.
func StateTopic(name string) string {
	return lmos.TopicRoot + lmos.HubLevel + "/" + stateTopicLevel + "/" + name + "/state"
}

// Bridge is one connection to an upstream broker.
type Bridge struct {
	cfg   Config
	url   *url.URL
	port  Port
	log   *slog.Logger
	queue *fileQueue
	sess  *state.State
	cm    *autopaho.ConnectionManager
	qos0  chan *paho.Publish

	cancel context.CancelFunc
	wg     sync.WaitGroup
	unsubs []func()

	sent, received, errs atomic.Uint64
	mu                   sync.Mutex
	state                string
	lastErr              string
	lastErrAt, lastOK    time.Time
}

// New checks cfg and returns a bridge over port; Start connects it.
func New(cfg Config, port Port) (*Bridge, error) {
	if port == nil {
		return nil, errors.New("cannot create the mqtt bridge: no local broker")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the mqtt bridge: %w", err)
	}
	u, _ := url.Parse(cfg.URL)
	return &Bridge{
		cfg:   cfg,
		url:   u,
		port:  port,
		log:   cfg.Logger.With("component", "bridge", "name", cfg.Name),
		qos0:  make(chan *paho.Publish, qos0Buffer),
		state: hub.LinkConnecting,
	}, nil
}

// Start opens the durable queue, subscribes locally to the outgoing topics
// and starts connecting upstream in the background; it returns at once.
func (b *Bridge) Start() (err error) {
	q, err := openQueue(filepath.Join(b.cfg.QueueDir, "queue"))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil && b.cm == nil { // nothing started (Close did the rest): let the outbox go
			q.Close()
		}
	}()
	q.sent = b.queueSent
	q.expired = func() { b.drop("its Message Expiry Interval passed while it waited in the queue") }
	b.queue = q
	cs, err := openSessionStore(filepath.Join(b.cfg.QueueDir, "session", "client"))
	if err != nil {
		return err
	}
	ss, err := openSessionStore(filepath.Join(b.cfg.QueueDir, "session", "server"))
	if err != nil {
		return err
	}
	client, err := newClientSession(q, cs)
	if err != nil {
		return err
	}
	b.sess = state.New(client, ss)
	cc, err := b.clientConfig()
	if err != nil {
		return err
	}
	b.publishState(stateDisconnected) // before the connection can say 1
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	cm, err := autopaho.NewConnection(ctx, cc)
	if err != nil {
		cancel()
		return fmt.Errorf("cannot start the mqtt bridge: %w", err)
	}
	b.cm = cm
	b.wg.Go(func() { b.sendQoS0(ctx) })
	for i, t := range b.cfg.Topics {
		if !t.out() {
			continue
		}
		unsub, err := b.port.Subscribe(t.LocalFilter(), func(pk packets.Packet, own bool) { b.outgoing(i, pk, own) })
		if err != nil {
			_ = b.Close(context.Background())
			return fmt.Errorf("cannot subscribe the bridge to local %q: %w", t.LocalFilter(), err)
		}
		b.unsubs = append(b.unsubs, unsub)
	}
	b.log.Info("mqtt bridge started", "url", b.redactedURL(), "topics", len(b.cfg.Topics), "queued", q.Len())
	return nil
}

// clientConfig is autopaho's configuration of the upstream connection.
func (b *Bridge) clientConfig() (autopaho.ClientConfig, error) {
	tlsCfg, err := b.tlsConfig()
	if err != nil {
		return autopaho.ClientConfig{}, err
	}
	initial := min(2*b.cfg.RetryMin, b.cfg.RetryMax)
	expiry := uint32(b.cfg.SessionExpiry / time.Second)
	cc := autopaho.ClientConfig{
		ServerUrls: []*url.URL{b.url},
		TlsCfg:     tlsCfg,
		KeepAlive:  uint16(b.cfg.KeepAlive / time.Second),
		// The session (with its unacknowledged messages) outlives
		// restarts on both sides: never a clean start.
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         expiry,
		ReconnectBackoff:              autopaho.NewExponentialBackoff(b.cfg.RetryMin, b.cfg.RetryMax, initial, 2),
		ConnectTimeout:                connectTimeout,
		Queue:                         b.queue,
		ConnectUsername:               b.cfg.Username,
		ConnectPassword:               []byte(b.cfg.Password),
		OnConnectionUp:                b.connectionUp,
		OnConnectionDown:              b.connectionDown,
		OnConnectError:                b.connectError,
		ClientConfig: paho.ClientConfig{
			ClientID:          b.cfg.ClientID,
			Session:           b.sess,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){b.incoming},
			OnClientError:     func(err error) { b.failed("connection error", err) },
			OnServerDisconnect: func(d *paho.Disconnect) {
				b.failed("upstream disconnected", fmt.Errorf("reason code %d", d.ReasonCode))
			},
		},
	}
	return cc, nil
}

// tlsConfig is the TLS configuration of mqtts/wss: a pinned certificate,
// a CA bundle, or the system's CAs.
func (b *Bridge) tlsConfig() (*tls.Config, error) {
	if b.cfg.Fingerprint != "" {
		check, err := lmos.Pin(b.cfg.Fingerprint)
		if err != nil {
			return nil, fmt.Errorf("cannot use bridge.fingerprint: %w", err)
		}
		return lmos.PinnedConfig(check), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: b.url.Hostname()}
	if b.cfg.CAFile != "" {
		pem, err := os.ReadFile(b.cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cannot read bridge.caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("bridge.caFile %s holds no PEM certificate", b.cfg.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// redactedURL is the upstream's URL without credentials.
func (b *Bridge) redactedURL() string {
	u := *b.url
	u.User = nil
	return u.String()
}

// Close stops the bridge: the local subscriptions end, the upstream
// connection is closed (what the queue holds stays for the next start).
func (b *Bridge) Close(ctx context.Context) error {
	for _, unsub := range b.unsubs {
		unsub()
	}
	b.unsubs = nil
	var err error
	if b.cm != nil {
		if e := b.cm.Disconnect(ctx); e != nil && !errors.Is(e, autopaho.ConnectionDownError) {
			err = fmt.Errorf("cannot disconnect the mqtt bridge: %w", e)
		}
	}
	if b.cancel != nil {
		b.cancel()
	}
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("cannot stop the mqtt bridge in time: %w", ctx.Err()))
	}
	if b.cm != nil {
		select {
		case <-b.cm.Done():
		case <-ctx.Done():
		}
	}
	if b.queue != nil {
		b.queue.Close()
	}
	b.publishState(stateDisconnected)
	return err
}
