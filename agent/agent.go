package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// ErrClosed is returned by operations on a closed Agent.
var ErrClosed = errors.New("the agent is closed")

// ErrNotConnected is returned by Emit while the agent is reconnecting, and
// over MQTT when its connection ends before the hub acknowledged it.
var ErrNotConnected = errors.New("the agent is not connected to the hub")

// Options configure an Agent.
type Options struct {
	// URL is the hub's broker: mqtt://host:port (tcp:// is accepted; the
	// port defaults to 1883), mqtts://host:port over TLS (ssl:// accepted;
	// port 8883), or its WebSocket ws://host:port/ws, wss:// over TLS (see
	// TLSFingerprint). Empty: the hub is found over mDNS (FindHub) within
	// Timeout.
	URL string
	// ClientID is the MQTT client id; "" picks a random one. It names the
	// agent's reply inbox, so it must not contain '/', '+' or '#'.
	ClientID string
	// TD is the agent's Thing Description: JSON bytes, a string, or any
	// value that marshals to a JSON object (a map, a struct). An id is
	// generated when it has none (give it one so the agent keeps its
	// identity across restarts). Affordances without forms, or with forms
	// without href, get hub forms.
	TD any
	// ContentType of the hub forms filled in: application/json (default)
	// or application/cbor. A placeholder form's own contentType wins.
	ContentType string
	// Credentials from an earlier join; nil: those kept in StateDir, else
	// it joins anonymously first.
	Credentials *Credentials
	// OnCredentials is called when the hub issues credentials, to keep them.
	OnCredentials func(Credentials)
	// Logger is the parent logger (slog.Default when nil).
	Logger *slog.Logger
	// Timeout bounds each network step (connect, join, publish) and
	// operations without a deadline of their own; default 10 s.
	Timeout time.Duration
	// InvokeTimeout bounds Invoke (and WriteProperty WithAck) when the
	// caller's ctx has no deadline: an action that never answers must not
	// hold the caller forever. Default 30 s, as the hub's HTTP proxy.
	InvokeTimeout time.Duration
	// MaxBackoff caps the reconnect delay; default 30 s.
	MaxBackoff time.Duration
	// KeepAlive is the MQTT keep alive; default 30 s.
	KeepAlive time.Duration
	// StateDir is where the agent keeps what must outlive it: its key
	// (key.json, mode 0600, made on first use), the time of its last
	// proof and the MQTT credentials the hub issued (credentials.json,
	// 0600), so that it gets back in after a restart (PROTOCOL §4.4). "" (and no Key): the agent joins unsigned, since a key made
	// for one run would bind its id to a key lost at the next start, and a
	// hub that binds ids to keys would then refuse it (PROTOCOL §6).
	StateDir string
	// Key, when set, is the agent's key instead of the one in StateDir
	// (read one with proof.ReadKeyFile). The agent signs its TD with it on
	// every join, over MQTT and WebSocket alike.
	Key ed25519.PrivateKey

	// TLS (mqtts://, wss:// URLs). The hub's certificate is trusted, in
	// this order: when TLSFingerprint is set, exactly the certificate with
	// that fingerprint (lmos-hub version --tls prints it; any case, colons
	// optional); else when TLSPinFile is set, the fingerprint kept in that
	// file, written on the first connection (trust on first use, as ssh's
	// known_hosts); else TLSConfig, or the system's CAs. A pinned
	// certificate that does not match refuses the connection with an error
	// wrapping lmos.ErrFingerprintMismatch. A pinned agent (TLSFingerprint
	// or TLSPinFile) connects only over TLS: a plain URL is an error, and
	// finding the hub over mDNS (URL "") skips, with a log line, every
	// answer without the TXT key tls=, naming another certificate, without
	// an mqtts:// broker link, or whose broker presents another certificate.
	// With TLSConfig alone the hub found must offer MQTT over TLS, verified
	// by that configuration.
	TLSFingerprint string
	TLSPinFile     string
	TLSConfig      *tls.Config

	// Failover lists other hubs' brokers (mqtt://, mqtts://), paired with
	// the hub of URL (PROTOCOL §9): when the connection to the hub is lost
	// and it does not come back within FailoverGrace, the agent connects
	// to the next of them and re-joins there (by its key's proof; the
	// credentials a hub issued are kept per hub, in memory), and so on
	// round the list. The agent's own requests (Invoke, Observe …) go
	// through whichever hub it is on. The same transport as URL: mqtt://
	// and mqtts:// for an MQTT agent, ws:// and wss:// for a WebSocket one
	// (which re-registers its TD there; it holds no credentials).
	Failover []string
	// FailoverGrace is how long the agent tries its lost hub again before
	// it tries another; default 2 s.
	FailoverGrace time.Duration
	// Directory is the hub's HTTP base URL (or its /.well-known/wot): the
	// agent reads the hub's paired peers (lmos:peers) from its directory
	// TD after each join and adds their brokers to Failover. Set when the
	// hub was found over mDNS, where the agent then also looks for those
	// peers (by their DIDs) when the hubs it knows fail.
	Directory string
	// NoPeerFailover: the agent does not learn failover hubs from
	// lmos:peers (Failover alone).
	NoPeerFailover bool

	// HubDID is the hub's did:key (/api/status "did"), the issuer
	// VerifyMembership trusts; "": the issuer of the first membership
	// credential the hub sends the agent (credentials.go).
	HubDID string
}

