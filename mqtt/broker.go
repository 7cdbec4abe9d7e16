// Package mqtt is the hub's embedded MQTT broker (mochi-mqtt) and the LMOS
// MQTT binding on top of it (PROTOCOL §4): authentication with the
// credentials the hub issues at join, the topic ACL, joining by publishing a
// Thing Description, presence from status topics and wills, the hub's own
// status and event topics, the broker's durable state (retained messages,
// persistent sessions) kept through brokerstate.Store, and hub.Transport:
// interactions with MQTT agents on behalf of consumers (request/response
// through the hub's reply inbox, retained property values, event streams).
// Through hub interfaces it serves the other adapters too: it takes
// MQTT-over-WebSocket connections (ws.ConnServer of web/ws, wired by app), carries what WebSocket
// agents emit (hub.Publisher), and carries MQTT consumers' requests for
// Things another transport reaches through the Router (Config.Forward).
//
// It extends mochi (v2.7.9) only through its exported API: mochi's own
// connection loop serves every connection (Server.EstablishConnection, on a
// net.Conn of the hub's, outConn, that queues the hub's deliveries and
// reads the CONNECT first), Options (capabilities, buffer sizes, $SYS
// quiet through SysTopicResendInterval), the inline client, the exported
// methods of Server, Client, Inflight and TopicsIndex, and two hooks
// embedding HookBase:
//
//   - binding (hook.go): OnConnect, OnConnectAuthenticate, OnSessionEstablish,
//     OnSessionEstablished, OnACLCheck, OnPublish (the hub's delivery path,
//     fanout.go and qos.go), OnSubscribe, OnSubscribed, OnUnsubscribed,
//     OnPacketRead (packet identifiers per direction), OnPacketProcessed,
//     OnPacketEncode (the reason-code guard, the resumed session's resend),
//     OnWill and OnWillSent (delayed wills, willdelay.go), OnClientExpired.
//   - persistence (persist.go): OnRetainMessage, OnRetainedExpired,
//     OnSessionEstablished, OnDisconnect, OnSubscribed, OnUnsubscribed,
//     OnQosPublish, OnQosComplete, OnQosDropped, OnClientExpired and the
//     Stored* loaders.
//
// What mochi gets wrong and no seam reaches is listed in PROTOCOL §10
// ("MQTT connections and wills"). mochi's config package is never
// imported: it would pull badger, pebble and redis into the binary.
package mqtt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
	"github.com/eclipse-lmos/lmos-hub/internal/ratelimit"
)

// Limits of the broker. mochi serves each connection with two goroutines
// (one reading, one writing its channel of MaximumClientWritesPending
// pointers) and a read buffer of netReadBufferSize (docs/PERFORMANCE.md has
// what an idle client costs). The hub's own queue (outConn) takes memory
// only while it holds something, at most Config.MaxQueuedBytes of QoS 0
// messages.
const (
	// MaxPacketSize is the largest MQTT packet the broker accepts (1 MiB,
	// advertised in the v5 CONNACK). A bigger packet closes the connection
	// (mochi sends no DISCONNECT first); the client's will is published.
	MaxPacketSize = 1 << 20
	// maxWritesPending bounds mochi's write channel per client. Only
	// mochi's own deliveries (delayed wills) use it: the hub delivers every
	// publish itself (fanout.go, qos.go).
	maxWritesPending = 128
	// DefaultMaxQueuedBytes is the default Config.MaxQueuedBytes.
	DefaultMaxQueuedBytes = 1 << 20
	// DefaultSlowClientTimeout is the default Config.SlowClientTimeout.
	DefaultSlowClientTimeout = 30 * time.Second
	// defaultAckGrace is the default Config.AckGrace.
	defaultAckGrace = 5 * time.Second
	// netWriteBufferSize is the buffer mochi batches its own writes to a
	// client in (allocated while it has a backlog).
	netWriteBufferSize = 2 << 10
	// netReadBufferSize is mochi's read buffer, allocated for every
	// connection: 1 KiB, one read system call per KiB of a burst of small
	// packets, for ~1 KB of an idle client's heap.
	netReadBufferSize = 1 << 10
	// maxSessionExpiry caps how long a disconnected persistent session is
	// kept: 7 days.
	maxSessionExpiry = 7 * 24 * 60 * 60
	// receiveMaximum is the number of QoS 1/2 publishes a client may have
	// unacknowledged towards the broker.
	receiveMaximum = 256
	// maxInflight caps the QoS 1/2 messages stored per session (and so
	// the window of a client declaring a larger Receive Maximum): a live
	// publish waits for room (qos.go).
	maxInflight = 1024
	// sysInterval is how often mochi refreshes its $SYS topics (it reads
	// runtime.MemStats each time); nobody may subscribe to them (ACL) and
	// the hub reads the counters directly. mochi publishes them once at
	// Serve; its option has no "never", so the next refresh is set ~34
	// years away (1<<30 s, within time.Duration on every platform).
	sysInterval = 1 << 30
)

