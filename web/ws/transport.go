// Package ws is the hub's WebSocket transport, part of the HTTP adapter
// (web mounts it): the LMOS envelope on /ws (PROTOCOL §5) for consumers,
// whose interactions go through hub.Router, and for WebSocket agents, whose
// Things it registers under the hub's join policy (hub.Admission) and whose
// hub.Transport it is; and MQTT over WebSocket on /mqtt (mqtt.go), handed
// to the broker as a plain connection (ConnServer).
package ws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/coder/websocket"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/ratelimit"
)

// Options tunes the WebSocket transport (PROTOCOL §5, §10); zero values
// take the defaults.
type Options struct {
	// PingInterval is how often the hub pings each connection (30 s); a
	// ping unanswered within it closes the connection.
	PingInterval time.Duration
	// IdleTimeout closes a connection that sent nothing for this long and
	// holds no subscription, invocation or registered Thing (5 min).
	IdleTimeout time.Duration
	// MessageRate and MessageBurst limit the messages one connection may
	// send per second (100, bursts of 200).
	MessageRate  float64
	MessageBurst int
	// SendQueue is how many messages may wait to be written to one
	// connection (256); see wsConn.enqueue for what happens beyond.
	SendQueue int
}

// ConnServer serves connections handed over by another adapter: the MQTT
// broker takes MQTT-over-WebSocket connections (/mqtt) this way.
type ConnServer interface {
	// ServeConn serves c until it closes and closes it.
	ServeConn(c net.Conn) error
}

// Config is what the transport needs from the hub; the HTTP adapter (web)
// builds it and mounts ServeWS and ServeMQTT.
type Config struct {
	Options
	Registry *hub.Registry
	// Router carries consumers' interactions; nil: the proxy is not running.
	Router *hub.Router
	// GroupActions runs invokeGroupAction; nil: refused (503).
	GroupActions *hub.GroupActions
	// ProxyTimeout bounds one interaction a consumer asks for.
	ProxyTimeout time.Duration
	// Admission is the hub's join policy (as for MQTT); nil: open, and no
	// Thing holds a credential.
	Admission *hub.Admission
	// Access is the one access policy; every consumer message is checked
	// against it (nil: anonymous operate).
	Access *hub.Access
	// Publisher carries what agents emit to MQTT consumers, Streams serves
	// observations and event subscriptions of agents' Things, Conns takes
	// /mqtt connections; nil without a broker.
	Publisher hub.Publisher
	Streams   hub.Transport
	Conns     ConnServer
	// Groups carries group channels (subscribeGroup, publishGroup;
	// groups.go); nil without a broker.
	Groups hub.GroupChannels
	// AllowedOrigins are the origins (https://host:port, or *) besides the
	// hub's own host that /ws and /mqtt accept.
	AllowedOrigins []string
	Logger         *slog.Logger
	// Metrics is the set /metrics serves.
	Metrics *metrics.Set
	// Closing is closed when the hub stops: connections opening then are
	// closed at once.
	Closing <-chan struct{}
}

// wsMaxMessage is the largest frame /ws reads (1 MiB, close 1009 beyond).
const wsMaxMessage = 1 << 20

// wsMaxInFlight bounds the interactions one connection runs at once.
const wsMaxInFlight = 64

// wsMaxStreams bounds the observations and event subscriptions of one
// connection: each holds a goroutine and a broker subscription.
const wsMaxStreams = 256

// wsWriteTimeout bounds one frame write; a peer that takes longer is gone.
const wsWriteTimeout = 10 * time.Second

// Transport is the WebSocket transport: consumers and agents on /ws, and
// the hub.Transport for the Things those agents registered.
type Transport struct {
	reg     *hub.Registry
	rt      *hub.Router
	log     *slog.Logger
	cfg     Config
	metrics *metrics.Set
	closing <-chan struct{}

	// From Config (Publisher, Streams, Conns); nil without a broker.
	publisher hub.Publisher
	streams   hub.Transport
	conns     ConnServer

	adm     *hub.Admission // the join policy of registerThing
	access  *hub.Access    // the access policy of consumers' messages
	origins []string       // Origin host patterns besides the hub's own host

	mu     sync.Mutex
	agents map[string]*wsConn // Thing id → the connection it registered on
	open   map[*wsConn]struct{}
	wg     sync.WaitGroup
	nextID atomic.Uint64

	creds credentialSender // membership credentials to agents (credentials.go)

	connections *metrics.Counter
	dropped     *metrics.Counter // droppable messages dropped for slow consumers
	slowClosed  *metrics.Counter // connections closed because their queue was full
}

