// Package web is the hub's HTTP adapter: the W3C WoT Discovery directory API
// (/things, search, SSE change events, the directory TD), the interaction
// proxy (/proxy, through hub.Router), the hub API under /api, health and
// Prometheus metrics. It mounts the WebSocket transport of package web/ws
// on /ws and /mqtt.
package web

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/web/dashboard"
	"github.com/eclipse-lmos/lmos-hub/web/ws"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/ratelimit"
)

// DefaultMaxStreamQueueBytes is Config.MaxStreamQueueBytes's default: four
// frames of the largest TD (256 KiB), and a thousand streams could pin no
// more than a few of them, the frames being shared.
const DefaultMaxStreamQueueBytes = 1 << 20

// Config is what the HTTP adapter needs from the hub's configuration.
type Config struct {
	HubID   string
	HubName string
	// Key is the hub's own did:key: /api/status shows its DID and the
	// directory TD carries a proof by it. Nil: neither.
	Key     ed25519.PrivateKey
	Version string
	// MaxBodyBytes bounds request bodies (TDs, patches); default 256 KiB.
	MaxBodyBytes int64
	// WriteRate and WriteBurst limit writes per client address; rate 0
	// disables the limit.
	WriteRate  float64
	WriteBurst int
	// Access is the one access policy (hub.Access) every route and the
	// WebSocket transport ask; nil: anonymous operate.
	Access *hub.Access
	// Checks are the components /healthz reports; a nil error means up.
	Checks map[string]func() error
	// Optional are components /healthz reports without being down when
	// they fail, for the hub serves without them (mDNS): a check returns
	// its state ("up", "off", "starting", …) or its error, which makes
	// the status "degraded" (PROTOCOL §3.4).
	Optional map[string]func() (string, error)
	// StoreSize reports the store's size in bytes for status and metrics.
	StoreSize func() int64
	// Backup writes a consistent snapshot of the store (POST /api/backup);
	// nil answers 503 there.
	Backup func(io.Writer) (int64, error)
	// MDNS reports the state of mDNS for the status (nil: not shown); it
	// is read per request, since mDNS opens after HTTP serves.
	MDNS func() any
	// PeerCandidates lists the other lmos-hubs mDNS sees on the LAN, for
	// GET /api/peers/candidates (nil: an empty list).
	PeerCandidates func() any
	// Links reports the hub's links beyond itself: remote registry sync,
	// pulls, the MQTT bridge, federation peers (nil: none).
	Links func() []hub.LinkState
	// Router carries proxied interactions (PROTOCOL §3.3) to the Things;
	// nil answers 503 there.
	Router *hub.Router
	// GroupActions runs group actions (POST /api/groups/{gid}/actions/{name},
	// WebSocket invokeGroupAction); nil answers 503 there.
	GroupActions *hub.GroupActions
	// ProxyTimeout bounds how long the proxy waits for a final result
	// (default 30 s).
	ProxyTimeout time.Duration
	// BrokerPort is the MQTT broker's port for the directory TD's
	// lmos:broker link; 0 leaves the link out.
	BrokerPort int
	// TLS describes the TLS doors for the directory TD and /api/status;
	// nil when TLS is off.
	TLS *TLSInfo
	// Publisher carries what WebSocket agents emit to MQTT consumers;
	// nil without a broker.
	Publisher hub.Publisher
	// Streams serves observations and event subscriptions of WebSocket
	// agents (their values flow through Publisher); nil without a broker.
	Streams hub.Transport
	// Conns takes MQTT-over-WebSocket connections (/mqtt); nil without a
	// broker.
	Conns ws.ConnServer
	// Groups carries group channels for WebSocket members and the SSE
	// read of a channel (group_channel.go); nil without a broker.
	Groups hub.GroupChannels
	// SSEHeartbeat is the interval of SSE keep-alives (default 15 s).
	SSEHeartbeat time.Duration
	// WriteTimeout bounds writing one ordinary response, from its first
	// byte: a client that stops reading a large answer (a list of
	// Things) would otherwise hold the request's goroutine and the answer
	// forever. Event streams bound each frame instead (SSEWriteTimeout),
	// WebSocket connections each message. Default 60 s.
	WriteTimeout time.Duration
	// SSEWriteTimeout is how long an event stream's client may take to
	// read one frame before the hub closes the stream as too slow
	// (lmos_sse_dropped_total); default 30 s.
	SSEWriteTimeout time.Duration
	// MaxStreams bounds the event streams one client address
	// holds open (default 64).
	MaxStreams int
	// MaxStreamQueueBytes bounds the frames an event stream holds for its
	// client, not yet written (default 1 MiB): beyond it the stream is
	// cut off (http.maxStreamQueueBytes).
	MaxStreamQueueBytes int
	// AllowedOrigins are the Origin host patterns WebSocket connections
	// (/ws, /mqtt) may come from besides the hub's own host.
	AllowedOrigins []string
	// AllowedHosts are the names (exact, or "*.suffix") requests may carry
	// in Host besides IP literals, localhost and HostNames; ["*"] turns the
	// check off (behind a reverse proxy).
	AllowedHosts []string
	// HostNames returns the hub's own names (host name, hub name, .local
	// names); it is called for each request whose Host is a name.
	HostNames func() []string
	// Admission is the hub's join policy for WebSocket agents, the same
	// one the MQTT broker applies (mode, takeover rules, join rate). Nil:
	// open, and no Thing holds a credential.
	Admission *hub.Admission
	// WS tunes the WebSocket transport (web/ws).
	WS ws.Options
	// Observer counts joins and routed interactions for /metrics; nil:
	// none.
	Observer *Observer
	// Metrics write other adapters' figures (Prometheus text format)
	// after the HTTP ones on /metrics.
	Metrics []func(io.Writer)
	// Peers are the paired hubs (PROTOCOL §9): their LMOS-Peer requests
	// have operate rights, /api/peers manages them and the directory TD
	// lists them; nil: no federation (peer requests are anonymous, the
	// API answers 503). PeerStates reports each peer's link (nil: none).
	Peers      *hub.Peers
	PeerStates func() []hub.LinkState
	// PeerMQTT returns the MQTT URL a peer announces in its directory TD
	// ("" while unknown), for lmos:peers.
	PeerMQTT func(did string) string
	// MCP serves /mcp, the MCP door (mcpdoor); nil: no door. The server
	// checks Host and Origin and puts the principal in the request's
	// context (hub.ContextWithPrincipal) first.
	MCP http.Handler
	// LogTail keeps the hub's recent log records for GET /api/log; nil
	// answers 503 there.
	LogTail *LogTail
	Now     func() time.Time
	Logger  *slog.Logger
}