// Topics of the hub itself (PROTOCOL §4.1).
const (
	TopicHubStatus = lmos.HubStatusTopic
	TopicHubEvents = lmos.HubEventsTopic
)

// Config configures a Broker.
type Config struct {
	// Anonymous admits clients without a username (they may join and use
	// the "anyone" part of the ACL).
	Anonymous bool
	// Access is the one access policy (hub.Access) applied to every
	// SUBSCRIBE, PUBLISH and delivery; nil: anonymous operate.
	Access *hub.Access
	// Tokens verifies clients that connect with username "token" and a
	// bearer token as password; nil: no such clients.
	Tokens *hub.Tokens
	// HubID is the hub's stable id; it names the hub's reply inbox.
	HubID string
	// Version is the hub version published on lmos/v1/hub/status.
	Version string
	// DirectoryURL is the directory TD's URL published on lmos/v1/hub/status.
	DirectoryURL string
	// FlushInterval is the write-behind window of the broker's durable
	// state (default 200 ms).
	FlushInterval time.Duration
	// Workers is the number of goroutines that run joins and presence
	// changes (default 8); one Thing's messages always go to the same one.
	Workers int
	// Admission is the hub's join policy (mode and rate of anonymous
	// joins, PROTOCOL §4.4) shared with the other doors; app
	// builds it. Nil: open, with hub.NewAdmission's default rate.
	Admission *hub.Admission
	// Forward carries requests MQTT consumers publish for Things that
	// another transport reaches (WebSocket agents); the Router. Nil: such
	// requests only reach MQTT subscribers.
	Forward hub.Transport
	// ForwardTimeout bounds a forwarded request (default 30 s).
	ForwardTimeout time.Duration
	// GroupActions runs group actions published to
	// lmos/v1/hub/groups/{gid}/actions/{name}; nil: refused (503).
	GroupActions *hub.GroupActions
	// MaxQueuedBytes bounds each client's queue of encoded packets
	// waiting to be written: QoS 0 deliveries beyond it are dropped
	// (counted). Default DefaultMaxQueuedBytes.
	MaxQueuedBytes int
	// SlowClientTimeout is how long a client may go without taking a
	// batch from a full queue, or keep a publisher waiting for room in its
	// session, before it is disconnected (counted). Default
	// DefaultSlowClientTimeout.
	SlowClientTimeout time.Duration
	// AckGrace is how long a subscriber whose session is full may go
	// without acknowledging anything before publishers stop waiting for it
	// and it is cut off (default 5 s, at most SlowClientTimeout).
	AckGrace time.Duration
	// ConnectTimeout bounds how long a connection may take to send its
	// CONNECT (default DefaultConnectTimeout); then it is closed and
	// counted (mqtt.connectTimeout).
	ConnectTimeout time.Duration
	// Bridged are the local areas of the MQTT bridge's topics outside
	// lmos/, opened by the topic ACL to whom each says (bridgeport.go).
	Bridged []BridgedArea
	// Logger is the parent logger (slog.Default when nil).
	Logger *slog.Logger
}

