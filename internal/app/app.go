// Package app is the hub's process: Main turns a Config into a running hub
// by opening the store, registry, tokens, listeners, broker, HTTP adapter
// and mDNS in that order, each in one open… step, and closes them in
// reverse order. It is the only package that wires the adapters together;
// cmd/lmos-hub runs it behind its flags and signals, internal/hubtest runs
// it for tests. Config (defaults < YAML file < LMOS_HUB_* environment <
// flags) and its validation live here too.
package app

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/mdns"
	"github.com/eclipse-lmos/lmos-hub/mqtt"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/web"
	"github.com/eclipse-lmos/lmos-hub/web/ws"
)

// Main is the hub process: it opens the adapters in order, wires them, and
// closes them in reverse order. cmd/lmos-hub runs it; tests run it
// in-process exactly as main does (internal/hubtest).
type Main struct {
	Config Config
	// Version is the build's version, reported by the directory, the
	// broker's status and /api/status.
	Version string
	// Stdout receives the first admin token, printed once.
	Stdout io.Writer
	Logger *slog.Logger

	// SSEHeartbeat overrides the SSE keep-alive interval (0: the web
	// default, 15 s); tests shorten it to see keep-alives without waiting.
	SSEHeartbeat time.Duration
	// SSEWriteTimeout overrides how long an SSE client may leave a frame
	// unread (0: the web default, 30 s); tests shorten it.
	SSEWriteTimeout time.Duration
	// HTTPWriteTimeout overrides how long a client may take to read one
	// response (0: the web default, 60 s); tests shorten it.
	HTTPWriteTimeout time.Duration

	// Set by Run, in this order.
	DB *store.DB
	// Key is the hub's own did:key (data dir, hub-key.json).
	Key      ed25519.PrivateKey
	Registry *hub.Registry
	Tokens   *hub.Tokens
	// Access is the one access policy every door asks (access.anonymous,
	// capped by join.mode).
	Access *hub.Access
	Router *hub.Router
	// Admission is the join policy both doors that admit Things (MQTT,
	// WebSocket) apply, with one join rate per source.
	Admission *hub.Admission
	// HTTPAddr is the address the HTTP listener actually bound.
	HTTPAddr net.Addr
	Broker   *mqtt.Broker
	// MQTTAddr is the address the MQTT listener actually bound.
	MQTTAddr net.Addr
	Web      *web.Server
	HTTP     *http.Server
	// MDNS advertises the hub and registers Things announced on the LAN;
	// nil when mdns.enabled is false or it could not open.
	MDNS *mdns.Hub

	// httpLn is the HTTP listener until the HTTP server owns it.
	httpLn net.Listener
	// names are the hub's own names for the Host check.
	names   *hostNames
	errc    chan error
	closers []closer
}

// NewMain returns a Main for cfg; a nil logger is slog.Default().
func NewMain(cfg Config, stdout io.Writer, logger *slog.Logger) *Main {
	if logger == nil {
		logger = slog.Default()
	}
	return &Main{Config: cfg, Version: "dev", Stdout: stdout, Logger: logger, errc: make(chan error, 1)}
}

// Run opens everything and starts serving; it returns once the hub serves.
// Sockets are opened here, synchronously, so a port in use fails Run. On an
// error what was opened is closed again.
func (m *Main) Run(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			if m.httpLn != nil {
				m.httpLn.Close()
			}
			_ = m.Close(context.Background())
		}
	}()
	start := time.Now()
	for _, open := range []func(context.Context) error{
		m.openStore,
		m.openIdentity,
		m.openRegistry,
		m.openTokens,
		m.openListeners,
		m.openBroker,
		m.openWeb,
		m.openMDNS,
	} {
		if err := open(ctx); err != nil {
			return err
		}
	}
	m.Logger.Info("hub ready", "name", m.Config.Hub.Name, "id", m.DB.HubID(), "did", m.DID(), "things", m.Registry.Count(),
		"data_dir", m.Config.DataDir, "startup", time.Since(start).Round(time.Millisecond))
	return nil
}

// openStore opens the bbolt store in the data directory; it fails with
// store.ErrLocked when another process holds it.
func (m *Main) openStore(context.Context) error {
	db, err := store.Open(m.Config.DataDir, store.Options{EventLogSize: m.Config.Registry.EventLogSize})
	if err != nil {
		return err
	}
	m.DB = db
	m.onClose("store", func(context.Context) error { return db.Close() })
	return nil
}