// New returns the WebSocket transport; register it with the Router for
// hub.SourceWS.
func New(cfg Config) *Transport {
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.MessageRate == 0 {
		cfg.MessageRate = 100
	}
	if cfg.MessageBurst <= 0 {
		cfg.MessageBurst = 200
	}
	if cfg.SendQueue <= 0 {
		cfg.SendQueue = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	g := &Transport{
		reg: cfg.Registry, rt: cfg.Router, log: cfg.Logger.With("component", "ws"), cfg: cfg,
		metrics: cfg.Metrics, closing: cfg.Closing,
		adm:     cfg.Admission,
		access:  cfg.Access,
		origins: originHosts(cfg.AllowedOrigins),

		publisher: cfg.Publisher, streams: cfg.Streams, conns: cfg.Conns,
		agents: make(map[string]*wsConn),
		open:   make(map[*wsConn]struct{}),
	}
	if g.adm == nil {
		g.adm, _ = hub.NewAdmission(g.reg, nil, "open", 0, 0) // "open" cannot fail
	}
	s := g
	s.metrics.NewGauge("lmos_ws_connections", func() float64 {
		g.mu.Lock()
		defer g.mu.Unlock()
		return float64(len(g.open))
	})
	g.connections = s.metrics.NewCounter("lmos_ws_connections_total")
	g.dropped = s.metrics.NewCounter("lmos_ws_dropped_total")
	g.slowClosed = s.metrics.NewCounter("lmos_ws_slow_closed_total")
	g.watchCredentials()
	return g
}

// Interactions reports the hub → agent requests waiting for an agent's
// reply and the streams consumers hold open on their connections: both
// are 0 when nothing is in progress. Agents' own streams go through the
// broker and are counted there.
func (g *Transport) Interactions() (requests, streams int) {
	for _, c := range g.openConns() {
		c.mu.Lock()
		requests += len(c.pending)
		streams += len(c.streams)
		c.mu.Unlock()
	}
	return requests, streams
}

// ResetPresence sets every Thing that is online via WebSocket offline:
// at start no agent is connected yet (after a crash, say).
func (s *Transport) ResetPresence(ctx context.Context) {
	things, _ := s.reg.List(0, 0)
	for _, t := range things {
		if t.Meta.Presence.Via == hub.SourceWS && t.Meta.Presence.Status == hub.PresenceOnline {
			if err := s.reg.SetPresence(ctx, t.ID, hub.PresenceOffline, hub.SourceWS); err != nil {
				s.log.Warn("cannot reset presence", "id", t.ID, "err", err)
			}
		}
	}
}

// openConns is a snapshot of the open connections.
func (g *Transport) openConns() []*wsConn {
	g.mu.Lock()
	defer g.mu.Unlock()
	conns := make([]*wsConn, 0, len(g.open))
	for c := range g.open {
		conns = append(conns, c)
	}
	return conns
}

// closeAll ends every connection (going away) and waits for their
// goroutines, at most d.
func (g *Transport) closeAll(d time.Duration) {
	for _, c := range g.openConns() {
		c.close(websocket.StatusGoingAway, "the hub is stopping")
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		g.log.Warn("websocket connections did not end in time")
	}
}

// accept upgrades a request after the Origin check: the Origin must be the
// hub's own host or one of http.allowedOrigins; programs that send no
// Origin (not browsers) pass. The HTTP server's read and write deadlines
// are cleared first: they would end a long-lived socket.
func (t *Transport) accept(w http.ResponseWriter, r *http.Request, subprotocols []string) (*websocket.Conn, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	return websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:   subprotocols,
		OriginPatterns: t.origins,
	})
}

// originHosts turns allowed origins (https://host:port, or *) into the host
// patterns coder/websocket matches an Origin's host against.
func originHosts(origins []string) []string {
	var out []string
	for _, o := range origins {
		if o == "*" {
			out = append(out, "*")
			continue
		}
		if u, err := url.Parse(o); err == nil && u.Host != "" {
			out = append(out, strings.ToLower(u.Host))
		}
	}
	return out
}

// ServeWS is GET /ws: the LMOS WebSocket subprotocol (PROTOCOL §5).
// remote is the client's address as the HTTP adapter names it (one per
// IPv4 address or IPv6 /64): the join rate and quotas count by it.
// p is the consumer as the upgrade request identified it (its token, or
// anonymous); a connection that registers a Thing without a token acts as
// that Thing from then on.
func (t *Transport) ServeWS(w http.ResponseWriter, r *http.Request, remote string, p hub.Principal) {
	c, err := t.accept(w, r, []string{lmos.WSSubprotocol, "webthingprotocol"})
	if err != nil {
		t.log.Debug("websocket refused", "remote", r.RemoteAddr, "err", err)
		return
	}
	t.serve(c, remote, p)
}

// CloseAll ends every connection (going away) and waits for their
// goroutines, at most d.
func (t *Transport) CloseAll(d time.Duration) { t.closeAll(d) }

func (t *Transport) router() (*hub.Router, error) {
	if t.rt == nil {
		return nil, hub.Errorf(hub.EUNAVAILABLE, "the interaction proxy is not running")
	}
	return t.rt, nil
}

