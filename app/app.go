// Package app is the hub's process: Main turns a Config into a running hub
// by opening the store, registry, tokens, listeners, broker, HTTP adapter
// and mDNS in that order, each in one open… step, and closes them in
// reverse order. It is the only package that wires the adapters together;
// cmd/lmos-hub runs it behind its flags and signals, test/kit/hubtest runs
// it for tests. Config (defaults < YAML file < LMOS_HUB_* environment <
// flags) and its validation live here too.
package app

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/bridge"
	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/federation"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/tlscert"
	"github.com/eclipse-lmos/lmos-hub/mcpdoor"
	"github.com/eclipse-lmos/lmos-hub/mdns"
	"github.com/eclipse-lmos/lmos-hub/mqtt"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/web"
	"github.com/eclipse-lmos/lmos-hub/web/ws"
)

// Main is the hub process: it opens the adapters in order, wires them, and
// closes them in reverse order. cmd/lmos-hub runs it; tests run it
// in-process exactly as main does (test/kit/hubtest).
type Main struct {
	Config Config
	// Version is the build's version, reported by the directory, the
	// broker's status and /api/status.
	Version string
	// Stdout receives the first admin token, printed once.
	Stdout io.Writer
	Logger *slog.Logger
	// LogTail keeps the recent records of Logger for GET /api/log.
	LogTail *web.LogTail

	// SSEHeartbeat overrides the SSE keep-alive interval (0: the web
	// default, 15 s); tests shorten it to see keep-alives without waiting.
	SSEHeartbeat time.Duration
	// SSEWriteTimeout overrides how long an SSE client may leave a frame
	// unread (0: the web default, 30 s); tests shorten it.
	SSEWriteTimeout time.Duration
	// HTTPWriteTimeout overrides how long a client may take to read one
	// response (0: the web default, 60 s); tests shorten it.
	HTTPWriteTimeout time.Duration
	// Now overrides the registry's clock, and so the join policy's (nil:
	// time.Now); tests move it instead of waiting.
	Now func() time.Time

	// Set by Run, in this order.
	DB *store.DB
	// Key is the hub's own did:key (data dir, hub-key.json).
	Key ed25519.PrivateKey
	// Issuer signs membership credentials with Key.
	Issuer   *hub.CredentialIssuer
	Registry *hub.Registry
	Tokens   *hub.Tokens
	// Access is the one access policy every door asks (access.anonymous,
	// capped by join.mode).
	Access *hub.Access
	Router *hub.Router
	// GroupActions runs group actions on every door (after Access).
	GroupActions *hub.GroupActions
	// Peers are the paired hubs of the federation; Federation mirrors
	// their Things.
	Peers      *hub.Peers
	Federation *federation.Federation
	// Admission is the join policy both doors that admit Things (MQTT,
	// WebSocket) apply, with one join rate per source.
	Admission *hub.Admission
	// TLS is the served certificate; nil when tls.enabled is false.
	TLS *tlscert.Cert
	// HTTPAddr is the address the HTTP listener actually bound; nil when
	// tls.only closed it.
	HTTPAddr net.Addr
	// HTTPSAddr is the address the HTTPS listener bound; nil without TLS.
	HTTPSAddr net.Addr
	Broker    *mqtt.Broker
	// Groups carries group channels between the doors (WebSocket and SSE
	// members reach MQTT members through the broker).
	Groups *mqtt.GroupBus
	// Bridge is the MQTT bridge to an upstream broker (State reports its
	// link); nil while bridge.url is empty.
	Bridge *bridge.Bridge
	// MQTTAddr is the address the MQTT listener actually bound; nil when
	// tls.only closed it.
	MQTTAddr net.Addr
	// MQTTSAddr is the address the MQTTS listener bound; nil without TLS.
	MQTTSAddr net.Addr
	Web       *web.Server
	HTTP      *http.Server
	// MCP is the MCP door served at /mcp; nil when mcp.enabled is false.
	MCP *mcpdoor.Door
	// MDNS advertises the hub and registers Things announced on the LAN;
	// nil when mdns.enabled is false or it could not open.
	MDNS *mdns.Hub
	// Sync pushes the local Things to sync.url; nil while it is off.
	Sync *dirsync.Pusher
	// Pull mirrors a remote directory's Things (sync.pull); nil when off.
	Pull *dirsync.Puller
	// observer counts joins and routed interactions for /metrics.
	observer *web.Observer
	// mdnsErr is why mDNS could not open (nil: it did, or is off).
	mdnsErr atomic.Pointer[error]

	// httpLn and httpsLn are the HTTP(S) listeners until the HTTP server
	// owns them.
	httpLn, httpsLn net.Listener
	// names are the hub's own names for the Host check.
	names   *hostNames
	errc    chan error
	closers []closer
	// links report the state of sync, pull, bridge and peer links.
	links links
}

