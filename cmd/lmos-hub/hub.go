package main

import (
	"context"
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
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Main is the hub process: it opens the adapters in order, wires them, and
// closes them in reverse order. Tests run it in-process exactly as main does.
type Main struct {
	Config Config
	// Stdout receives the first admin token, printed once.
	Stdout io.Writer
	Logger *slog.Logger

	DB       *store.DB
	Registry *hub.Registry
	Tokens   *hub.Tokens
	Router   *hub.Router
	HTTP     *http.Server
	// HTTPAddr is the address the HTTP listener actually bound.
	HTTPAddr net.Addr
	Broker   *mqtt.Broker
	// MQTTAddr is the address the MQTT listener actually bound.
	MQTTAddr net.Addr
	// MDNS advertises the hub and registers Things announced on the LAN;
	// nil when mdns.enabled is false.
	MDNS *mdns.Hub
	// mdnsHub is MDNS for the HTTP handlers, which run before it is set.
	mdnsHub atomic.Pointer[mdns.Hub]

	errc    chan error
	closers []closer
	// sseHeartbeat overrides the SSE keep-alive interval (0: the web
	// default, 15 s); tests shorten it to see keep-alives without waiting.
	sseHeartbeat time.Duration
	// sseWriteTimeout overrides how long an SSE client may leave a frame
	// unread (0: the web default, 30 s); tests shorten it.
	sseWriteTimeout time.Duration
	// httpWriteTimeout overrides how long a client may take to read one
	// response (0: the web default, 60 s); tests shorten it.
	httpWriteTimeout time.Duration
}

// NewMain returns a Main for cfg.
func NewMain(cfg Config, stdout io.Writer, logger *slog.Logger) *Main {
	if logger == nil {
		logger = slog.Default()
	}
	return &Main{Config: cfg, Stdout: stdout, Logger: logger, errc: make(chan error, 1)}
}

// Run opens everything and starts serving; it returns once the hub serves.
// Sockets are opened here, synchronously, so a port in use fails Run.
func (m *Main) Run(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = m.Close(context.Background())
		}
	}()
	cfg := m.Config
	start := time.Now()

	db, err := store.Open(cfg.DataDir, store.Options{EventLogSize: cfg.Registry.EventLogSize})
	if err != nil {
		return err
	}
	m.DB = db
	m.onClose("store", func(context.Context) error { return db.Close() })

	hub.SetMaxDepth(cfg.Registry.MaxDepth)
	reg, err := hub.NewRegistry(db, hub.RegistryOptions{
		Logger:             m.Logger.With("component", "registry"),
		MaxThings:          cfg.Registry.MaxThings,
		MaxTDBytes:         cfg.Registry.MaxTDBytes,
		MaxBytes:           cfg.Registry.MaxBytes,
		MaxThingsPerSource: cfg.Registry.MaxThingsPerSource,
		Search: hub.SearchLimits{MaxNodes: cfg.Search.MaxNodes, MaxResultBytes: cfg.Search.MaxResultBytes,
			Timeout: time.Duration(cfg.Search.Timeout), MaxQueryBytes: cfg.Search.MaxQueryBytes,
			MaxDescendants: cfg.Search.MaxDescendants, MaxPerClient: cfg.Search.MaxConcurrentPerClient,
			MaxConcurrent: cfg.Search.MaxConcurrent},
	})
	if err != nil {
		return err
	}
	m.Registry = reg
	m.onClose("registry", func(context.Context) error { return reg.Close() })
	// Loading walked the whole store once; those pages are not needed now.
	if err := db.ReleaseMapped(); err != nil {
		m.Logger.Warn("cannot release the store's start-up pages", "err", err)
	}

	m.Tokens = hub.NewTokens(db, nil)
	if err := m.bootstrapToken(); err != nil {
		return err
	}

	// The router carries proxied interactions; transports join it as their
	// adapters open.
	m.Router = hub.NewRouter(reg)
	srv := web.New(reg, m.Tokens, web.Config{
		HubID:          db.HubID(),
		HubName:        cfg.Hub.Name,
		Version:        version,
		MaxBodyBytes:   cfg.HTTP.MaxBodyBytes,
		WriteRate:      cfg.HTTP.WriteRate,
		WriteBurst:     cfg.HTTP.WriteBurst,
		Private:        cfg.HTTP.Private,
		StoreSize:      db.Size,
		Router:         m.Router,
		ProxyTimeout:   time.Duration(cfg.HTTP.ProxyTimeout),
		AllowedOrigins: cfg.HTTP.AllowedOrigins,
		AllowedHosts:   cfg.HTTP.AllowedHosts,
		HostNames:      m.hostNames(),
		JoinMode:       cfg.Join.Mode,
		Credentials:    db,
		WS: web.WSConfig{
			PingInterval: time.Duration(cfg.HTTP.WebSocket.PingInterval),
			IdleTimeout:  time.Duration(cfg.HTTP.WebSocket.IdleTimeout),
			MessageRate:  cfg.HTTP.WebSocket.MessageRate,
			MessageBurst: cfg.HTTP.WebSocket.MessageBurst,
			SendQueue:    cfg.HTTP.WebSocket.SendQueue,
		},
		MaxStreams:   cfg.HTTP.MaxStreamsPerClient,
		SSEHeartbeat: m.sseHeartbeat,
		// 0: the web default (30 s); tests shorten it.
		SSEWriteTimeout: m.sseWriteTimeout,
		WriteTimeout:    m.httpWriteTimeout,
		// m.Broker is set below, before the HTTP server starts serving.
		Metrics: []func(io.Writer){func(w io.Writer) {
			if m.Broker != nil {
				m.Broker.WritePrometheus(w)
			}
		}},
		// m.MQTTAddr is set below, before the HTTP server starts serving.
		BrokerPort: func() int {
			if a, ok := m.MQTTAddr.(*net.TCPAddr); ok {
				return a.Port
			}
			return 0
		},
		Checks: map[string]func() error{
			"store":    db.Ping,
			"registry": reg.Err,
			// m.Broker is set below, before the HTTP server starts serving.
			"broker": func() error {
				if m.Broker == nil {
					return hub.Errorf(hub.EUNAVAILABLE, "the mqtt broker is not running")
				}
				return m.Broker.Err()
			},
		},
		Logger: m.Logger.With("component", "http"),
	})
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("cannot listen on http.addr %s: %w", cfg.HTTP.Addr, err)
	}
	m.HTTPAddr = ln.Addr()
	// The broker opens after the HTTP listener, whose address it announces
	// on lmos/v1/hub/status, and before HTTP serves, so /healthz sees it.
	if err := m.openBroker(db, reg); err != nil {
		ln.Close()
		return err
	}
	// WebSocket agents reach MQTT consumers through the broker; none is
	// connected yet, whatever the registry remembers.
	srv.SetMQTT(m.Broker, m.Broker, m.Broker)
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
	// mDNS opens last: it advertises the ports actually bound, and its
	// goodbyes go out first when closing.
	if cfg.MDNS.Enabled {
		// Without mDNS the hub is still a directory and a broker: a host
		// where UDP 5353 is taken or multicast is refused keeps serving.
		if err := m.openMDNS(db.HubID(), reg); err != nil {
			m.Logger.Error("mdns is off: cannot open it; agents must be given the hub's address"+
				" (another mDNS responder holding UDP 5353 without SO_REUSEADDR? --mdns=false silences this)", "err", err)
		}
	}
	m.Logger.Info("hub ready", "name", cfg.Hub.Name, "id", db.HubID(), "things", reg.Count(),
		"data_dir", cfg.DataDir, "startup", time.Since(start).Round(time.Millisecond))
	return nil
}