// countRefusal counts a refused message by reason, as every door does
// (lmos_ws_refused_total, PROTOCOL §10.0).
func (t *Transport) countRefusal(err error) {
	t.metrics.GetOrCreateCounter(fmt.Sprintf(`lmos_ws_refused_total{reason=%q}`, hub.RefusalReason(err))).Inc()
}

// wsConn is one /ws connection: a consumer, an agent, or both.
type wsConn struct {
	g      *Transport
	c      *websocket.Conn
	id     uint64
	remote string
	ctx    context.Context
	cancel context.CancelFunc
	log    *slog.Logger

	// The send queue: frames (the type in the first byte) written in order
	// by a writer goroutine that runs only while there is something to
	// write, so an idle connection holds no goroutine of its own but the
	// read loop (PROTOCOL §10, RSS per connection in docs/PERFORMANCE.md).
	qmu     sync.Mutex
	queue   []qframe
	writing bool
	wake    chan struct{} // a frame was queued for the running writer
	pinger  *time.Timer

	lastRead atomic.Int64 // unix nanoseconds
	inFlight chan struct{}
	rate     *ratelimit.Limiter
	closing  sync.Once
	wg       sync.WaitGroup // the interactions and streams of this connection

	mu      sync.Mutex
	streams map[string]context.CancelFunc // "p|id|name", "e|id|name"
	actions map[string]*wsInvocation      // "id|action": the latest invocation
	things  map[string]bool               // Things registered on this connection
	// members are the Things of things this connection proved to be:
	// created here, or registered with its bound key's proof. Only for
	// them does it speak on group channels and get membership credentials
	// (groups.go, credentials.go): anyone may re-register an unsigned
	// Thing whose socket closed, and that proves nothing.
	members map[string]bool
	media   string                   // the agent's encoding (its registerThing frame)
	pending map[string]*agentRequest // hub → agent requests by messageId
	// parked are this connection's joins waiting for approval (join mode
	// approve), their ids reserved for it meanwhile.
	parked map[string]*hub.JoinWaiter
	who    hub.Principal // the consumer, for the access policy

	groups wsGroups // group channel subscriptions (groups.go)
}

// qframe is a queued frame (the type in the first byte); a frame with a
// gate is not written once the gate is set (a group message to a member
// whose membership ended while it waited).
type qframe struct {
	f    []byte
	gate *atomic.Bool
}

// wsInvocation is what queryAction and cancelAction see.
type wsInvocation struct {
	status atomic.Value // string

	mu        sync.Mutex
	cancel    func()       // cancels the delivery once it runs
	cancelled *atomic.Bool // set by a cancel before the delivery ran
}

func (inv *wsInvocation) stop() {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.cancel()
}

func (g *Transport) serve(c *websocket.Conn, remote string, p hub.Principal) {
	c.SetReadLimit(wsMaxMessage)
	ctx, cancel := context.WithCancel(context.Background())
	wc := &wsConn{
		g: g, c: c, id: g.nextID.Add(1), remote: remote, ctx: ctx, cancel: cancel,
		inFlight: make(chan struct{}, wsMaxInFlight),
		wake:     make(chan struct{}, 1),
		rate:     ratelimit.New(g.cfg.MessageRate, g.cfg.MessageBurst, nil),
		streams:  make(map[string]context.CancelFunc),
		actions:  make(map[string]*wsInvocation),
		things:   make(map[string]bool),
		members:  make(map[string]bool),
		pending:  make(map[string]*agentRequest),
		parked:   make(map[string]*hub.JoinWaiter),
		who:      p,
	}
	wc.log = g.log.With("conn", wc.id, "remote", remote)
	wc.lastRead.Store(time.Now().UnixNano())
	// A connection that arrives while the hub stops (an agent redialling at
	// once) is turned away before it joins g.wg: closeAll may be waiting on
	// it, and an Add during that Wait panics. closeAll snapshots g.open
	// under g.mu after closing is closed, so none joins after it.
	g.mu.Lock()
	select {
	case <-g.closing:
		g.mu.Unlock()
		cancel()
		_ = c.Close(websocket.StatusGoingAway, "the hub is stopping")
		return
	default:
	}
	g.open[wc] = struct{}{}
	g.wg.Add(1)
	g.mu.Unlock()
	g.connections.Inc()
	defer g.wg.Done()
	// Reset after the assignment, so keepAlive sees wc.pinger.
	wc.pinger = time.AfterFunc(time.Hour, wc.keepAlive)
	wc.pinger.Reset(g.cfg.PingInterval)
	wc.readLoop()
	wc.pinger.Stop()
	// The read loop has called abort, or close, which cancels wc.ctx once
	// the close handshake is over: cancelling it here would drop the
	// TCP connection under a close frame still being written (coder/websocket
	// closes the connection when a write's context ends), and the peer would
	// see EOF instead of, say, 1003.
	wc.wg.Wait()
	wc.unregister()
	g.mu.Lock()
	delete(g.open, wc)
	g.mu.Unlock()
}