// Broker is the embedded MQTT broker with the LMOS binding.
type Broker struct {
	cfg    Config
	reg    *hub.Registry
	dec    hub.Decoder // reg's, for every payload and TD the broker decodes
	creds  hub.CredentialStore
	adm    *hub.Admission // the join policy (hub/join.go)
	access *hub.Access    // the access policy (access.go)
	subs   subsCache      // subscribers per topic (subcache.go)
	log    *slog.Logger
	server *mochi.Server
	inline *mochi.Client
	bind   *binding
	state  *persistence
	// replies routes invocation results; streams counts open streams.
	replies replies
	streams atomic.Int64
	// forwards bounds requests forwarded to other transports.
	forwards chan struct{}
	// unserved counts requests no subscription matched (nosubscriber.go).
	unserved atomic.Uint64

	// lns are the listeners added (Listen, Serves), closed by Close when
	// the broker never served.
	lns []net.Listener
	// reasonFixes counts packets the encode hook had to correct: a reason
	// code the specification does not define for them, a DISCONNECT to a
	// 3.1.1 client, a delivery too large for its client (reasoncodes.go).
	reasonFixes atomic.Uint64
	// dropped counts deliveries not made, by reason; slowCuts the clients
	// disconnected for being too slow (metrics.go).
	dropped drops
	// messages counts the publishes fanOut routed; deliveries, the copies
	// it queued or stored for subscribers before any drop (metrics.go).
	messages, deliveries atomic.Uint64
	slowCuts             atomic.Uint64
	// refused counts refused joins and connections by reason.
	refused refusals
	// refusedLog holds back access refusals' log lines beyond one per
	// client and hub.RefusalLogPeriod (metrics.go).
	refusedLog *ratelimit.Throttle
	// gates orders connections with the same client id; reuseTimeouts
	// counts those that went ahead without waiting for the earlier one
	// (sameclientid.go).
	gates         idGates
	reuseTimeouts atomic.Uint64
	// hooks are the hooks the broker adds to mochi at Serve, in order
	// (tests add theirs before Serve).
	hooks []mochi.Hook
	// connectHeads counts the CONNECT fixed headers read (connect.go).
	connectHeads atomic.Uint64
	// wills are the delayed wills mochi holds (willdelay.go).
	wills delayedWills
	// wsConns holds the connections ServeConn serves (MQTT over WebSocket).
	wsConns  connSet
	served   atomic.Bool
	closed   atomic.Bool
	stopOnce sync.Once

	// ctx is cancelled when Close gives up waiting; registry calls use it.
	ctx    context.Context
	cancel context.CancelFunc
	// stop ends the workers and the event forwarder.
	stop    chan struct{}
	queues  []chan func()
	heavy   sourceGates // one join in progress at a time per source
	workers sync.WaitGroup
	events  sync.WaitGroup

	// credInbox publishes membership credentials (credentials.go).
	credInbox credentialInbox
	// revokeIndex is the sessions by Thing of the batch whose removals
	// are being revoked (groups.go); the registry's write loop's alone.
	revokeIndex revokeIndex
}

