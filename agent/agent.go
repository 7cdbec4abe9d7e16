package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
)

// ErrClosed is returned by operations on a closed Agent.
var ErrClosed = errors.New("the agent is closed")

// ErrNotConnected is returned by Emit while the agent is reconnecting.
var ErrNotConnected = errors.New("the agent is not connected to the hub")

// Options configure an Agent.
type Options struct {
	// URL is the hub's broker: mqtt://host:port (tcp:// is accepted; the
	// port defaults to 1883). Empty: the hub is found over mDNS (FindHub)
	// within Timeout.
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
	// Credentials from an earlier join; nil joins anonymously first.
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
}

// Credentials are what the hub issues at join: the Thing's topic key and a
// password to reconnect with.
type Credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// joinResult is the payload of …/td/result (PROTOCOL §4.1).
type joinResult struct {
	Status      string       `json:"status"`
	ID          string       `json:"id"`
	Problem     *Problem     `json:"problem"`
	Credentials *Credentials `json:"credentials"`
}

// Agent is a Thing joined to a hub over MQTT 5. It serves its actions and
// property writes, publishes its properties and events, and consumes other
// Things. It reconnects and re-joins by itself. Its methods are safe for
// concurrent use.
type Agent struct {
	opts     Options
	addr     string // host:port of the broker
	clientID string
	td       *description
	tid      string
	inbox    string // lmos/v1/clients/{clientID}/
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
	cli     *paho.Client // nil while disconnected
	conn    net.Conn
	up      chan struct{} // closed while cli != nil
	creds   *Credentials
	joinCh  chan joinResult
	actions map[string]StreamHandler
	writes  map[string]WriteHandler
	props   map[string]any                    // last values set, republished on reconnect
	watches map[string]map[uint64]func(Value) // topic → observers
	nextID  uint64
	pending map[string]*request // correlation data → an Invoke waiting
	closing bool                // no new handlers

	subMu sync.Mutex // orders SUBSCRIBE/UNSUBSCRIBE of watched topics

	// ws is set when the agent speaks the LMOS WebSocket envelope
	// (Options.URL ws:// or wss://) instead of MQTT.
	ws *wsLink
}

// Connect joins the hub: it publishes the TD on lmos/v1/things/{tid}/td,
// waits for …/td/result, reconnects with the credentials it got (the ACL
// lets only the authenticated Thing publish its own topics and read its
// own requests), leaves a will "offline" on …/status and publishes
// "online". It retries network failures with backoff until ctx ends; a
// rejected join returns an error wrapping the hub's *Problem.
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
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.URL == "" {
		fctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		h, err := FindHub(fctx, FindOptions{Logger: opts.Logger})
		cancel()
		if err != nil {
			return nil, err
		}
		opts.URL = h.BrokerURL
	}
	if isWS(opts.URL) {
		return connectWS(ctx, opts)
	}
	addr, err := brokerAddr(opts.URL)
	if err != nil {
		return nil, err
	}
	if opts.ClientID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		opts.ClientID = "lmos-agent-" + hex.EncodeToString(b[:])
	}
	if strings.ContainsAny(opts.ClientID, "/+#") {
		return nil, fmt.Errorf("cannot use client id %q: it must not contain '/', '+' or '#'", opts.ClientID)
	}
	td, err := prepareTD(opts.TD, addr, opts.ContentType)
	if err != nil {
		return nil, fmt.Errorf("cannot prepare the Thing Description: %w", err)
	}
	a := &Agent{
		opts:     opts,
		addr:     addr,
		clientID: opts.ClientID,
		td:       td,
		tid:      lmos.TopicKey(td.id),
		inbox:    lmos.ClientsPrefix + opts.ClientID + "/",
		log:      opts.Logger.With("component", "agent", "id", td.id),
		closed:   make(chan struct{}),
		done:     make(chan struct{}),
		up:       make(chan struct{}),
		creds:    opts.Credentials,
		actions:  make(map[string]StreamHandler),
		writes:   make(map[string]WriteHandler),
		props:    make(map[string]any),
		watches:  make(map[string]map[uint64]func(Value)),
		pending:  make(map[string]*request),
		running:  make(chan struct{}, maxHandlers),
		refusing: make(chan struct{}, maxRefusals),
	}
	return start(ctx, a, opts.URL, a.establishRetry, a.run)
}