// close closes the connection with code, once; the read loop then ends.
func (wc *wsConn) close(code websocket.StatusCode, reason string) {
	// The read loop sees the close handshake end and returns; cancelling
	// its context first would drop the TCP connection without a close
	// frame (coder/websocket closes on a cancelled read).
	wc.closing.Do(func() {
		go func() {
			_ = wc.c.Close(code, reason)
			wc.cancel()
		}()
	})
}

// abort drops the TCP connection at once, without a close handshake: for
// a peer that no longer answers pings, a close frame would only wait 5 s
// for a reply that never comes, and its Things would stay online meanwhile.
func (wc *wsConn) abort() {
	wc.closing.Do(func() {
		_ = wc.c.CloseNow()
		wc.cancel()
	})
}

func (wc *wsConn) readLoop() {
	for {
		typ, frame, err := wc.c.Read(wc.ctx)
		if err != nil {
			// Too large: the library has closed with 1009 already.
			if !errors.Is(err, context.Canceled) && websocket.CloseStatus(err) == -1 {
				wc.log.Debug("websocket read ended", "err", err)
			}
			// The connection is gone or closed already (the library
			// answers a peer's close frame itself): no handshake to wait
			// for, and the Things go offline at once.
			wc.abort()
			return
		}
		wc.lastRead.Store(time.Now().UnixNano())
		media := frameMedia(typ)
		m, err := decodeMessage(wc.g.reg.Decoder(), frame, media)
		if errors.Is(err, errUnparseable) {
			wc.close(websocket.StatusUnsupportedData, "the frame is not a JSON (text) or CBOR (binary) envelope object")
			return
		}
		if err != nil {
			wc.replyError(m, err)
			continue
		}
		// Replies of an agent to the hub's requests are as many as the
		// requests consumers made: only what a peer starts is limited.
		if !wc.awaited(m) {
			if ok, wait := wc.rate.Allow(""); !ok {
				wc.replyError(m, hub.Errorf(hub.ERATELIMIT, "too many messages on this connection; retry in %s", wait.Round(time.Millisecond)))
				continue
			}
		}
		wc.dispatch(m)
	}
}

// awaited reports whether m answers a request the hub sent this agent.
func (wc *wsConn) awaited(m *wsMessage) bool {
	if m.CorrelationID == "" {
		return false
	}
	switch m.MessageType {
	case mtPropertyReading, mtActionStatus, mtAcknowledgement, mtError:
	default:
		return false
	}
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return wc.pending[m.CorrelationID] != nil
}

// writerLinger is how long an idle writer goroutine waits for more frames
// before it exits: a busy connection keeps its writer (and its grown
// stack), an idle one holds none.
const writerLinger = time.Second

// drain writes queued frames in order until the queue has stayed empty for
// writerLinger; a write that fails or takes longer than wsWriteTimeout
// closes the connection.
func (wc *wsConn) drain() {
	linger := time.NewTimer(writerLinger)
	defer linger.Stop()
	for {
		wc.qmu.Lock()
		if wc.ctx.Err() != nil {
			wc.queue, wc.writing = nil, false
			wc.qmu.Unlock()
			return
		}
		if len(wc.queue) == 0 {
			wc.qmu.Unlock()
			linger.Reset(writerLinger)
			select {
			case <-wc.wake:
				continue
			case <-wc.ctx.Done():
				continue
			case <-linger.C:
			}
			wc.qmu.Lock()
			if len(wc.queue) == 0 {
				wc.writing = false
				wc.qmu.Unlock()
				return
			}
			wc.qmu.Unlock()
			continue
		}
		qf := wc.queue[0]
		wc.queue[0] = qframe{}
		wc.queue = wc.queue[1:]
		wc.qmu.Unlock()
		f := qf.f
		if qf.gate != nil && qf.gate.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(wc.ctx, wsWriteTimeout)
		err := wc.c.Write(ctx, websocket.MessageType(f[0]), f[1:])
		cancel()
		if err != nil {
			wc.close(websocket.StatusGoingAway, "write failed")
			wc.qmu.Lock()
			wc.queue, wc.writing = nil, false
			wc.qmu.Unlock()
			return
		}
	}
}

// keepAlive runs every PingInterval on a timer: it closes an idle
// connection (nothing received for IdleTimeout and nothing open on it),
// else pings it; a ping unanswered within the interval closes it.
func (wc *wsConn) keepAlive() {
	if wc.ctx.Err() != nil {
		return
	}
	idle := time.Since(time.Unix(0, wc.lastRead.Load()))
	if idle > wc.g.cfg.IdleTimeout && wc.quiet() {
		wc.close(websocket.StatusGoingAway, "idle")
		return
	}
	ctx, cancel := context.WithTimeout(wc.ctx, wc.g.cfg.PingInterval)
	err := wc.c.Ping(ctx)
	cancel()
	if err != nil {
		if wc.ctx.Err() == nil {
			wc.log.Debug("websocket ping unanswered", "err", err)
			wc.abort()
		}
		return
	}
	wc.pinger.Reset(wc.g.cfg.PingInterval)
}