// Credentials are what the hub issues at join: the Thing's topic key and a
// password to reconnect with.
type Credentials = lmos.Credentials

// Agent is a Thing joined to a hub over MQTT 5 (or the LMOS WebSocket,
// see the package doc). It serves its actions and property writes,
// publishes its properties and events, and consumes other Things. It
// reconnects and re-joins by itself. Its methods are safe for concurrent
// use.
type Agent struct {
	opts     Options
	clientID string
	td       *description
	signer   *signer
	tid      string
	log      *slog.Logger

	ctx      context.Context // cancelled by Close: ends reconnecting
	cancel   context.CancelFunc
	hctx     context.Context // handlers' context, cancelled by Close
	hcancel  context.CancelFunc
	closed   chan struct{}
	done     chan struct{} // the reconnect loop has ended
	handlers sync.WaitGroup
	once     sync.Once
	running  chan struct{} // a slot per handler goroutine (maxHandlers)
	refusing chan struct{} // a slot per goroutine answering "busy" (maxRefusals)

	mu      sync.Mutex
	creds   *Credentials
	actions map[string]StreamHandler
	writes  map[string]WriteHandler
	props   map[string]any // last values set, republished on reconnect
	closing bool           // no new handlers

	// vcs are the agent's membership credentials (credentials.go).
	vcs credentialBox

	// link is the transport: MQTT 5 (mqtt://, link_mqtt.go) or the LMOS
	// WebSocket envelope (ws://, link_ws.go); set once, before start.
	link link
}

// Connect joins the hub: it publishes the TD on lmos/v1/things/{tid}/td,
// waits for …/td/result, reconnects with the credentials it got (the ACL
// lets only the authenticated Thing publish its own topics and read its
// own requests), leaves a will "offline" on …/status and publishes
// "online". It retries network failures with backoff until ctx ends; a
// rejected join returns an error wrapping the hub's *Problem. A hub in join
// mode approve holds a new Thing's join until an administrator decides:
// Connect then waits for the decision on its connection (over MQTT and
// WebSocket alike) for as long as ctx allows.
func Connect(ctx context.Context, opts Options) (*Agent, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.InvokeTimeout <= 0 {
		opts.InvokeTimeout = defaultInvokeTimeout
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 30 * time.Second
	}
	if opts.ContentType == "" {
		opts.ContentType = JSON
	}
	if opts.FailoverGrace <= 0 {
		opts.FailoverGrace = defaultFailoverGrace
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	found := opts.URL == ""
	if found {
		filter, err := discoveryFilter(opts, opts.Logger)
		if err != nil {
			return nil, err
		}
		fctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		h, err := findHub(fctx, FindOptions{Logger: opts.Logger}, filter)
		cancel()
		if err != nil {
			return nil, err
		}
		opts.URL = h.BrokerURL
		if opts.Directory == "" {
			opts.Directory = h.DirectoryURL
		}
		if filter != nil {
			opts.URL = h.SecureBrokerURL // only TLS when the agent knows whom to trust
		} else if strings.HasPrefix(opts.URL, "mqtts://") {
			// A TLS-only hub and no trust configured: the certificate its
			// own advertisement names (trust on first use, not kept).
			opts.TLSFingerprint = h.TLSFingerprint
		}
	}
	if pinned(opts) && !secureURL(opts.URL) {
		return nil, fmt.Errorf("cannot connect to %s: the agent is pinned to a certificate (Options.TLSFingerprint, TLSPinFile) and connects only over TLS (mqtts://, wss://)", opts.URL)
	}
	// The URL's scheme picks the link; nothing after this depends on it.
	newLinked := newMQTTAgent
	if isWS(opts.URL) {
		newLinked = newWSAgent
	}
	a, err := newLinked(opts)
	if err != nil {
		return nil, err
	}
	if a.signer, err = newSigner(opts, a.log); err != nil {
		return nil, err
	}
	if l, ok := a.link.(*mqttLink); ok && found && !pinned(opts) && opts.TLSConfig == nil {
		l.browse = true // its paired peers are looked for over mDNS too
	}
	return a.start(ctx)
}

// newAgent is an Agent without its link.
func newAgent(opts Options, td *description, log *slog.Logger) *Agent {
	return &Agent{
		opts:     opts,
		clientID: opts.ClientID,
		td:       td,
		tid:      lmos.TopicKey(td.id),
		log:      log,
		closed:   make(chan struct{}),
		done:     make(chan struct{}),
		actions:  make(map[string]StreamHandler),
		writes:   make(map[string]WriteHandler),
		props:    make(map[string]any),
		running:  make(chan struct{}, maxHandlers),
		refusing: make(chan struct{}, maxRefusals),
	}
}

// randomClientID is the client id of an agent not given one.
func randomClientID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "lmos-agent-" + hex.EncodeToString(b[:])
}