// NewMain returns a Main for cfg; a nil logger is slog.Default().
func NewMain(cfg Config, stdout io.Writer, logger *slog.Logger) *Main {
	if logger == nil {
		logger = slog.Default()
	}
	// Every component logs through the tail, so GET /api/log shows the
	// hub's own events (joins, refusals, takeovers, presence).
	tail := web.NewLogTail(web.DefaultLogTailSize)
	logger = slog.New(tail.Wrap(logger.Handler()))
	return &Main{Config: cfg, Version: "dev", Stdout: stdout, Logger: logger, LogTail: tail, errc: make(chan error, 1)}
}

// Run opens everything and starts serving; it returns once the hub serves.
// Sockets are opened here, synchronously, so a port in use fails Run. On an
// error what was opened is closed again.
func (m *Main) Run(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			for _, ln := range []net.Listener{m.httpLn, m.httpsLn} {
				if ln != nil {
					ln.Close()
				}
			}
			_ = m.Close(context.Background())
		}
	}()
	start := time.Now()
	m.limitMemory()
	for _, open := range []func(context.Context) error{
		m.openStore,
		m.openIdentity,
		m.openRegistry,
		m.openTokens,
		m.openPeers,
		m.openTLS,
		m.openListeners,
		m.openCredentials,
		m.openBroker,
		m.openBridge,
		m.openMCP,
		m.openWeb,
		m.openMDNS,
		m.openSync,
		m.openPull,
		m.openLinkWatch,
	} {
		if err := open(ctx); err != nil {
			return err
		}
	}
	if err := m.firstToken(); err != nil {
		return err
	}
	m.Logger.Info("hub ready", "name", m.Config.Hub.Name, "id", m.DB.HubID(), "did", m.DID(), "things", m.Registry.Count(),
		"data_dir", m.Config.DataDir, "startup", time.Since(start).Round(time.Millisecond))
	m.notifyService()
	return nil
}

// openStore opens the bbolt store in the data directory; it fails with
// store.ErrLocked when another process holds it.
func (m *Main) openStore(context.Context) error {
	db, err := store.Open(m.Config.DataDir, store.Options{EventLogSize: m.Config.Registry.EventLogSize})
	if err != nil && !errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("%w %s: %w", ErrDataDir, m.Config.DataDir, err)
	}
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
	reg, err := hub.NewRegistry(m.DB, hub.RegistryOptions{
		Now:                m.Now,
		Logger:             m.Logger.With("component", "registry"),
		MaxDepth:           cfg.Registry.MaxDepth,
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
		Issuer:      m.newIssuer(),
		Memberships: hub.MembershipLimits{IssueRate: cfg.Groups.IssueRate, IssueBurst: cfg.Groups.IssueBurst},
	})
	if err != nil {
		return err
	}
	m.Registry = reg
	m.onClose("registry", func(context.Context) error { return reg.Close() })
	m.Router = hub.NewRouter(reg)
	// The join rate keeps the defaults (hub.DefaultJoinRate, …Burst).
	m.Admission, err = hub.NewAdmission(reg, m.DB, cfg.Join.Mode, 0, 0)
	if err != nil {
		return err
	}
	// /metrics counts joins and interactions; joins are logged at info.
	m.observer = web.NewObserver()
	m.Router.SetObserver(m.observer)
	// A span per routed interaction, in a binary built with the otel tag
	// (app/otel.go); the default binary carries no tracing library.
	if err := m.openTracing(); err != nil {
		return err
	}
	m.Admission.SetObserver(m.observer)
	m.Admission.SetLogger(m.Logger.With("component", "join"))
	// Joins parked for approval survive a restart (join mode approve),
	// and expire join.pendingTTL after they were parked.
	m.Admission.SetPendingTTL(time.Duration(cfg.Join.PendingTTL))
	if err := m.Admission.OpenPending(m.DB); err != nil {
		return err
	}
	m.onClose("join approval", func(context.Context) error { m.Admission.Close(); return nil })
	return nil
}