// start makes the first connection of a (over either transport) within
// ctx, then runs it in the background.
func start[C any](ctx context.Context, a *Agent, url string, establish func(first bool) (C, error), run func(C)) (*Agent, error) {
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.hctx, a.hcancel = context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, a.cancel)
	defer stop()
	c, err := establish(true)
	if err != nil {
		a.cancel()
		a.hcancel()
		close(a.done)
		return nil, fmt.Errorf("cannot connect to the hub at %s: %w", url, err)
	}
	go run(c)
	return a, nil
}

// ID returns the Thing id.
func (a *Agent) ID() string { return a.td.id }

// ClientID returns the MQTT client id.
func (a *Agent) ClientID() string { return a.clientID }

// TD returns the Thing Description as joined (JSON, hub forms filled in).
func (a *Agent) TD() []byte { return a.td.doc }

// Credentials returns the credentials the agent connects with, nil before
// its first join.
func (a *Agent) Credentials() *Credentials {
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
		if a.ws != nil {
			a.wsClose()
			return
		}
		a.cancel()
		<-a.done
		a.stopHandlers()
		a.mu.Lock()
		cli := a.cli
		a.cli = nil
		a.mu.Unlock()
		if cli == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
		defer cancel()
		err = a.publishOn(ctx, cli, &paho.Publish{Topic: lmos.ThingTopic(a.td.id, "status"), Payload: []byte("offline"), QoS: 1, Retain: true})
		if derr := cli.Disconnect(&paho.Disconnect{ReasonCode: 0}); derr != nil && err == nil {
			err = fmt.Errorf("cannot disconnect: %w", derr)
		}
	})
	return err
}

// run keeps the agent connected: when the connection drops it reconnects
// and re-joins, with capped and jittered exponential backoff.
func (a *Agent) run(cli *paho.Client) {
	defer close(a.done)
	for {
		select {
		case <-cli.Done():
		case <-a.ctx.Done():
			return
		}
		a.mu.Lock()
		if a.cli == cli {
			a.cli, a.conn, a.up = nil, nil, make(chan struct{})
		}
		a.mu.Unlock()
		if a.ctx.Err() != nil {
			return
		}
		a.log.Warn("connection to the hub lost; reconnecting")
		var err error
		if cli, err = a.establishRetry(false); err != nil {
			return // closed
		}
		a.log.Info("reconnected to the hub")
	}
}