// Server serves the hub over HTTP.
type Server struct {
	reg     *hub.Registry
	tokens  *hub.Tokens
	cfg     Config
	log     *slog.Logger
	started time.Time
	limit   *ratelimit.Limiter
	metrics *metrics.Set
	mux     *http.ServeMux
	sse     *metrics.Counter // event streams closed for a slow reader
	ws      *ws.Transport
	// streams bounds open event streams per client address.
	streams        *streamSlots
	hosts          *hostCheck
	streamsRefused *metrics.Counter
	// groupList is GET /api/groups's encoding, kept until a group changes;
	// groupListEncoded counts how often it was made.
	groupList        groupList
	groupListEncoded *metrics.Counter
	dash             *dashboard.Dashboard
	closing          chan struct{}
	once             sync.Once
}

// New returns a Server over the registry and token manager.
func New(reg *hub.Registry, tokens *hub.Tokens, cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 256 << 10
	}
	if cfg.ProxyTimeout <= 0 {
		cfg.ProxyTimeout = 30 * time.Second
	}
	if cfg.SSEHeartbeat <= 0 {
		cfg.SSEHeartbeat = 15 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 60 * time.Second
	}
	if cfg.SSEWriteTimeout <= 0 {
		cfg.SSEWriteTimeout = 30 * time.Second
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 64
	}
	if cfg.MaxStreamQueueBytes <= 0 {
		cfg.MaxStreamQueueBytes = DefaultMaxStreamQueueBytes
	}
	s := &Server{
		reg: reg, tokens: tokens, cfg: cfg, log: cfg.Logger,
		started: cfg.Now(),
		limit:   ratelimit.New(cfg.WriteRate, cfg.WriteBurst, cfg.Now),
		metrics: metrics.NewSet(),
		mux:     http.NewServeMux(),
		closing: make(chan struct{}),
		streams: newStreamSlots(cfg.MaxStreams),
		hosts:   newHostCheck(cfg.AllowedHosts, cfg.HostNames),
	}
	s.metrics.NewGauge("lmos_registry_things", func() float64 { return float64(reg.Count()) })
	s.metrics.NewGauge("lmos_registry_revision", func() float64 { return float64(reg.Revision()) })
	// Proof signatures checked, those checked in batches with concurrent
	// writes' and the batches that failed (then checked one by one).
	s.metrics.RegisterMetricsWriter(func(w io.Writer) {
		vs := reg.VerifyStats()
		metrics.WriteCounterUint64(w, "lmos_verify_signatures_total", vs.Checks)
		metrics.WriteCounterUint64(w, "lmos_verify_batched_total", vs.Batched)
		metrics.WriteCounterUint64(w, "lmos_verify_batch_failures_total", vs.Failed)
	})
	if cfg.StoreSize != nil {
		s.metrics.NewGauge("lmos_store_size_bytes", func() float64 { return float64(cfg.StoreSize()) })
	}
	s.metrics.NewGauge("lmos_uptime_seconds", func() float64 { return cfg.Now().Sub(s.started).Seconds() })
	s.sse = s.metrics.NewCounter("lmos_sse_dropped_total")
	if a := cfg.Admission; a != nil {
		s.metrics.NewGauge("lmos_join_pending", func() float64 { return float64(a.PendingCount()) })
	}
	s.metrics.RegisterMetricsWriter(func(w io.Writer) {
		by := reg.Presence()
		metrics.WriteMetadataIfNeeded(w, "lmos_presence_things", "gauge")
		for _, st := range []string{hub.PresenceOnline, hub.PresenceOffline, hub.PresenceUnknown} {
			fmt.Fprintf(w, "lmos_presence_things{status=%q} %d\n", st, by[st])
		}
	})
	s.streamsRefused = s.metrics.NewCounter("lmos_sse_refused_total")
	s.groupListEncoded = s.metrics.NewCounter("lmos_http_group_list_encoded_total")
	s.ws = ws.New(ws.Config{Options: cfg.WS, Registry: reg, Router: cfg.Router, ProxyTimeout: cfg.ProxyTimeout, GroupActions: cfg.GroupActions,
		Admission: cfg.Admission, Access: cfg.Access, Publisher: cfg.Publisher, Streams: cfg.Streams, Conns: cfg.Conns, Groups: cfg.Groups,
		AllowedOrigins: cfg.AllowedOrigins, Logger: s.log, Metrics: s.metrics, Closing: s.closing})
	dash, err := dashboard.Load()
	if err != nil { // the files are compiled in: a broken build
		panic(err)
	}
	s.dash = dash
	s.routes()
	return s
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /things", s.read(s.listThings))
	m.HandleFunc("POST /things", s.write(s.createThing))
	m.HandleFunc("GET /things/{id}", s.read(s.getThing))
	m.HandleFunc("PUT /things/{id}", s.writeSigned(s.putThing))
	m.HandleFunc("PATCH /things/{id}", s.write(s.patchThing))
	m.HandleFunc("DELETE /things/{id}", s.write(s.deleteThing))
	m.HandleFunc("GET /search/jsonpath", s.read(s.searchJSONPath))
	m.HandleFunc("GET /search/text", s.read(s.searchText))
	m.HandleFunc("GET /events", s.read(s.events))
	m.HandleFunc("GET /events/{type}", s.read(s.events))
	m.HandleFunc("GET /.well-known/wot", s.read(s.directoryTD))
	m.HandleFunc("GET /api/status", s.read(s.status))
	m.HandleFunc("GET /api/tokens", s.admin(s.listTokens))
	m.HandleFunc("POST /api/tokens", s.write(s.createToken))
	m.HandleFunc("DELETE /api/tokens/{id}", s.write(s.revokeToken))
	m.HandleFunc("GET /api/log", s.admin(s.logTail))
	m.HandleFunc("GET /api/peers/candidates", s.admin(s.peerCandidates))
	m.HandleFunc("POST /api/backup", s.write(s.backup))
	m.HandleFunc("GET /api/groups/{gid}/channel", s.identify(s.groupChannel))
	s.joinRoutes()
	s.groupRoutes()
	s.hubEventRoutes()
	s.credentialRoutes()
	s.peerRoutes()
	m.HandleFunc("GET /api/things/{id}/binding", s.read(s.getBinding))
	m.HandleFunc("PUT /api/things/{id}/binding", s.write(s.putBinding))
	m.HandleFunc("DELETE /api/things/{id}/binding", s.write(s.deleteBinding))
	m.HandleFunc("DELETE /api/things/{id}/credential", s.write(s.deleteThingCredential))
	m.HandleFunc("GET /healthz", s.healthz)
	m.HandleFunc("GET /metrics", s.serveMetrics)
	// The dashboard is public like any static file: it holds no data,
	// and asks for a token when the hub wants one.
	m.HandleFunc("GET /{$}", s.dash.ServeIndex)
	m.HandleFunc("GET "+dashboard.Prefix+"{path...}", s.dash.ServeAsset)
	s.proxyRoutes()
	s.groupActionRoutes()
	s.mcpRoutes()
	m.HandleFunc("GET /ws", s.identify(s.serveWS))
	m.HandleFunc("GET /mqtt", s.serveMQTT)
}