// openTokens opens the admin tokens and installs --admin-token.
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
	// A group action is bounded as one proxied invocation is.
	m.GroupActions = hub.NewGroupActions(m.Registry, m.Router, m.Access,
		hub.GroupActionOptions{Timeout: time.Duration(m.Config.HTTP.ProxyTimeout), MaxHeldBytes: m.Config.Groups.ActionOutputBytes})
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

// ErrDataDir is matched (errors.Is) by the error of a start whose data
// directory cannot be used: not a directory, not writable, not a store.
// It is a configuration error (dataDir), not one a restart mends.
var ErrDataDir = errors.New("unusable data directory")

// A ListenError is a listener that could not bind: the setting that
// names its address, and why.
type ListenError struct {
	Setting, Addr string // "http.addr", ":8080"
	Err           error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("cannot listen on %s %s: %v", e.Setting, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// listen binds addr for the listener setting names.
func listen(setting, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ListenError{Setting: setting, Addr: addr, Err: err}
	}
	return ln, nil
}

// openListeners binds the HTTP listeners (plain unless tls.only, HTTPS
// when TLS is on): the broker announces the directory's address on
// lmos/v1/hub/status, and the directory TD names it. The MQTT listeners
// are the broker's own (it wraps every connection), bound in openBroker.
func (m *Main) openListeners(context.Context) error {
	cfg := m.Config
	if !cfg.TLS.Only {
		ln, err := listen("http.addr", cfg.HTTP.Addr)
		if err != nil {
			return err
		}
		m.httpLn, m.HTTPAddr = ln, ln.Addr()
	}
	if m.TLS != nil {
		ln, err := listen("tls.httpsAddr", cfg.TLS.HTTPSAddr)
		if err != nil {
			return err
		}
		m.httpsLn, m.HTTPSAddr = ln, ln.Addr()
	}
	return nil
}

// directoryURL is the directory TD's URL the broker announces: the plain
// one while it is open, else the HTTPS one.
func (m *Main) directoryURL() string {
	if m.HTTPAddr != nil {
		return directoryURL("http", m.HTTPAddr)
	}
	return directoryURL("https", m.HTTPSAddr)
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
		DirectoryURL: m.directoryURL(),
		Forward:      m.Router,
		GroupActions: m.GroupActions,
		Logger:       m.Logger.With("component", "mqtt"),

		MaxQueuedBytes:    cfg.MQTT.MaxQueuedBytes,
		SlowClientTimeout: time.Duration(cfg.MQTT.SlowClientTimeout),
		ConnectTimeout:    time.Duration(cfg.MQTT.ConnectTimeout),
		Bridged:           cfg.bridgedAreas(),
	})
	if err != nil {
		return err
	}
	m.onClose("mqtt", b.Close)
	if !cfg.TLS.Only {
		ln, err := listen("mqtt.addr", cfg.MQTT.Addr)
		if err != nil {
			return err
		}
		if m.MQTTAddr, err = b.Serves("tcp", ln); err != nil {
			return err
		}
	}
	if m.TLS != nil {
		ln, err := listen("tls.mqttsAddr", cfg.TLS.MQTTSAddr)
		if err != nil {
			return err
		}
		if m.MQTTSAddr, err = b.Serves("tls", m.TLS.Listener(ln, "mqtts")); err != nil {
			return err
		}
	}
	if err := b.Serve(); err != nil {
		return err
	}
	m.Broker = b
	m.Router.Handle(hub.SourceMQTT, b)
	if m.Groups, err = mqtt.NewGroupBus(b); err != nil {
		return err
	}
	if m.MQTTAddr != nil {
		m.Logger.Info("mqtt listening", "addr", m.MQTTAddr.String())
	}
	if m.MQTTSAddr != nil {
		m.Logger.Info("mqtts listening", "addr", m.MQTTSAddr.String(), "fingerprint", m.TLS.Fingerprint())
	}
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
	errorLog := slog.NewLogLogger(m.Logger.With("component", "http").Handler(), slog.LevelWarn)
	if m.TLS != nil {
		errorLog = m.TLS.HTTPErrorLog("https", m.Logger.With("component", "http"))
	}
	m.HTTP = &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          errorLog,
		ConnState:         silent.track,
	}
	serve := func(ln net.Listener, what string) {
		go func() {
			if err := m.HTTP.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				select {
				case m.errc <- fmt.Errorf("%s server failed: %w", what, err):
				default: // the other listener's failure is reported
				}
			}
		}()
	}
	if ln := m.httpLn; ln != nil {
		m.httpLn = nil
		serve(ln, "http")
	}
	if ln := m.httpsLn; ln != nil {
		m.httpsLn = nil
		// HTTP/1.1 only: WebSocket upgrades (/ws, /mqtt) need it.
		serve(tls.NewListener(ln, m.TLS.ServerConfig("http/1.1")), "https")
	}
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
	if m.HTTPAddr != nil {
		m.Logger.Info("http listening", "addr", m.HTTPAddr.String())
	}
	if m.HTTPSAddr != nil {
		m.Logger.Info("https listening", "addr", m.HTTPSAddr.String(), "fingerprint", m.TLS.Fingerprint())
	}
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
		Backup:         db.Backup,
		MDNS:           func() any { return m.mdnsStatus() },
		PeerCandidates: func() any { return m.peerCandidates() },
		Links:          m.Links,
		Router:         m.Router,
		GroupActions:   m.GroupActions,
		MCP:            m.mcpHandler(),
		ProxyTimeout:   time.Duration(cfg.HTTP.ProxyTimeout),
		AllowedOrigins: cfg.HTTP.AllowedOrigins,
		AllowedHosts:   cfg.HTTP.AllowedHosts,
		HostNames:      m.names.get,
		Admission:      m.Admission,
		Peers:          m.Peers,
		PeerStates:     m.Federation.States,
		PeerMQTT:       m.Federation.MQTT,
		WS: ws.Options{
			PingInterval: time.Duration(cfg.HTTP.WebSocket.PingInterval),
			IdleTimeout:  time.Duration(cfg.HTTP.WebSocket.IdleTimeout),
			MessageRate:  cfg.HTTP.WebSocket.MessageRate,
			MessageBurst: cfg.HTTP.WebSocket.MessageBurst,
			SendQueue:    cfg.HTTP.WebSocket.SendQueue,
		},
		MaxStreams:          cfg.HTTP.MaxStreamsPerClient,
		MaxStreamQueueBytes: cfg.HTTP.MaxStreamQueueBytes,
		SSEHeartbeat:        m.SSEHeartbeat,
		SSEWriteTimeout:     m.SSEWriteTimeout,
		WriteTimeout:        m.HTTPWriteTimeout,
		Metrics:             m.metrics(),
		Observer:            m.observer,
		BrokerPort:          portOf(m.MQTTAddr),
		TLS:                 m.tlsInfo(),
		// WebSocket agents reach MQTT consumers through the broker.
		Publisher: b,
		Streams:   b,
		Conns:     b,
		Groups:    m.Groups,
		Checks: map[string]func() error{
			"store":    db.Ping,
			"registry": m.Registry.Err,
			"broker":   b.Err,
		},
		Optional: map[string]func() (string, error){"mdns": m.mdnsHealth},
		Logger:   m.Logger.With("component", "http"),
		LogTail:  m.LogTail,
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
		m.mdnsErr.Store(&err)
		m.Logger.Error("mdns is off: cannot open it; agents must be given the hub's address"+
			" (another mDNS responder holding UDP 5353 without SO_REUSEADDR? --mdns=false silences this)", "err", err)
	}
	return nil
}