// quiet reports whether nothing is open on the connection.
func (wc *wsConn) quiet() bool {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return len(wc.streams) == 0 && len(wc.things) == 0 && len(wc.pending) == 0 && len(wc.inFlight) == 0 && wc.groups.count() == 0
}

// What enqueue does when the send queue is full (PROTOCOL §10).
type queuePolicy int

const (
	// closeIfFull: a reply; a consumer that does not read its own replies
	// would hold memory without bound, so it is closed with 1013 Try Again
	// Later (lmos_ws_slow_closed_total).
	closeIfFull queuePolicy = iota
	// dropIfFull: an event, an observed value, an intermediate action
	// status; dropped and counted (lmos_ws_dropped_total).
	dropIfFull
	// refuseIfFull: a request of the hub to an agent; refused (the
	// consumer gets 503), the agent stays connected.
	refuseIfFull
)

// enqueue queues a message for the writer; the send queue is bounded and
// policy says what happens when it is full. It never waits: a slow
// consumer never slows an agent or another consumer.
func (wc *wsConn) enqueue(m *wsOut, media string, policy queuePolicy) bool {
	return wc.enqueueGated(m, media, policy, nil)
}

// enqueueGated is enqueue of a frame dropped unwritten once gate is set.
func (wc *wsConn) enqueueGated(m *wsOut, media string, policy queuePolicy, gate *atomic.Bool) bool {
	b, err := m.encode(media)
	if err != nil {
		wc.log.Warn("cannot encode a websocket message", "type", m.MessageType, "err", err)
		return false
	}
	f := make([]byte, 1+len(b))
	f[0] = byte(frameType(media))
	copy(f[1:], b)
	wc.qmu.Lock()
	if wc.ctx.Err() != nil {
		wc.qmu.Unlock()
		return false
	}
	if len(wc.queue) < wc.g.cfg.SendQueue {
		wc.queue = append(wc.queue, qframe{f, gate})
		if !wc.writing {
			wc.writing = true
			go wc.drain()
		} else {
			select {
			case wc.wake <- struct{}{}:
			default:
			}
		}
		wc.qmu.Unlock()
		return true
	}
	wc.qmu.Unlock()
	switch policy {
	case dropIfFull:
		wc.g.dropped.Inc()
		return false
	case refuseIfFull:
		return false
	}
	wc.g.slowClosed.Inc()
	wc.log.Info("closing a websocket consumer that does not read its replies")
	wc.close(websocket.StatusTryAgainLater, "send queue full")
	return false
}

// reply starts a reply to m: the same thingId, correlationId = its
// messageId, trace context passed through.
func reply(m *wsMessage, typ string) *wsOut {
	out := &wsOut{MessageID: uuid.NewString(), MessageType: typ}
	if m != nil {
		out.ThingID, out.CorrelationID = m.ThingID, m.MessageID
		out.Traceparent, out.Tracestate = m.Traceparent, m.Tracestate
	}
	return out
}

func (wc *wsConn) mediaOf(m *wsMessage) string {
	if m == nil {
		return lmos.MediaJSON
	}
	return m.Media
}

// replyError answers m with an error message: the RFC 9457 problem of err
// (PROTOCOL §10), instance = /ws.
func (wc *wsConn) replyError(m *wsMessage, err error) {
	var p lmos.Problem
	var pe *problemErr
	if errors.As(err, &pe) {
		p = pe.p
	} else {
		p = hub.ProblemOf(err)
	}
	if pe == nil || pe.own {
		// A Thing's own failure is passed on, not refused by the hub.
		wc.g.countRefusal(err)
	}
	p.Instance = "/ws"
	if p.Status >= 500 && p.Status != 502 && p.Status != 503 && p.Status != 504 {
		wc.log.Error("websocket request failed", "err", err)
	}
	out := reply(m, outError)
	out.setProblem(p)
	wc.enqueue(out, wc.mediaOf(m), closeIfFull)
}

func (wc *wsConn) ack(m *wsMessage, message string) {
	out := reply(m, outAcknowledgement)
	out.Message = message
	wc.enqueue(out, m.Media, closeIfFull)
}