// establishRetry calls establish until it succeeds or a.ctx ends, waiting
// a backoff before each retry, and before the first attempt too when the
// agent reconnects (not initial): the broker may still be cleaning up the
// old session of the same client id. When initial, errors no retry can fix
// (a rejection, a refused connection) end it at once.
func (a *Agent) establishRetry(initial bool) (*paho.Client, error) {
	var last error
	for attempt := 0; ; attempt++ {
		if attempt > 0 || !initial {
			n := attempt
			if initial {
				n--
			}
			d := backoff(n, a.opts.MaxBackoff)
			if last != nil {
				a.log.Warn("cannot connect to the hub; retrying", "err", last, "in", d.Round(time.Millisecond))
			}
			select {
			case <-time.After(d):
			case <-a.ctx.Done():
				if last == nil {
					return nil, a.ctx.Err()
				}
				return nil, fmt.Errorf("%w (%w)", a.ctx.Err(), last)
			}
		}
		cli, err := a.establish()
		if err == nil {
			return cli, nil
		}
		if a.ctx.Err() != nil {
			if errors.Is(err, context.Canceled) {
				return nil, a.ctx.Err()
			}
			return nil, fmt.Errorf("%w (%w)", a.ctx.Err(), err)
		}
		if initial && permanent(err) {
			return nil, err
		}
		last = err
	}
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

// connackError is a CONNACK refusing the connection.
type connackError struct {
	code   byte
	reason string
}

func (e *connackError) Error() string {
	return fmt.Sprintf("the broker refused the connection (reason 0x%02x %s)", e.code, e.reason)
}

func permanent(err error) bool {
	var p *Problem
	var c *connackError
	return errors.As(err, &p) || errors.As(err, &c) && (c.code == 0x84 || c.code == 0x85 || c.code == 0x86 || c.code == 0x87 || c.code == 0x8C)
}

// establish makes one authenticated session: an anonymous join first when
// the agent has no credentials, then a connection with them, its
// subscriptions, a re-join, "online" and the last property values.
func (a *Agent) establish() (*paho.Client, error) {
	ctx, cancel := context.WithTimeout(a.ctx, 3*a.opts.Timeout)
	defer cancel()
	a.mu.Lock()
	creds := a.creds
	a.mu.Unlock()
	fresh := false
	if creds == nil {
		c, err := a.joinAnonymously(ctx)
		if err != nil {
			return nil, err
		}
		creds, fresh = c, true
	}
	will := &paho.WillMessage{Topic: lmos.ThingTopic(a.td.id, "status"), Payload: []byte("offline"), QoS: 1, Retain: true}
	cli, conn, err := a.dial(ctx, a.clientID, creds, will)
	var ce *connackError
	if errors.As(err, &ce) && (ce.code == 0x86 || ce.code == 0x87) && !fresh {
		// The hub no longer knows these credentials (its store was reset):
		// join again from scratch.
		a.log.Warn("the hub refused the agent's credentials; joining again", "err", err)
		a.mu.Lock()
		a.creds = nil
		a.mu.Unlock()
		return a.establish()
	}
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = cli.Disconnect(&paho.Disconnect{})
		}
	}()
	a.mu.Lock()
	filters := []string{lmos.ThingTopic(a.td.id, "actions/+"), lmos.ThingTopic(a.td.id, "properties/+/set"), a.inbox + "#"}
	if !fresh {
		filters = append(filters, lmos.ThingTopic(a.td.id, "td/result"))
	}
	for topic := range a.watches {
		filters = append(filters, topic)
	}
	a.mu.Unlock()
	if err := subscribe(ctx, cli, filters...); err != nil {
		return nil, err
	}
	a.log.Debug("subscribed", "filters", filters)
	if !fresh {
		if _, err := a.join(ctx, cli, false); err != nil {
			return nil, err
		}
	}
	if err := a.publishOn(ctx, cli, &paho.Publish{Topic: lmos.ThingTopic(a.td.id, "status"), Payload: []byte("online"), QoS: 1, Retain: true}); err != nil {
		return nil, err
	}
	a.mu.Lock()
	props := maps.Clone(a.props)
	a.mu.Unlock()
	for name, v := range props {
		if err := a.publishProperty(ctx, cli, name, v); err != nil {
			return nil, err
		}
	}
	a.mu.Lock()
	a.cli, a.conn = cli, conn
	close(a.up)
	a.mu.Unlock()
	ok = true
	a.log.Info("joined the hub", "broker", a.addr, "client_id", a.clientID)
	return cli, nil
}

// joinAnonymously connects without credentials, publishes the TD and
// returns the credentials the hub issues.
func (a *Agent) joinAnonymously(ctx context.Context) (*Credentials, error) {
	// A client id of its own: the authenticated session follows at once,
	// and a broker may still be cleaning up this one (mochi removes the
	// subscriptions and the client entry by id after the connection ends).
	cli, _, err := a.dial(ctx, a.clientID+"-join", nil, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Disconnect(&paho.Disconnect{}) }()
	if err := subscribe(ctx, cli, lmos.ThingTopic(a.td.id, "td/result")); err != nil {
		return nil, err
	}
	res, err := a.join(ctx, cli, true)
	if err != nil {
		return nil, err
	}
	if res.Credentials == nil {
		return nil, fmt.Errorf("the hub accepted %s but issued no credentials", a.td.id)
	}
	a.mu.Lock()
	a.creds = res.Credentials
	a.mu.Unlock()
	if a.opts.OnCredentials != nil {
		a.opts.OnCredentials(*res.Credentials)
	}
	return res.Credentials, nil
}