// mdnsStatus is the state of mDNS for GET /api/status.
func (m *Main) mdnsStatus() mdns.Status {
	if h := m.names.mdns.Load(); h != nil {
		return h.Status()
	}
	if !m.Config.MDNS.Enabled {
		return mdns.Status{State: "off", Interfaces: []string{}}
	}
	if err := m.mdnsErr.Load(); err != nil {
		return mdns.Status{State: "failed", Error: (*err).Error(), Interfaces: []string{}}
	}
	return mdns.Status{State: "starting", Interfaces: []string{}}
}

// peerCandidates are the other lmos-hubs mDNS sees on the LAN (none
// while mDNS is off), each marked when it is paired already.
func (m *Main) peerCandidates() []mdns.Candidate {
	h := m.names.mdns.Load()
	if h == nil {
		return []mdns.Candidate{}
	}
	list := h.Candidates.List()
	for i := range list {
		list[i].Paired = m.Peers != nil && m.Peers.Paired(list[i].DID)
	}
	return list
}

// mdnsHealth is mDNS on /healthz: "up" once advertising, "off",
// "starting" or "probing", or the error it failed with.
func (m *Main) mdnsHealth() (string, error) {
	st := m.mdnsStatus()
	switch st.State {
	case "advertising":
		return "up", nil
	case "failed":
		return "", errors.New(st.Error)
	}
	return st.State, nil
}