// dispatch handles one message. Interactions run on goroutines of their
// own (at most wsMaxInFlight at once), so a slow Thing never stops the
// connection from reading.
func (wc *wsConn) dispatch(m *wsMessage) {
	switch m.MessageType {
	case mtReadProperty, mtWriteProperty, mtInvokeAction:
		if m.ThingID == "" || m.Name == "" {
			wc.replyError(m, missing(m))
			return
		}
		select {
		case wc.inFlight <- struct{}{}:
		default:
			wc.replyError(m, hub.Errorf(hub.ERATELIMIT, "too many interactions in progress on this connection (at most %d)", wsMaxInFlight))
			return
		}
		// The invocation is known before this returns, so a queryAction or
		// cancelAction right behind it finds it.
		var inv *wsInvocation
		if m.MessageType == mtInvokeAction {
			inv = &wsInvocation{}
			inv.status.Store(hub.StatusPending)
			var cancelled atomic.Bool
			inv.cancel = func() { cancelled.Store(true) }
			inv.cancelled = &cancelled
			wc.mu.Lock()
			wc.actions[m.ThingID+"|"+m.Name] = inv
			wc.mu.Unlock()
		}
		wc.wg.Go(func() {
			defer func() { <-wc.inFlight }()
			wc.interact(m, inv)
		})
	case mtObserveProperty, mtSubscribeEvent:
		if m.ThingID == "" || m.Name == "" {
			wc.replyError(m, missing(m))
			return
		}
		op := hub.OpObserveProperty
		if m.MessageType == mtSubscribeEvent {
			op = hub.OpSubscribeEvent
		}
		wc.subscribe(m, op, m.Name, true)
	case mtUnobserveProperty, mtUnsubscribeEvent:
		if m.ThingID == "" || m.Name == "" {
			wc.replyError(m, missing(m))
			return
		}
		kind := "p"
		if m.MessageType == mtUnsubscribeEvent {
			kind = "e"
		}
		wc.stopStream(kind + "|" + m.ThingID + "|" + m.Name)
		wc.ack(m, "unsubscribed")
	case mtSubscribeAllEvents:
		wc.subscribeAll(m)
	case mtUnsubscribeAllEvent:
		wc.mu.Lock()
		for k, cancel := range wc.streams {
			if strings.HasPrefix(k, "e|"+m.ThingID+"|") {
				cancel()
				delete(wc.streams, k)
			}
		}
		wc.mu.Unlock()
		wc.ack(m, "unsubscribed")
	case mtQueryAction, mtCancelAction:
		wc.queryAction(m)
	case lmos.WSInvokeGroupAction:
		wc.invokeGroupAction(m)
	case mtRegisterThing:
		wc.register(m)
	case lmos.WSSubscribeGroup, lmos.WSUnsubscribeGroup, lmos.WSPublishGroup:
		wc.groupMessage(m)
	case mtPropertyReading, mtActionStatus, mtEvent, mtAcknowledgement, mtError:
		wc.fromAgent(m)
	default:
		p := lmos.ProblemFor(http.StatusBadRequest, fmt.Sprintf("the hub does not know the messageType %q", lmos.Truncate(m.MessageType, 64)))
		p.Type = lmos.ErrorTypeBase + "unsupported-message-type"
		wc.replyError(m, &problemErr{own: true, p: p})
	}
}

// missing is the error of a request without thingId or affordance name.
func missing(m *wsMessage) error {
	var f []hub.FieldError
	if m.ThingID == "" {
		f = append(f, hub.FieldError{Field: "/thingId", Description: "is required"})
	}
	if m.Name == "" {
		f = append(f, hub.FieldError{Field: "/name", Description: "is required"})
	}
	return &hub.Error{Code: hub.EINVALID, Message: "the message lacks required members", Fields: f}
}

// interaction builds the Interaction for a consumer's request.
func (wc *wsConn) interaction(m *wsMessage, op hub.Op) (hub.Interaction, error) {
	in := hub.Interaction{ThingID: m.ThingID, Op: op, Name: m.Name, Accept: m.Media, ContentType: m.Media, Door: hub.SourceWS,
		Traceparent: m.Traceparent, Tracestate: m.Tracestate}
	if m.HasValue {
		b, err := hub.EncodeValue(m.Value, m.Media)
		if err != nil {
			return in, err
		}
		in.Input = b
	}
	return in, nil
}

func (wc *wsConn) router() (*hub.Router, error) { return wc.g.router() }