// serveWS is GET /ws: the consumer is the request's principal (a token in
// Authorization or, since browsers cannot set headers on a WebSocket, in
// ?token=); every message is checked against the access policy.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	p, _ := s.principalOf(r)
	s.ws.ServeWS(w, r, clientAddr(r), p)
}

// serveMQTT is GET /mqtt, MQTT over WebSocket (ws.Transport.ServeMQTT),
// while the broker runs.
func (s *Server) serveMQTT(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Conns == nil {
		s.writeError(w, r, hub.Errorf(hub.EUNAVAILABLE, "the mqtt broker is not running"))
		return
	}
	s.ws.ServeMQTT(w, r)
}

// WSTransport is the hub.Transport of the Things registered by WebSocket
// agents; app registers it with the Router for hub.SourceWS.
func (s *Server) WSTransport() *ws.Transport { return s.ws }

// ResetWSPresence sets every Thing that is online via WebSocket offline:
// at start no agent is connected yet (after a crash, say).
func (s *Server) ResetWSPresence(ctx context.Context) { s.ws.ResetPresence(ctx) }

// CloseStreams ends every open event stream; call it before
// http.Server.Shutdown, which does not wait for them otherwise.
// It also closes the WebSocket connections (going away) and waits for
// them a little, so their agents are marked offline.
func (s *Server) CloseStreams() {
	s.once.Do(func() {
		close(s.closing)
		s.ws.CloseAll(2 * time.Second)
	})
}