// join publishes the TD and waits for its result (the caller subscribed
// to …/td/result).
func (a *Agent) join(ctx context.Context, cli *paho.Client, anonymous bool) (joinResult, error) {
	ch := make(chan joinResult, 1)
	a.mu.Lock()
	a.joinCh = ch
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.joinCh = nil
		a.mu.Unlock()
	}()
	err := a.publishOn(ctx, cli, &paho.Publish{
		Topic: lmos.ThingTopic(a.td.id, "td"), Payload: a.td.doc, QoS: 1, Retain: true,
		Properties: &paho.PublishProperties{ContentType: "application/td+json"},
	})
	if err != nil {
		return joinResult{}, fmt.Errorf("cannot publish the Thing Description: %w", err)
	}
	a.log.Debug("published the Thing Description", "anonymous", anonymous)
	select {
	case res := <-ch:
		switch {
		case res.Status == "accepted":
			return res, nil
		case res.Problem != nil:
			return res, fmt.Errorf("the hub rejected %s: %w", a.td.id, res.Problem)
		default:
			return res, fmt.Errorf("the hub answered the join of %s with status %q", a.td.id, res.Status)
		}
	case <-cli.Done():
		return joinResult{}, errors.New("connection lost while joining")
	case <-ctx.Done():
		return joinResult{}, fmt.Errorf("no join result from the hub: %w", ctx.Err())
	}
}

// dial opens a TCP connection and an MQTT 5 session (clean start) on it.
func (a *Agent) dial(ctx context.Context, clientID string, creds *Credentials, will *paho.WillMessage) (*paho.Client, net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", a.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the broker: %w", err)
	}
	cli := paho.NewClient(paho.ClientConfig{
		Conn:              conn,
		PacketTimeout:     a.opts.Timeout,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){a.receive},
		OnClientError:     func(err error) { a.log.Debug("mqtt client error", "err", err) },
		OnServerDisconnect: func(d *paho.Disconnect) {
			a.log.Info("the broker disconnected the agent", "reason", d.ReasonCode)
		},
	})
	cp := &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: uint16(a.opts.KeepAlive / time.Second), WillMessage: will}
	if creds != nil {
		cp.Username, cp.UsernameFlag = creds.Username, true
		cp.Password, cp.PasswordFlag = []byte(creds.Password), true
	}
	ca, err := cli.Connect(ctx, cp)
	if err != nil {
		conn.Close()
		if ca != nil && ca.ReasonCode >= 0x80 {
			reason := ""
			if ca.Properties != nil {
				reason = ca.Properties.ReasonString
			}
			return nil, nil, &connackError{code: ca.ReasonCode, reason: reason}
		}
		return nil, nil, fmt.Errorf("cannot connect: %w", err)
	}
	return cli, conn, nil
}

func subscribe(ctx context.Context, cli *paho.Client, filters ...string) error {
	s := &paho.Subscribe{}
	for _, f := range filters {
		s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: f, QoS: 1})
	}
	if _, err := cli.Subscribe(ctx, s); err != nil {
		return fmt.Errorf("cannot subscribe to %s: %w", strings.Join(filters, ", "), err)
	}
	return nil
}

// client returns the current connection, waiting for one until ctx ends.
func (a *Agent) client(ctx context.Context) (*paho.Client, error) {
	for {
		a.mu.Lock()
		cli, up := a.cli, a.up
		a.mu.Unlock()
		if cli != nil {
			return cli, nil
		}
		select {
		case <-up:
		case <-a.closed:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrNotConnected, ctx.Err())
		}
	}
}

// publish publishes p on the current connection, waiting for one.
func (a *Agent) publish(ctx context.Context, p *paho.Publish) error {
	cli, err := a.client(ctx)
	if err != nil {
		return err
	}
	return a.publishOn(ctx, cli, p)
}