// interact runs readProperty, writeProperty or invokeAction.
func (wc *wsConn) interact(m *wsMessage, inv *wsInvocation) {
	rt, err := wc.router()
	if err != nil {
		wc.replyError(m, err)
		return
	}
	op := map[string]hub.Op{mtReadProperty: hub.OpReadProperty, mtWriteProperty: hub.OpWriteProperty, mtInvokeAction: hub.OpInvokeAction}[m.MessageType]
	in, err := wc.interaction(m, op)
	if err == nil && op == hub.OpWriteProperty && !m.HasValue {
		err = &hub.Error{Code: hub.EINVALID, Message: "writeProperty needs a value", Fields: []hub.FieldError{{Field: "/value", Description: "is required"}}}
	}
	if err == nil {
		var t hub.Thing
		if _, t, err = rt.Check(in); err == nil {
			err = wc.allow(op, &t)
		}
	}
	if err != nil {
		if inv != nil {
			inv.status.Store(hub.StatusFailed)
		}
		wc.replyError(m, err)
		return
	}
	ctx, cancel := context.WithTimeout(wc.ctx, wc.g.cfg.ProxyTimeout)
	defer cancel()
	if inv != nil {
		inv.mu.Lock()
		if inv.cancelled.Load() {
			cancel()
		}
		inv.cancel = cancel
		inv.mu.Unlock()
	}
	err = rt.Deliver(ctx, in, func(res hub.Result) error {
		if inv != nil {
			inv.status.Store(res.Status)
		}
		wc.result(m, op, res)
		return nil
	})
	if err != nil {
		if inv != nil {
			inv.status.Store(hub.StatusFailed)
		}
		wc.replyError(m, err)
	}
}

// result sends one result of a consumer's interaction.
func (wc *wsConn) result(m *wsMessage, op hub.Op, res hub.Result) {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	switch op {
	case hub.OpReadProperty:
		if res.Status == hub.StatusFailed {
			wc.replyError(m, problemError(res.Problem))
			return
		}
		out := reply(m, outPropertyReading)
		out.Name, out.Value, out.Timestamp = m.Name, rawValue(res.Data), now
		if m.Kotlin {
			out.Property, out.Data = m.Name, rawValue(res.Data)
		}
		wc.enqueue(out, m.Media, closeIfFull)
	case hub.OpWriteProperty:
		if res.Status == hub.StatusFailed {
			wc.replyError(m, problemError(res.Problem))
			return
		}
		wc.ack(m, "written")
	case hub.OpInvokeAction:
		out := reply(m, outActionStatus)
		out.Action, out.Status, out.Output, out.Timestamp = m.Name, res.Status, rawValue(res.Data), now
		if res.Status == hub.StatusFailed {
			p := hub.ThingProblem(res.Problem)
			p.Instance = "/ws"
			out.Error = &p
		}
		policy := closeIfFull
		if !res.Final() {
			policy = dropIfFull
		}
		wc.enqueue(out, m.Media, policy)
	}
}

// problemError turns a Thing's problem (hub.ThingFailed, status 502) into
// an error that carries it as is.
func problemError(p *lmos.Problem) error {
	return &problemErr{p: hub.ThingProblem(p)}
}

// problemErr carries a problem as is: a Thing's (status 502) or, with own,
// one of the hub's that no error code stands for.
type problemErr struct {
	p   lmos.Problem
	own bool
}

func (e *problemErr) Error() string { return e.p.Detail }

// queryAction answers queryAction with the status of this connection's
// latest invocation of that action, and cancelAction by cancelling it.
func (wc *wsConn) queryAction(m *wsMessage) {
	wc.mu.Lock()
	inv := wc.actions[m.ThingID+"|"+m.Name]
	wc.mu.Unlock()
	if inv == nil {
		wc.replyError(m, hub.Errorf(hub.ENOTFOUND, "this connection has not invoked action %q of Thing %q", m.Name, m.ThingID))
		return
	}
	if m.MessageType == mtCancelAction {
		inv.stop()
		wc.ack(m, "cancelled")
		return
	}
	out := reply(m, outActionStatus)
	out.Action, out.Status = m.Name, inv.status.Load().(string)
	wc.enqueue(out, m.Media, closeIfFull)
}

// subscribe starts an observation or event subscription through the
// Router and acknowledges it once it is in place (or answers the error).
func (wc *wsConn) subscribe(m *wsMessage, op hub.Op, name string, ackIt bool) {
	kind := "p"
	if op == hub.OpSubscribeEvent {
		kind = "e"
	}
	key := kind + "|" + m.ThingID + "|" + name
	rt, err := wc.router()
	if err != nil {
		wc.replyError(m, err)
		return
	}
	in := hub.Interaction{ThingID: m.ThingID, Op: op, Name: name, Accept: m.Media, Door: hub.SourceWS}
	_, t, err := rt.Check(in)
	if err == nil {
		err = wc.allow(op, &t)
	}
	if err != nil {
		if ackIt {
			wc.replyError(m, err)
		}
		return
	}
	ctx, cancel, ok := wc.reserveStream(m, key, ackIt)
	if !ok {
		return
	}
	wc.wg.Go(func() {
		defer cancel()
		started := false
		var refused atomic.Bool // read after Deliver returns
		err := rt.Deliver(ctx, in, func(res hub.Result) error {
			if res.Status == hub.StatusPending {
				if !started && ackIt {
					wc.ack(m, "subscribed")
				}
				started = true
				return nil
			}
			if err := wc.allowAgain(op, m.ThingID, t); err != nil {
				if refused.CompareAndSwap(false, true) {
					wc.replyError(m, err)
				}
				cancel()
				return err
			}
			wc.sendStreamed(m, op, name, res.Data)
			return nil
		})
		wc.mu.Lock()
		if wc.streams[key] != nil && (ctx.Err() == nil || refused.Load()) {
			delete(wc.streams, key)
		}
		wc.mu.Unlock()
		if err != nil && wc.ctx.Err() == nil && ctx.Err() == nil {
			wc.replyError(m, err)
		}
	})
}