// openRegistry loads the registry from the store with the configured
// limits, and the router that carries proxied interactions (transports join
// it as their adapters open).
func (m *Main) openRegistry(context.Context) error {
	cfg := m.Config
	hub.SetMaxDepth(cfg.Registry.MaxDepth)
	reg, err := hub.NewRegistry(m.DB, hub.RegistryOptions{
		Logger:             m.Logger.With("component", "registry"),
		MaxThings:          cfg.Registry.MaxThings,
		MaxTDBytes:         cfg.Registry.MaxTDBytes,
		MaxBytes:           cfg.Registry.MaxBytes,
		MaxThingsPerSource: cfg.Registry.MaxThingsPerSource,
		Search: hub.SearchLimits{MaxNodes: cfg.Search.MaxNodes, MaxResultBytes: cfg.Search.MaxResultBytes,
			Timeout: time.Duration(cfg.Search.Timeout), MaxQueryBytes: cfg.Search.MaxQueryBytes,
			MaxDescendants: cfg.Search.MaxDescendants, MaxPerClient: cfg.Search.MaxConcurrentPerClient,
			MaxConcurrent: cfg.Search.MaxConcurrent},
		Security: hub.SecurityOptions{RequireSigned: cfg.Security.RequireSigned, VerifyRate: cfg.Security.VerifyRate,
			VerifyBurst: cfg.Security.VerifyBurst, MaxClockSkew: time.Duration(cfg.Security.MaxClockSkew)},
	})
	if err != nil {
		return err
	}
	m.Registry = reg
	m.onClose("registry", func(context.Context) error { return reg.Close() })
	// Loading walked the whole store once; those pages are not needed now.
	if err := m.DB.ReleaseMapped(); err != nil {
		m.Logger.Warn("cannot release the store's start-up pages", "err", err)
	}
	m.Router = hub.NewRouter(reg)
	// The join rate keeps the defaults (hub.DefaultJoinRate, …Burst).
	m.Admission, err = hub.NewAdmission(reg, m.DB, cfg.Join.Mode, 0, 0)
	if err != nil {
		return err
	}
	// Joins parked for approval survive a restart (join mode approve).
	return m.Admission.OpenPending(m.DB)
}

// openTokens opens the admin tokens and installs or creates the first one.
func (m *Main) openTokens(context.Context) error {
	m.Tokens = hub.NewTokens(m.DB, nil)
	if m.Config.HTTP.Private {
		m.Logger.Warn("http.private is deprecated: it now means access.anonymous: none on every door")
	}
	var err error
	if m.Access, err = hub.NewAccess(m.Config.AnonymousAccess(), m.Config.Join.Mode, m.Tokens); err != nil {
		return err
	}
	m.Logger.Info("access", "anonymous", m.Access.Anonymous())
	return m.bootstrapToken()
}

// OpenTokens opens the admin tokens of the store in dataDir while no hub
// runs (the token commands); close releases the store. A running hub holds
// the store: the error is then store.ErrLocked, after a short wait.
func OpenTokens(dataDir string) (tokens *hub.Tokens, close func() error, err error) {
	db, err := store.Open(dataDir, store.Options{LockTimeout: 500 * time.Millisecond})
	if err != nil {
		return nil, nil, err // the store's own message, as the command prints it
	}
	return hub.NewTokens(db, nil), db.Close, nil
}

// openListeners binds the HTTP listener: the broker announces its address
// on lmos/v1/hub/status, and the directory TD names it. The MQTT listener is
// the broker's own (it wraps every connection), bound in openBroker.
func (m *Main) openListeners(context.Context) error {
	ln, err := net.Listen("tcp", m.Config.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("cannot listen on http.addr %s: %w", m.Config.HTTP.Addr, err)
	}
	m.httpLn, m.HTTPAddr = ln, ln.Addr()
	return nil
}

// openBroker starts the embedded MQTT broker on cfg.MQTT.Addr, before HTTP
// serves, so /healthz and the WebSocket transport find it running.
func (m *Main) openBroker(context.Context) error {
	cfg := m.Config
	b, err := mqtt.New(m.Registry, m.DB, m.DB, mqtt.Config{
		Anonymous:    cfg.MQTT.Anonymous,
		Access:       m.Access,
		Tokens:       m.Tokens,
		Admission:    m.Admission,
		HubID:        m.DB.HubID(),
		Version:      m.Version,
		DirectoryURL: directoryURL(m.HTTPAddr),
		Forward:      m.Router,
		Logger:       m.Logger.With("component", "mqtt"),

		MaxQueuedBytes:    cfg.MQTT.MaxQueuedBytes,
		SlowClientTimeout: time.Duration(cfg.MQTT.SlowClientTimeout),
		ConnectTimeout:    time.Duration(cfg.MQTT.ConnectTimeout),
		DeliveryPath:      cfg.MQTT.DeliveryPath,
	})
	if err != nil {
		return err
	}
	addr, err := b.Listen(cfg.MQTT.Addr)
	if err != nil {
		return err
	}
	m.onClose("mqtt", b.Close)
	if err := b.Serve(); err != nil {
		return err
	}
	m.Broker, m.MQTTAddr = b, addr
	m.Router.Handle(hub.SourceMQTT, b)
	m.Logger.Info("mqtt listening", "addr", addr.String())
	return nil
}