// ServeHTTP checks the Host of every request and counts every request by
// status and route class.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, s: s, r: r}
	// The Host check comes before any route (DNS rebinding, PROTOCOL §10).
	if s.checkHost(sw, r) {
		s.mux.ServeHTTP(sw, r)
	}
	pattern := r.Pattern // set by the mux on this request
	if pattern == "" || pattern == "/" {
		pattern = "other"
	}
	s.metrics.GetOrCreateCounter(fmt.Sprintf(`lmos_http_requests_total{route=%q,code="%d"}`, pattern, sw.status)).Inc()
	if !strings.HasPrefix(pattern, "GET /events") && !strings.HasPrefix(pattern, "GET /proxy/{id}/events") && pattern != "GET /api/events" && pattern != "GET /api/log" &&
		pattern != "GET /ws" && pattern != "GET /mqtt" && pattern != "/mcp" {
		s.metrics.GetOrCreatePrometheusHistogram(fmt.Sprintf(`lmos_http_request_duration_seconds{route=%q}`, pattern)).UpdateDuration(start)
	}
	s.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "dur", time.Since(start))
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	// muxError is set when the mux itself answers 404 or 405 in plain
	// text; the answer is replaced by a problem body and its text dropped.
	muxError bool
	s        *Server
	r        *http.Request
}