// reserveStream holds key in the connection's streams before the stream
// starts, so that an unsubscribe or a close meanwhile cancels it. It
// reports false, having answered, when key is streaming already
// (acknowledged again if ackIt) or the connection holds wsMaxStreams.
func (wc *wsConn) reserveStream(m *wsMessage, key string, ackIt bool) (context.Context, context.CancelFunc, bool) {
	wc.mu.Lock()
	if _, dup := wc.streams[key]; dup {
		wc.mu.Unlock()
		if ackIt {
			wc.ack(m, "subscribed")
		}
		return nil, nil, false
	}
	if len(wc.streams) >= wsMaxStreams {
		wc.mu.Unlock()
		wc.replyError(m, hub.Errorf(hub.ERATELIMIT, "too many subscriptions on this connection (at most %d)", wsMaxStreams))
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(wc.ctx)
	wc.streams[key] = cancel
	wc.mu.Unlock()
	return ctx, cancel, true
}

// allowAgain decides a delivery again, as over MQTT: a token revoked or
// expired since, a Thing that now requires security or a consumer Thing
// deleted since ends the stream (PROTOCOL §3.5). t is the Thing as it was
// at subscribe, used when it is gone now.
func (wc *wsConn) allowAgain(op hub.Op, thingID string, t hub.Thing) error {
	if now, err := wc.g.reg.Get(thingID); err == nil {
		t = now
	}
	return wc.allow(op, &t)
}

// sendStreamed sends one reading or event of the stream m opened.
func (wc *wsConn) sendStreamed(m *wsMessage, op hub.Op, name string, data []byte) {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if op == hub.OpSubscribeEvent {
		out := &wsOut{MessageID: uuid.NewString(), MessageType: outEvent, ThingID: m.ThingID,
			Event: name, Data: rawValue(data), Timestamp: now, CorrelationID: m.MessageID}
		wc.enqueue(out, m.Media, dropIfFull)
		return
	}
	out := &wsOut{MessageID: uuid.NewString(), MessageType: outPropertyReading, ThingID: m.ThingID,
		Name: name, Value: rawValue(data), Timestamp: now, CorrelationID: m.MessageID}
	if m.Kotlin {
		out.Property, out.Data = name, rawValue(data)
	}
	wc.enqueue(out, m.Media, dropIfFull)
}

func (wc *wsConn) stopStream(key string) {
	wc.mu.Lock()
	if cancel := wc.streams[key]; cancel != nil {
		cancel()
		delete(wc.streams, key)
	}
	wc.mu.Unlock()
}

// subscribeAll subscribes every event the Thing's TD declares, with one
// acknowledgement.
func (wc *wsConn) subscribeAll(m *wsMessage) {
	if m.ThingID == "" {
		wc.replyError(m, &hub.Error{Code: hub.EINVALID, Message: "the message lacks required members",
			Fields: []hub.FieldError{{Field: "/thingId", Description: "is required"}}})
		return
	}
	t, err := wc.g.reg.Get(m.ThingID)
	if err == nil {
		err = wc.allow(hub.OpSubscribeEvent, &t)
	}
	if err != nil {
		wc.replyError(m, err)
		return
	}
	raw, err := wc.g.reg.Raw(m.ThingID)
	if err != nil {
		wc.replyError(m, err)
		return
	}
	doc, err := wc.g.reg.Decoder().ParseDocument(raw)
	if err != nil {
		wc.replyError(m, err)
		return
	}
	events, _ := doc["events"].(map[string]any)
	for name := range events {
		wc.subscribe(m, hub.OpSubscribeEvent, name, false)
	}
	wc.ack(m, "subscribed")
}

// allow asks the access policy whether this connection's consumer may do
// op on thing (PROTOCOL §5, "Access").
func (wc *wsConn) allow(op hub.Op, thing *hub.Thing) error {
	a := wc.g.access
	if a == nil {
		a = hub.OpenAccess()
	}
	wc.mu.Lock()
	p := wc.who
	wc.mu.Unlock()
	if p.Kind == hub.ByThing {
		// The Thing this connection registered, while it is registered:
		// one an admin deleted leaves an anonymous connection.
		// Whether the hub picked it is read now: an approval or an
		// admin's write may come while the socket stays open.
		t, err := wc.g.reg.Get(p.ThingID)
		if err != nil {
			p = hub.AnonymousFrom(hub.SourceOf(wc.remote))
		} else {
			p.Admitted = t.Meta.Admitted
		}
	}
	return a.Allow(p, op, thing)
}