// openWeb builds the HTTP adapter over the running broker and serves it on
// the HTTP listener.
func (m *Main) openWeb(ctx context.Context) error {
	m.names = newHostNames(m.Config.Hub.Name)
	srv := web.New(m.Registry, m.Tokens, m.webConfig())
	m.Web = srv
	// WebSocket agents: none is connected yet, whatever the registry
	// remembers.
	srv.ResetWSPresence(ctx)
	m.Router.Handle(hub.SourceWS, srv.WSTransport())
	var silent silentConns
	m.HTTP = &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(m.Logger.With("component", "http").Handler(), slog.LevelWarn),
		ConnState:         silent.track,
	}
	ln := m.httpLn
	m.httpLn = nil
	go func() {
		if err := m.HTTP.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.errc <- fmt.Errorf("http server failed: %w", err)
		}
	}()
	m.onClose("http", func(ctx context.Context) error {
		// Event streams never end by themselves: end them so Shutdown only
		// waits for requests in flight, whose writes then complete.
		srv.CloseStreams()
		// Shutdown waits 5 s for a connection that has sent nothing yet
		// (an HTTP client's spare dial, a port scan): no request of it can
		// be lost, so close it now.
		silent.closeAll()
		return m.HTTP.Shutdown(ctx)
	})
	// Start-up allocates transiently (the store walk, the broker's
	// reconciliation): collect it and give it back before the hub idles.
	debug.FreeOSMemory()
	m.Logger.Info("http listening", "addr", m.HTTPAddr.String())
	return nil
}

// webConfig is the HTTP adapter's configuration; the broker is open and
// m.names set.
func (m *Main) webConfig() web.Config {
	cfg, db, b := m.Config, m.DB, m.Broker
	return web.Config{
		HubID:          db.HubID(),
		HubName:        cfg.Hub.Name,
		Key:            m.Key,
		Version:        m.Version,
		MaxBodyBytes:   cfg.HTTP.MaxBodyBytes,
		WriteRate:      cfg.HTTP.WriteRate,
		WriteBurst:     cfg.HTTP.WriteBurst,
		Access:         m.Access,
		StoreSize:      db.Size,
		Router:         m.Router,
		ProxyTimeout:   time.Duration(cfg.HTTP.ProxyTimeout),
		AllowedOrigins: cfg.HTTP.AllowedOrigins,
		AllowedHosts:   cfg.HTTP.AllowedHosts,
		HostNames:      m.names.get,
		Admission:      m.Admission,
		WS: ws.Options{
			PingInterval: time.Duration(cfg.HTTP.WebSocket.PingInterval),
			IdleTimeout:  time.Duration(cfg.HTTP.WebSocket.IdleTimeout),
			MessageRate:  cfg.HTTP.WebSocket.MessageRate,
			MessageBurst: cfg.HTTP.WebSocket.MessageBurst,
			SendQueue:    cfg.HTTP.WebSocket.SendQueue,
		},
		MaxStreams:      cfg.HTTP.MaxStreamsPerClient,
		SSEHeartbeat:    m.SSEHeartbeat,
		SSEWriteTimeout: m.SSEWriteTimeout,
		WriteTimeout:    m.HTTPWriteTimeout,
		Metrics:         []func(io.Writer){b.WritePrometheus},
		BrokerPort:      portOf(m.MQTTAddr),
		// WebSocket agents reach MQTT consumers through the broker.
		Publisher: b,
		Streams:   b,
		Conns:     b,
		Checks: map[string]func() error{
			"store":    db.Ping,
			"registry": m.Registry.Err,
			"broker":   b.Err,
		},
		Logger: m.Logger.With("component", "http"),
	}
}

// openMDNS advertises the directory and broker and starts registering
// Things announced on the LAN. It opens last: it advertises the ports
// actually bound, and its goodbyes go out first when closing. Without mDNS
// the hub is still a directory and a broker: a host where UDP 5353 is taken
// or multicast is refused keeps serving, so a failure here is logged, not
// returned.
func (m *Main) openMDNS(context.Context) error {
	if !m.Config.MDNS.Enabled {
		return nil
	}
	if err := m.advertise(); err != nil {
		m.Logger.Error("mdns is off: cannot open it; agents must be given the hub's address"+
			" (another mDNS responder holding UDP 5353 without SO_REUSEADDR? --mdns=false silences this)", "err", err)
	}
	return nil
}