// New builds a broker over the registry and stores. It loads nothing and
// opens no socket yet: Listen then Serve.
func New(reg *hub.Registry, bs brokerstate.Store, creds hub.CredentialStore, cfg Config) (*Broker, error) {
	if reg == nil || bs == nil || creds == nil {
		return nil, errors.New("cannot create mqtt broker: registry and stores are required")
	}
	adm := cfg.Admission
	if adm == nil {
		var err error
		if adm, err = hub.NewAdmission(reg, creds, "open", 0, 0); err != nil {
			return nil, fmt.Errorf("cannot create mqtt broker: %w", err)
		}
	}
	cfg.setDefaults()
	log := cfg.Logger
	server := newMochi(log)
	inline, ok := server.Clients.Get(mochi.InlineClientId)
	if !ok {
		return nil, errors.New("cannot create mqtt broker: mochi has no inline client")
	}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.Access == nil {
		cfg.Access = hub.OpenAccess()
	}
	b := &Broker{
		refusedLog: ratelimit.NewThrottle(hub.RefusalLogPeriod, reg.Now),
		cfg:        cfg,
		reg:        reg,
		dec:        reg.Decoder(),
		creds:      creds,
		log:        log,
		server:     server,
		inline:     inline,
		ctx:        ctx,
		cancel:     cancel,
		stop:       make(chan struct{}),
		adm:        adm,
		access:     cfg.Access,

		forwards: make(chan struct{}, maxForwards),
	}
	b.bind = &binding{b: b}
	b.wsConns.wg = &server.Listeners.ClientsWg
	// A member removed loses the group's channels before the removal is
	// acknowledged (groups.go).
	reg.OnMembershipChange(b.membershipChanged)
	// A credential replaced or reset stops working at once, not only at
	// the next CONNECT (PROTOCOL §4.4).
	adm.OnCredentialRevoked(b.endThingSessions)
	b.state = newPersistence(bs, log, cfg.FlushInterval)
	b.hooks = []mochi.Hook{b.bind, b.state}
	return b, nil
}

// setDefaults fills in what cfg leaves zero.
func (cfg *Config) setDefaults() {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 200 * time.Millisecond
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = defaultForwardTimeout
	}
	if cfg.MaxQueuedBytes <= 0 {
		cfg.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if cfg.SlowClientTimeout <= 0 {
		cfg.SlowClientTimeout = DefaultSlowClientTimeout
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.AckGrace <= 0 {
		cfg.AckGrace = defaultAckGrace
	}
	cfg.AckGrace = min(cfg.AckGrace, cfg.SlowClientTimeout)
}

// newMochi is the mochi server the broker extends: its capabilities, one
// setting a line, each with why where it is not mochi's default.
func newMochi(log *slog.Logger) *mochi.Server {
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumClientWritesPending = maxWritesPending
	caps.MaximumSessionExpiryInterval = maxSessionExpiry
	caps.MaximumPacketSize = MaxPacketSize
	caps.ReceiveMaximum = receiveMaximum
	caps.MaximumInflight = maxInflight
	// Retained messages (TDs, status, property values) must not vanish after
	// mochi's default 24 h; only a message's own expiry interval applies.
	caps.MaximumMessageExpiryInterval = 0
	// mochi checks the ACL before resolving a topic alias, so an aliased
	// publish would be judged on an empty topic; no aliases, then.
	caps.TopicAliasMaximum = 0
	// mochi copies a PUBLISH's properties (User Properties, traceparent …)
	// onto its acknowledgement; a PUBACK needs none of them.
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	return mochi.New(&mochi.Options{
		Capabilities:             caps,
		ClientNetWriteBufferSize: netWriteBufferSize,
		ClientNetReadBufferSize:  netReadBufferSize,
		SysTopicResendInterval:   sysInterval,
		InlineClient:             true,
		// mochi logs a line per connection at info; keep its warnings only.
		Logger: slog.New(minLevel{log.With("component", "mochi").Handler(), slog.LevelWarn}),
	})
}

// Listen opens the TCP listener on addr (port 0 picks a free port) and
// returns the address actually bound. Call it before Serve.
func (b *Broker) Listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on mqtt.addr %s: %w", addr, err)
	}
	return b.Serves("tcp", ln)
}