func (w *statusWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.status, w.wrote = code, true
	isProblem := w.Header().Get("Content-Type") == lmos.MediaProblem
	if (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) && !isProblem {
		// Only the mux answers these without a problem body: no route
		// matched the path, or none matched the method (Allow is set).
		w.muxError = true
		w.Header().Del("X-Content-Type-Options")
		err := hub.Errorf(hub.ENOTFOUND, "no resource at %s", w.r.URL.Path)
		if code == http.StatusMethodNotAllowed {
			err = hub.Errorf(hub.EMETHOD, "%s is not allowed on %s; allowed: %s", w.r.Method, w.r.URL.Path, w.Header().Get("Allow"))
		}
		w.s.writeError(w.ResponseWriter, w.r, err)
		return
	}
	// The answer begins: it must be taken within the write timeout. (An
	// upgrade's hijack clears the deadline; the socket bounds its own
	// writes. An event stream sets one per frame.)
	_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.s.cfg.WriteTimeout))
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.muxError {
		return len(b), nil // the mux's plain-text body
	}
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// read guards a read endpoint: reading the directory (access.anonymous
// decides for clients without a token).
func (s *Server) read(h http.HandlerFunc) http.HandlerFunc {
	return s.allow(hub.OpReadDirectory, h)
}

// admin requires a valid admin bearer token.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return s.allow(hub.OpManage, h)
}

// write rate-limits per client before checking the token, so guessing
// tokens is limited too, then requires an admin token.
func (s *Server) write(h http.HandlerFunc) http.HandlerFunc {
	return s.limited(s.admin(h))
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return hub.SourceOf(r.RemoteAddr)
	}
	// An IPv6 host is one client per /64 (hub.SourceOf).
	return hub.SourceOf(host)
}

// readBody reads a request body of one of the accepted media types, within
// the size limit.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, accepted ...string) ([]byte, error) {
	return s.readBodyMax(w, r, s.cfg.MaxBodyBytes, func(int64) error { return tooLarge(s.cfg.MaxBodyBytes) }, accepted...)
}

// readTD reads a Thing Description body within registry.maxTDBytes, the
// limit every door applies to a TD (or http.maxBodyBytes, the limit of
// every body, when that is lower): a larger one is refused from its
// Content-Length, or once the limit is read, never read whole.
func (s *Server) readTD(w http.ResponseWriter, r *http.Request, accepted ...string) ([]byte, error) {
	limit := s.reg.MaxTDBytes()
	if s.cfg.MaxBodyBytes < int64(limit) {
		return s.readBody(w, r, accepted...)
	}
	return s.readBodyMax(w, r, int64(limit), func(n int64) error { return hub.TooLarge(int(n), limit) }, accepted...)
}

// readBodyMax reads a body of limit bytes at most; tooBig makes the
// refusal from the declared length (-1 when unknown).
func (s *Server) readBodyMax(w http.ResponseWriter, r *http.Request, limit int64, tooBig func(n int64) error, accepted ...string) ([]byte, error) {
	if err := checkContentCoding(w, r); err != nil {
		return nil, err
	}
	mt := lmos.MediaType(r.Header.Get("Content-Type"))
	ok := false
	for _, a := range accepted {
		ok = ok || mt == a
	}
	if !ok {
		got := mt
		if got == "" {
			got = "none"
		}
		return nil, hub.Errorf(hub.EUNSUPPORTED, "Content-Type %s is not accepted here; use %s", got, strings.Join(accepted, " or "))
	}
	if r.ContentLength > limit {
		return nil, tooBig(r.ContentLength)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	b, err := readAll(body, r.ContentLength)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooBig(-1)
	case err != nil:
		return nil, &hub.Error{Code: hub.EINVALID, Message: "cannot read the request body", Err: err}
	}
	return b, nil
}

func tooLarge(limit int64) error {
	return hub.Errorf(hub.ETOOLARGE, "the body is larger than the limit of %d bytes (http.maxBodyBytes)", limit)
}