// advertise opens the hub's mDNS responder and registrar.
func (m *Main) advertise() error {
	cfg := m.Config
	if t, ok := m.HTTPAddr.(*net.TCPAddr); ok && t.IP.IsLoopback() {
		m.Logger.Warn("http listens on loopback only: agents on the lan will find the hub over mdns but cannot reach it; use --http-addr :8080",
			"addr", m.HTTPAddr.String())
	}
	host, _ := os.Hostname()
	// Namespaces and containers share a host name: the hub id keeps each
	// hub's .local host name its own.
	id := strings.ReplaceAll(m.DB.HubID(), "-", "")
	host = strings.SplitN(host, ".", 2)[0] + "-" + id[:min(6, len(id))]
	h, err := mdns.Open(m.Registry, mdns.Config{
		Name:        cfg.Hub.Name,
		Host:        host,
		Interfaces:  cfg.MDNS.Interfaces,
		HTTPPort:    portOf(m.HTTPAddr),
		MQTTPort:    portOf(m.MQTTAddr),
		Scheme:      "http",
		ForgetAfter: time.Duration(cfg.MDNS.ForgetAfter),
		Admission:   m.Admission,
		Logger:      m.Logger.With("component", "mdns"),
	})
	if err != nil {
		return err
	}
	m.MDNS = h
	m.names.mdns.Store(h)
	m.onClose("mdns", h.Close)
	return nil
}

// hostNames are the hub's own names for the Host check: the host name
// (full, first label, and as name.local, which avahi on the same machine
// advertises), the hub name, and the .local name the hub's mDNS advertises.
// mDNS opens after HTTP serves and a conflict renames it, so that last name
// is read per call.
type hostNames struct {
	fixed []string
	mdns  atomic.Pointer[mdns.Hub]
}

func newHostNames(hubName string) *hostNames {
	n := &hostNames{}
	if h, err := os.Hostname(); err == nil && h != "" {
		first := strings.SplitN(h, ".", 2)[0]
		n.fixed = append(n.fixed, h, first, first+".local")
	}
	if hubName != "" {
		n.fixed = append(n.fixed, hubName, hubName+".local")
	}
	return n
}

func (n *hostNames) get() []string {
	if h := n.mdns.Load(); h != nil {
		return append(n.fixed[:len(n.fixed):len(n.fixed)], h.HostName())
	}
	return n.fixed
}

func portOf(a net.Addr) int {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.Port
	}
	return 0
}

// directoryURL is the directory TD's URL for the HTTP listener at addr; an
// unspecified host (all interfaces) is replaced by the host name.
func directoryURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil && name != "" {
			host = name
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/.well-known/wot"
}

// bootstrapToken installs --admin-token, or on first start creates a token
// and prints it once: only its hash is stored.
func (m *Main) bootstrapToken() error {
	if tok := m.Config.AdminToken; tok != "" {
		t, err := m.Tokens.Install(tok, "provisioned")
		if err != nil {
			return fmt.Errorf("cannot install adminToken: %w", err)
		}
		m.Logger.Info("admin token installed", "token_id", t.ID)
		return nil
	}
	n, err := m.Tokens.ActiveCount()
	if err != nil || n > 0 {
		return err
	}
	secret, t, err := m.Tokens.Create("initial")
	if err != nil {
		return err
	}
	m.Logger.Info("created the first admin token; it is printed once on stdout", "token_id", t.ID)
	if m.Stdout != nil {
		fmt.Fprintf(m.Stdout, "\nlmos-hub created the first admin token. It is shown only this once; keep it safe:\n\n    %s\n\n"+
			"Use it as \"Authorization: Bearer <token>\" for writes, or with `lmos-hub things --token`.\n\n", secret)
	}
	return nil
}

// closer stops one component.
type closer struct {
	name  string
	close func(context.Context) error
}

func (m *Main) onClose(name string, f func(context.Context) error) {
	m.closers = append(m.closers, closer{name, f})
}

// Err reports a component that failed while serving.
func (m *Main) Err() <-chan error { return m.errc }

// Close stops everything in reverse order of opening, within ctx.
func (m *Main) Close(ctx context.Context) error {
	var errs []error
	for i := len(m.closers) - 1; i >= 0; i-- {
		c := m.closers[i]
		start := time.Now()
		err := c.close(ctx)
		took := time.Since(start).Round(time.Millisecond)
		m.Logger.Debug("stopped", "component", c.name, "took", took)
		if err != nil {
			// Each component has what is left of ctx: say which one took it.
			errs = append(errs, fmt.Errorf("%s (stopping it took %s): %w", c.name, took, err))
		}
	}
	m.closers = nil
	return errors.Join(errs...)
}

// silentConns tracks the HTTP connections that have not sent a request yet
// (http.StateNew).
type silentConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (s *silentConns) track(c net.Conn, state http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if state == http.StateNew {
		if s.conns == nil {
			s.conns = make(map[net.Conn]struct{})
		}
		s.conns[c] = struct{}{}
		return
	}
	delete(s.conns, c)
}

func (s *silentConns) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}