// advertise opens the hub's mDNS responder and registrar.
func (m *Main) advertise() error {
	cfg := m.Config
	if t, ok := m.HTTPAddr.(*net.TCPAddr); ok && t.IP.IsLoopback() {
		m.Logger.Warn("http listens on loopback only: agents on the lan will find the hub over mdns but cannot reach it; use --http-addr :8080",
			"addr", m.HTTPAddr.String())
	}
	host := m.mdnsHost()
	// The directory is advertised where plain clients reach it while that
	// door is open; with tls.only, on HTTPS (PROTOCOL §8).
	httpPort, scheme, fp := portOf(m.HTTPAddr), "http", ""
	if m.TLS != nil {
		fp = m.TLS.Fingerprint()
		if m.HTTPAddr == nil {
			httpPort, scheme = portOf(m.HTTPSAddr), "https"
		}
	}
	h, err := mdns.Open(m.Registry, mdns.Config{
		Name:           cfg.Hub.Name,
		Host:           host,
		Interfaces:     cfg.MDNS.Interfaces,
		HTTPPort:       httpPort,
		MQTTPort:       portOf(m.MQTTAddr),
		MQTTSPort:      portOf(m.MQTTSAddr),
		Scheme:         scheme,
		TLSFingerprint: fp,
		ForgetAfter:    time.Duration(cfg.MDNS.ForgetAfter),
		Admission:      m.Admission,
		DID:            m.DID(),
		Logger:         m.Logger.With("component", "mdns"),
	})
	if err != nil {
		return err
	}
	m.MDNS = h
	m.names.mdns.Store(h)
	if m.TLS != nil {
		m.TLS.OnChange(h.SetTLSFingerprint)
	}
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

// mdnsHost is the host label the hub advertises over mDNS (before any
// rename on a conflict): namespaces and containers share a host name, so
// the hub id keeps each hub's .local host name its own.
func (m *Main) mdnsHost() string {
	host, _ := os.Hostname()
	id := strings.ReplaceAll(m.DB.HubID(), "-", "")
	return strings.SplitN(host, ".", 2)[0] + "-" + id[:min(6, len(id))]
}

// directoryURL is the directory TD's URL for the listener at addr.
func directoryURL(scheme string, addr net.Addr) string {
	return listenerURL(scheme, addr, "/.well-known/wot")
}

// listenerURL is the URL of path on the listener at addr ("" when addr
// has no port); an unspecified host (all interfaces) is replaced by the
// host name, which LAN clients can resolve.
func listenerURL(scheme string, addr net.Addr, path string) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil && name != "" {
			host = name
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port) + path
}

// bootstrapToken installs --admin-token. The first token of a hub
// without one is made by firstToken, once the hub serves.
func (m *Main) bootstrapToken() error {
	tok := m.Config.AdminToken
	if tok == "" {
		return nil
	}
	t, err := m.Tokens.Install(tok, "provisioned")
	if err != nil {
		return fmt.Errorf("cannot install adminToken: %w", err)
	}
	m.Logger.Info("admin token installed", "token_id", t.ID)
	return nil
}

// firstToken runs once every listener is bound: a hub without an active
// token creates one and prints it once (only its hash is stored), so a
// start that fails, on a busy port say, neither makes nor shows one; a
// hub with tokens says so and how to make another.
func (m *Main) firstToken() error {
	n, err := m.Tokens.ActiveCount()
	if err != nil {
		return fmt.Errorf("cannot count the admin tokens: %w", err)
	}
	if n > 0 {
		m.Logger.Info("admin tokens exist; `lmos-hub token create` makes another", "active", n,
			"how", "lmos-hub token create --hub URL --token TOKEN while the hub runs, --data-dir DIR while it is stopped")
		return nil
	}
	secret, t, err := m.Tokens.Create("initial")
	if err != nil {
		return fmt.Errorf("cannot create the first admin token: %w", err)
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