// openBroker starts the embedded MQTT broker on cfg.MQTT.Addr.
func (m *Main) openBroker(db *store.DB, reg *hub.Registry) error {
	cfg := m.Config
	b, err := mqtt.New(reg, db, db, mqtt.Config{
		Anonymous:    cfg.MQTT.Anonymous,
		JoinMode:     cfg.Join.Mode,
		HubID:        db.HubID(),
		Version:      version,
		DirectoryURL: directoryURL(m.HTTPAddr),
		Forward:      m.Router,
		Logger:       m.Logger.With("component", "mqtt"),

		MaxQueuedBytes:    cfg.MQTT.MaxQueuedBytes,
		SlowClientTimeout: time.Duration(cfg.MQTT.SlowClientTimeout),
		ConnectTimeout:    time.Duration(cfg.MQTT.ConnectTimeout),
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

// openMDNS advertises the directory and broker and starts registering
// Things announced on the LAN.
func (m *Main) openMDNS(hubID string, reg *hub.Registry) error {
	cfg := m.Config
	if t, ok := m.HTTPAddr.(*net.TCPAddr); ok && t.IP.IsLoopback() {
		m.Logger.Warn("http listens on loopback only: agents on the lan will find the hub over mdns but cannot reach it; use --http-addr :8080",
			"addr", m.HTTPAddr.String())
	}
	host, _ := os.Hostname()
	// Namespaces and containers share a host name: the hub id keeps each
	// hub's .local host name its own.
	id := strings.ReplaceAll(hubID, "-", "")
	host = strings.SplitN(host, ".", 2)[0] + "-" + id[:min(6, len(id))]
	h, err := mdns.Open(reg, mdns.Config{
		Name:        cfg.Hub.Name,
		Host:        host,
		Interfaces:  cfg.MDNS.Interfaces,
		HTTPPort:    portOf(m.HTTPAddr),
		MQTTPort:    portOf(m.MQTTAddr),
		Scheme:      "http",
		ForgetAfter: time.Duration(cfg.MDNS.ForgetAfter),
		Logger:      m.Logger.With("component", "mdns"),
	})
	if err != nil {
		return err
	}
	m.MDNS = h
	m.mdnsHub.Store(h)
	m.onClose("mdns", h.Close)
	return nil
}

// hostNames returns what gives the hub's own names for the Host check: the
// host name (full, first label, and as name.local, which avahi on the same
// machine advertises), the hub name, and the .local name the hub's mDNS
// advertises (read per call: a conflict renames it).
func (m *Main) hostNames() func() []string {
	var names []string
	if h, err := os.Hostname(); err == nil && h != "" {
		first := strings.SplitN(h, ".", 2)[0]
		names = append(names, h, first, first+".local")
	}
	if n := m.Config.Hub.Name; n != "" {
		names = append(names, n, n+".local")
	}
	return func() []string {
		if h := m.mdnsHub.Load(); h != nil {
			return append(names[:len(names):len(names)], h.HostName())
		}
		return names
	}
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

// newLogger builds the process logger from the log settings.
func newLogger(w io.Writer, cfg LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(cfg.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
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