// Serves adds ln (a TLS listener for MQTTS, say) as the listener named id;
// it closes ln when it cannot. Call it before Serve.
func (b *Broker) Serves(id string, ln net.Listener) (net.Addr, error) {
	l := &listener{id: id, ln: ln, log: b.log, server: b.server, budget: b.cfg.MaxQueuedBytes, broker: b}
	l.conns.wg = &b.server.Listeners.ClientsWg
	if err := b.server.AddListener(l); err != nil {
		ln.Close()
		return nil, fmt.Errorf("cannot add mqtt listener: %w", err)
	}
	b.lns = append(b.lns, ln)
	return ln.Addr(), nil
}

// Serve loads the stored broker state, starts accepting clients and the
// hub topics, and returns. Before any client can connect it sets Things
// that were online over MQTT offline (none of them is connected yet). The
// descriptions on …/td are served from the registry (retainedtd.go): copies
// earlier versions retained there are dropped as the store loads.
func (b *Broker) Serve() (err error) {
	// The workers exist before the first client can publish.
	b.queues = make([]chan func(), b.cfg.Workers)
	for i := range b.queues {
		q := make(chan func(), 64)
		b.queues[i] = q
		b.workers.Go(func() { b.work(q) })
	}
	// Registry changes are followed from before the broker accepts
	// clients (lmos/v1/hub/events, live removals on …/td).
	sub, _, err := b.reg.Subscribe(0, false)
	if err != nil {
		return fmt.Errorf("cannot start mqtt broker: %w", err)
	}
	defer func() {
		if err != nil {
			sub.Cancel()
		}
	}()
	for _, h := range b.hooks {
		if err := b.server.AddHook(h, nil); err != nil {
			return fmt.Errorf("cannot add the mqtt hook %s: %w", h.ID(), err)
		}
	}
	reset := b.resetPresence()
	if err := b.server.Serve(); err != nil {
		return fmt.Errorf("cannot start mqtt broker: %w", err)
	}
	b.restoreExpiry()
	b.subs.changed()       // Serve loaded the stored subscriptions (subcache.go)
	b.revokeStale()        // memberships removed while the broker was down (groups.go)
	b.retainOffline(reset) // the retained store is loaded now
	if err := b.serveReplies(); err != nil {
		return err
	}
	if err := b.server.Subscribe(lmos.ThingsPrefix+"+/status", willSubID, b.bind.onDelayedWill); err != nil {
		return fmt.Errorf("cannot subscribe the status topics: %w", err)
	}
	b.served.Store(true)
	b.state.start()
	if err := b.publishStatus("online"); err != nil {
		return err
	}
	b.events.Go(func() { b.forwardEvents(sub) })
	b.startCredentials()
	return nil
}

// Err reports whether the broker is serving: nil while it is.
func (b *Broker) Err() error {
	switch {
	case b.closed.Load():
		return hub.Errorf(hub.EUNAVAILABLE, "the mqtt broker is closed")
	case !b.served.Load():
		return hub.Errorf(hub.EUNAVAILABLE, "the mqtt broker is not serving yet")
	}
	return nil
}

// Clients returns the number of connected clients.
func (b *Broker) Clients() int64 { return atomic.LoadInt64(&b.server.Info.ClientsConnected) }