func (a *Agent) publishOn(ctx context.Context, cli *paho.Client, p *paho.Publish) error {
	if _, err := cli.Publish(ctx, p); err != nil {
		return fmt.Errorf("cannot publish to %s: %w", p.Topic, err)
	}
	return nil
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

// receive routes every incoming PUBLISH. It runs on paho's receive
// goroutine: handlers run on goroutines of their own.
func (a *Agent) receive(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	if p.Properties == nil {
		p.Properties = &paho.PublishProperties{}
	}
	own := lmos.ThingsPrefix + a.tid + "/"
	if rest, ok := strings.CutPrefix(p.Topic, own); ok {
		if name, ok := strings.CutPrefix(rest, "actions/"); ok && !strings.Contains(name, "/") {
			a.goHandle(p, "actions/"+name, func() { a.serveAction(name, p) })
			return true, nil
		}
		if rest, ok := strings.CutPrefix(rest, "properties/"); ok {
			if name, ok := strings.CutSuffix(rest, "/set"); ok && !strings.Contains(name, "/") {
				a.goHandle(p, "properties/"+name, func() { a.serveWrite(name, p) })
				return true, nil
			}
		}
		if rest == "td/result" {
			var res joinResult
			if err := json.Unmarshal(p.Payload, &res); err != nil {
				a.log.Warn("cannot decode join result", "err", err)
				return true, nil
			}
			a.log.Debug("join result", "status", res.Status)
			a.mu.Lock()
			ch := a.joinCh
			a.mu.Unlock()
			if ch != nil {
				select {
				case ch <- res:
				default:
				}
			}
			return true, nil
		}
	}
	if strings.HasPrefix(p.Topic, a.inbox) {
		a.mu.Lock()
		req := a.pending[string(p.Properties.CorrelationData)]
		a.mu.Unlock()
		if req != nil {
			select {
			case req.replies <- p: // in order; Invoke drains them
			case <-req.done:
			}
		}
		return true, nil
	}
	a.mu.Lock()
	fns := make([]func(Value), 0, len(a.watches[p.Topic]))
	for _, fn := range a.watches[p.Topic] {
		fns = append(fns, fn)
	}
	a.mu.Unlock()
	v := Value{Payload: p.Payload, ContentType: contentTypeOr(p.Properties.ContentType, JSON)}
	for _, fn := range fns {
		fn(v)
	}
	return true, nil
}

// maxHandlers bounds the handler goroutines running at once: anyone may
// publish requests, and a flood must not spawn unbounded goroutines.
const maxHandlers = 64

// maxRefusals bounds the goroutines answering requests that find every
// handler slot taken; beyond it such requests are dropped unanswered.
const maxRefusals = 8

// goHandle runs f, which serves request p of the affordance key
// (actions/{name} or properties/{name}), on a goroutine Close waits for.
// With maxHandlers running already, p is refused: a 503 problem when it
// has a valid Response Topic, else it is dropped.
func (a *Agent) goHandle(p *paho.Publish, key string, f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return
	}
	select {
	case a.running <- struct{}{}:
		a.handlers.Go(func() {
			defer func() { <-a.running }()
			f()
		})
		return
	default:
	}
	_, r := a.replierFor(p, a.contentType(key))
	if r.topic == "" {
		a.log.Debug("too many requests in progress; dropping one", "topic", p.Topic)
		return
	}
	select {
	case a.refusing <- struct{}{}:
		a.handlers.Go(func() {
			defer func() { <-a.refusing }()
			r.fail(NewProblem(http.StatusServiceUnavailable, "the agent is busy: too many requests in progress"))
		})
	default:
		a.log.Debug("too many requests in progress; dropping one", "topic", p.Topic)
	}
}

func contentTypeOr(ct, def string) string {
	if ct == "" {
		return def
	}
	return ct
}

// brokerAddr returns host:port of an mqtt:// or tcp:// URL.
func brokerAddr(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid hub URL %q: %w", raw, err)
	}
	if u.Scheme != "mqtt" && u.Scheme != "tcp" {
		return "", fmt.Errorf("invalid hub URL %q: the scheme must be mqtt:// (or tcp://)", raw)
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("invalid hub URL %q: no host", raw)
	}
	port := u.Port()
	if port == "" {
		port = "1883"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
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