// start makes the first connection of a within ctx, then keeps it in the
// background.
func (a *Agent) start(ctx context.Context) (*Agent, error) {
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.hctx, a.hcancel = context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, a.cancel)
	defer stop()
	run, err := a.link.connect()
	if err != nil {
		a.cancel()
		a.hcancel()
		close(a.done)
		return nil, fmt.Errorf("cannot connect to the hub at %s: %w", a.opts.URL, err)
	}
	go run()
	return a, nil
}

// ID returns the Thing id.
func (a *Agent) ID() string { return a.td.id }

// ClientID returns the MQTT client id.
func (a *Agent) ClientID() string { return a.clientID }

// TD returns the Thing Description as joined (JSON, hub forms filled in),
// without its proof: each join signs it anew.
func (a *Agent) TD() []byte { return a.td.doc }

// JoinCredentials returns the MQTT credentials the agent connects with,
// nil before its first join.
func (a *Agent) JoinCredentials() *Credentials {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.creds == nil {
		return nil
	}
	c := *a.creds
	return &c
}

// Close publishes "offline", disconnects and stops reconnecting. Handlers
// in progress see their context cancelled and get up to Options.Timeout to
// return.
func (a *Agent) Close() error {
	var err error
	a.once.Do(func() {
		close(a.closed)
		err = a.link.close()
	})
	return err
}

// backoff is the delay before retry attempt n: 1 s doubling up to max, the
// upper half jittered. Even the first retry waits half a second: a broker
// that just dropped every client is usually stopping, and clients that
// come back at once only meet it half closed.
func backoff(n int, max time.Duration) time.Duration {
	d := time.Second << min(n, 16)
	if d > max || d <= 0 {
		d = max
	}
	return d/2 + mrand.N(d/2+1)
}

// withTimeout gives ctx the default timeout when it has no deadline.
func (a *Agent) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return withDefault(ctx, a.opts.Timeout)
}

// defaultInvokeTimeout is Options.InvokeTimeout when not set.
const defaultInvokeTimeout = 30 * time.Second

// withDefault gives ctx the timeout d when it has no deadline.
func withDefault(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// maxHandlers bounds the handler goroutines running at once: anyone may
// publish requests, and a flood must not spawn unbounded goroutines.
const maxHandlers = 64

// maxRefusals bounds the goroutines answering requests that find every
// handler slot taken; beyond it such requests are dropped unanswered.
const maxRefusals = 8

func contentTypeOr(ct, def string) string {
	if ct == "" {
		return def
	}
	return ct
}

// stopHandlers ends the handlers' context, refuses new requests and waits
// (up to Timeout) for the running handlers.
func (a *Agent) stopHandlers() {
	a.hcancel()
	a.mu.Lock()
	a.closing = true
	a.mu.Unlock()
	waited := make(chan struct{})
	go func() { a.handlers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(a.opts.Timeout):
		a.log.Warn("handlers still running at close")
	}
}