// Close publishes the hub's offline status, disconnects every client (their
// wills are published), waits for joins and presence changes in progress
// and writes the broker state, all within ctx.
func (b *Broker) Close(ctx context.Context) error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	if b.served.Load() {
		if err := b.publishStatus("offline"); err != nil {
			errs = append(errs, err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.wsConns.close()
		if b.served.Load() {
			_ = b.server.Close() // always nil; closes listeners and clients
		} else {
			for _, ln := range b.lns {
				ln.Close()
			}
		}
		b.stopOnce.Do(func() { close(b.stop) })
		b.events.Wait()
		b.workers.Wait()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		b.cancel() // registry calls still running give up
		errs = append(errs, fmt.Errorf("cannot stop the mqtt broker in time: %w", ctx.Err()))
	}
	b.cancel()
	if err := b.state.close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// publishStatus publishes the retained lmos/v1/hub/status.
func (b *Broker) publishStatus(status string) error {
	payload, err := json.Marshal(struct {
		Status    string `json:"status"`
		Version   string `json:"version"`
		Directory string `json:"directory"`
	}{status, b.cfg.Version, b.cfg.DirectoryURL})
	if err != nil {
		return fmt.Errorf("cannot encode hub status: %w", err)
	}
	if err := b.publish(TopicHubStatus, payload, true, 1, "application/json"); err != nil {
		return fmt.Errorf("cannot publish hub status: %w", err)
	}
	return nil
}

// publish sends a message from the hub's inline client, which the ACL does
// not restrict. An empty retained payload deletes the retained message.
func (b *Broker) publish(topic string, payload []byte, retain bool, qos byte, contentType string) error {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: retain},
		TopicName:   topic,
		Payload:     payload,
		// mochi never acknowledges inline publishes but checks that a QoS > 0
		// packet has an id.
		PacketID: uint16(qos),
	}
	if contentType != "" {
		pk.Properties.ContentType = contentType
		pk.ProtocolVersion = 5
	}
	return b.server.InjectPacket(b.inline, pk)
}

// listener serves mochi clients from a net.Listener opened by Listen, so the
// bound address is known before Serve. It tracks its connections (see
// connSet).
type listener struct {
	server *mochi.Server
	id     string
	ln     net.Listener
	log    *slog.Logger
	budget int // each connection's queue (outConn)
	broker *Broker
	end    atomic.Bool
	conns  connSet
}

func (l *listener) Init(*slog.Logger) error { return nil }
func (l *listener) ID() string              { return l.id }
func (l *listener) Address() string         { return l.ln.Addr().String() }
func (l *listener) Protocol() string        { return "tcp" }

func (l *listener) Serve(establish listeners.EstablishFn) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if !l.end.Load() {
				l.log.Error("mqtt accept failed", "err", err)
			}
			return
		}
		oc := newOutConn(conn, l.budget, 3*l.broker.cfg.SlowClientTimeout, l.broker.stalled)
		if !l.conns.add(rawCloser{oc}) {
			return // closing
		}
		go func() {
			l.broker.awaitConnect(oc)
			l.ended(oc, l.broker.establish(oc, l.id, establish))
		}()
	}
}

// ended is the end of a connection the listener accepted.
func (l *listener) ended(c *outConn, err error) {
	if err != nil {
		// Refused and dropped connections end here: not worth a warning.
		l.log.Debug("mqtt connection ended", "remote", c.RemoteAddr().String(), "err", err)
	}
	l.conns.remove(rawCloser{c})
}

// Close stops accepting, disconnects the listener's clients (with a
// DISCONNECT where the protocol has one), then closes whatever connection
// is left, so that mochi's wait for them ends.
//
// mochi's own closeClients is not used: its Clients.GetByListener takes
// the clients' read lock twice (via Len), so a client added or removed in
// between (Go's RWMutex then blocks the second read lock behind the
// writer, which waits for the first) deadlocks the shutdown. The clients
// are taken from one snapshot instead.
func (l *listener) Close(listeners.CloseFn) {
	if !l.end.CompareAndSwap(false, true) {
		return
	}
	_ = l.ln.Close()
	for _, cl := range l.server.Clients.GetAll() {
		if cl.Net.Listener == l.id && !cl.Closed() {
			_ = l.server.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
	l.conns.close()
}

// minLevel drops records below min, whatever the parent handler allows,
// and mochi's error record for each PUBLISH the lmos hook refuses (refuse):
// any client could otherwise flood the log with its payloads.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "publish packet error" {
		refused := false
		r.Attrs(func(a slog.Attr) bool {
			if err, ok := a.Value.Any().(error); ok && a.Key == "error" && (errors.Is(err, packets.ErrNotAuthorized) || errors.Is(err, packets.CodeNoMatchingSubscribers)) {
				refused = true
				return false
			}
			return true
		})
		if refused {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
