package agent

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// mqttLink is the agent's connection for an mqtt:// URL: MQTT 5 sessions
// on the hub's broker (PROTOCOL §4). It joins by publishing the TD,
// serves requests that arrive on the Thing's topics, and sends its own
// requests with the reply inbox lmos/v1/clients/{clientId}/ as Response
// Topic.
type mqttLink struct {
	a     *Agent
	inbox string // lmos/v1/clients/{clientID}/

	mu sync.Mutex
	// targets are the hubs the agent may be on: Options.URL's first, then
	// the failover hubs (failover.go); cur is the one used now.
	targets []*brokerTarget
	cur     int
	// directory is the hub's directory TD URL, read for lmos:peers.
	directory string
	// dialBy ends attempts on a lost hub with the failover grace (zero:
	// dialTimeout's default).
	dialBy time.Time
	// browse: the hub was found over mDNS, where the agent looks for its
	// paired peers (peerDIDs, from lmos:peers) when its hubs fail.
	browse   bool
	peerDIDs map[string]bool
	// silent: the keep alive ended the last connection (keepAliveWatch).
	silent  atomic.Bool
	cli     *paho.Client // nil while disconnected
	conn    net.Conn
	up      chan struct{} // closed while cli != nil
	joinCh  chan joinResult
	watches map[string]map[uint64]func(Value) // topic → observers
	nextID  uint64
	pending map[string]*request  // correlation data → an Invoke waiting
	groups  map[*groupWatch]bool // GroupSubscribe's watches (groups.go)

	subMu sync.Mutex // orders SUBSCRIBE/UNSUBSCRIBE of watched topics
}

// newMQTTAgent is the Agent of Connect for an mqtt:// URL, not connected
// yet.
func newMQTTAgent(opts Options) (*Agent, error) {
	first, err := newTarget(opts.URL, opts)
	if err != nil {
		return nil, err
	}
	targets, err := failoverTargets(opts, first)
	if err != nil {
		return nil, err
	}
	directory, err := directoryOf(opts.Directory)
	if err != nil {
		return nil, err
	}
	base := first.addr
	if first.tls != nil {
		base = "mqtts://" + first.addr
	}
	if opts.ClientID == "" {
		opts.ClientID = randomClientID()
	}
	if strings.ContainsAny(opts.ClientID, "/+#") {
		return nil, fmt.Errorf("cannot use client id %q: it must not contain '/', '+' or '#'", opts.ClientID)
	}
	td, err := prepareTD(opts.TD, base, opts.ContentType)
	if err != nil {
		return nil, fmt.Errorf("cannot prepare the Thing Description: %w", err)
	}
	a := newAgent(opts, td, opts.Logger.With("component", "agent", "id", td.id))
	a.creds = opts.Credentials
	if a.creds == nil && opts.StateDir != "" {
		// Kept by an earlier run: the hub refuses a new join of a Thing
		// that holds credentials (PROTOCOL §4.4).
		if a.creds, err = loadCredentials(opts.StateDir, a.tid); err != nil {
			a.log.Warn("joining anew without the kept credentials", "err", err)
		}
	}
	a.link = &mqttLink{
		a:         a,
		targets:   targets,
		peerDIDs:  make(map[string]bool),
		directory: directory,
		inbox:     lmos.ClientsPrefix + opts.ClientID + "/",
		up:        make(chan struct{}),
		watches:   make(map[string]map[uint64]func(Value)),
		pending:   make(map[string]*request),
	}
	return a, nil
}

// connect joins, retrying network failures until the Agent's ctx ends.
func (l *mqttLink) connect() (func(), error) {
	cli, err := l.establishRetry(true, time.Now())
	if err != nil {
		return nil, err
	}
	return func() { l.run(cli) }, nil
}

// close publishes "offline" (retained, as the will would) and disconnects.
func (l *mqttLink) close() error {
	l.a.cancel()
	<-l.a.done
	l.a.stopHandlers()
	l.mu.Lock()
	cli := l.cli
	l.cli = nil
	l.mu.Unlock()
	if cli == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.a.opts.Timeout)
	defer cancel()
	err := l.publishOn(ctx, cli, &paho.Publish{Topic: lmos.ThingTopic(l.a.td.id, "status"), Payload: []byte("offline"), QoS: 1, Retain: true})
	if derr := cli.Disconnect(&paho.Disconnect{ReasonCode: 0}); derr != nil && err == nil {
		err = fmt.Errorf("cannot disconnect: %w", derr)
	}
	return err
}

// invoke is an MQTT 5 request to the action topic.
func (l *mqttLink) invoke(ctx context.Context, thingID, action string, input any, cfg invokeConfig) (Output, error) {
	return l.request(ctx, lmos.ThingTopic(thingID, "actions/"+action), input, cfg)
}

// writeProperty publishes to …/set at QoS 1: a request with WithAck, else
// done once the broker took it.
func (l *mqttLink) writeProperty(ctx context.Context, thingID, name string, value any, cfg invokeConfig) error {
	topic := lmos.ThingTopic(thingID, "properties/"+name+"/set")
	if cfg.ack {
		ctx, cancel := withDefault(ctx, l.a.opts.InvokeTimeout)
		defer cancel()
		_, err := l.request(ctx, topic, value, cfg)
		return err
	}
	return l.send(ctx, topic, value, cfg.contentType)
}

// readProperty subscribes to the property topic and returns its retained
// value.
func (l *mqttLink) readProperty(ctx context.Context, thingID, name string) (Value, error) {
	ctx, cancel := l.a.withTimeout(ctx)
	defer cancel()
	ch := make(chan Value, 1)
	stop, err := l.watch(ctx, lmos.ThingTopic(thingID, "properties/"+name), true, func(v Value) {
		select {
		case ch <- v:
		default:
		}
	})
	if err != nil {
		return Value{}, fmt.Errorf("cannot read %s of %s: %w", name, thingID, err)
	}
	defer stop()
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return Value{}, fmt.Errorf("no value of %s of %s: %w", name, thingID, ctx.Err())
	case <-l.a.closed:
		return Value{}, ErrClosed
	}
}

func (l *mqttLink) observe(ctx context.Context, thingID, kind, name string, fn func(Value)) (func(), error) {
	return l.watch(ctx, lmos.ThingTopic(thingID, kind+"/"+name), false, fn)
}

func (l *mqttLink) setProperty(name string, value any) error {
	l.mu.Lock()
	cli := l.cli
	l.mu.Unlock()
	if cli == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(l.a.ctx, l.a.opts.Timeout)
	defer cancel()
	return l.publishProperty(ctx, cli, name, value)
}

func (l *mqttLink) emit(event string, data any) error {
	l.mu.Lock()
	cli := l.cli
	l.mu.Unlock()
	if cli == nil {
		return fmt.Errorf("cannot emit %s: %w", event, ErrNotConnected)
	}
	ct := l.a.contentType("events/" + event)
	payload, err := encode(data, ct)
	if err != nil {
		return fmt.Errorf("cannot emit %s: %w", event, err)
	}
	ctx, cancel := context.WithTimeout(l.a.ctx, l.a.opts.Timeout)
	defer cancel()
	return l.publishOn(ctx, cli, &paho.Publish{
		Topic: lmos.ThingTopic(l.a.td.id, "events/"+event), Payload: payload, QoS: 1,
		Properties: &paho.PublishProperties{ContentType: ct},
	})
}

// joinResult is the payload of …/td/result (PROTOCOL §4.1).
type joinResult = lmos.JoinResult

// run keeps the agent connected: when the connection drops it reconnects
// and re-joins, with capped and jittered exponential backoff.
func (l *mqttLink) run(cli *paho.Client) {
	defer close(l.a.done)
	for {
		select {
		case <-cli.Done():
		case <-l.a.ctx.Done():
			return
		}
		l.mu.Lock()
		if l.cli == cli {
			l.cli, l.conn, l.up = nil, nil, make(chan struct{})
		}
		l.mu.Unlock()
		if l.a.ctx.Err() != nil {
			return
		}
		lost := time.Now()
		if l.silent.Swap(false) {
			// The keep alive ended it: the hub has not been heard for a
			// keep alive already, which counts towards the grace.
			lost = lost.Add(-l.a.opts.KeepAlive)
		}
		l.a.log.Warn("connection to the hub lost; reconnecting")
		var err error
		if cli, err = l.establishRetry(false, lost); err != nil {
			return // closed
		}
		l.a.log.Info("reconnected to the hub")
	}
}

// establishRetry calls establish until it succeeds or l.a.ctx ends, waiting
// a backoff before each retry, and before the first attempt too when the
// agent reconnects (not initial): the broker may still be cleaning up the
// old session of the same client id. When initial, errors no retry can fix
// (a rejection, a refused connection) end it at once.
func (l *mqttLink) establishRetry(initial bool, lost time.Time) (*paho.Client, error) {
	var last error
	rounds, switched := 0, false
	for attempt := 0; ; attempt++ {
		moved := false
		if (attempt > 0 || !initial) && l.failoverDue(lost) {
			// Failover: each failed attempt after the grace tries the
			// next hub at once; a round of the whole list backs off.
			if l.nextHub() {
				rounds++
			} else {
				moved = true
			}
			switched = true
		}
		if (attempt > 0 || !initial) && !moved {
			n := attempt
			if initial {
				n--
			}
			if switched {
				n = rounds
			}
			d := backoff(n, l.a.opts.MaxBackoff)
			if until := time.Until(lost.Add(l.a.opts.FailoverGrace)); !switched && len(l.targetsNow()) > 1 && until > 0 && d > until {
				d = until // the next hub is tried once the grace is over
			}
			if last != nil {
				l.a.log.Warn("cannot connect to the hub; retrying", "err", last, "in", d.Round(time.Millisecond))
			}
			select {
			case <-time.After(d):
			case <-l.a.ctx.Done():
				if last == nil {
					return nil, l.a.ctx.Err()
				}
				return nil, fmt.Errorf("%w (%w)", l.a.ctx.Err(), last)
			}
		}
		if !switched && !initial {
			l.limitDial(lost.Add(l.a.opts.FailoverGrace))
		} else {
			l.limitDial(time.Time{})
		}
		cli, err := l.establish()
		if err == nil {
			return cli, nil
		}
		if l.a.ctx.Err() != nil {
			if errors.Is(err, context.Canceled) {
				return nil, l.a.ctx.Err()
			}
			return nil, fmt.Errorf("%w (%w)", l.a.ctx.Err(), err)
		}
		if initial && permanent(err) {
			return nil, err
		}
		last = err
	}
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
	return errors.As(err, &p) || errors.As(err, &c) && (c.code == 0x84 || c.code == 0x85 || c.code == 0x86 || c.code == 0x87 || c.code == 0x8C) ||
		untrusted(err)
}

// establish makes one authenticated session: an anonymous join first when
// the agent has no credentials, then a connection with them, its
// subscriptions, a re-join, the last property values and "online".
func (l *mqttLink) establish() (*paho.Client, error) {
	ctx, cancel := context.WithTimeout(l.a.ctx, 3*l.a.opts.Timeout)
	defer cancel()
	l.a.mu.Lock()
	creds := l.a.creds
	l.a.mu.Unlock()
	fresh := false
	if creds == nil {
		c, err := l.joinAnonymously(ctx)
		if err != nil {
			return nil, err
		}
		creds, fresh = c, true
	}
	will := &paho.WillMessage{Topic: lmos.ThingTopic(l.a.td.id, "status"), Payload: []byte("offline"), QoS: 1, Retain: true}
	cli, conn, err := l.dial(ctx, l.a.clientID, creds, will)
	var ce *connackError
	if errors.As(err, &ce) && (ce.code == 0x86 || ce.code == 0x87) && !fresh {
		// The hub no longer knows these credentials (its store was reset):
		// join again from scratch.
		l.a.log.Warn("the hub refused the agent's credentials; joining again", "err", err)
		l.a.mu.Lock()
		l.a.creds = nil
		l.a.mu.Unlock()
		return l.establish()
	}
	if err != nil {
		return nil, err
	}
	if err := l.restore(ctx, cli, fresh); err != nil {
		_ = cli.Disconnect(&paho.Disconnect{})
		return nil, err
	}
	if err := l.goOnline(ctx, cli, conn); err != nil {
		_ = cli.Disconnect(&paho.Disconnect{})
		return nil, err
	}
	l.a.log.Info("joined the hub", "broker", l.target().addr, "client_id", l.a.clientID)
	go l.learnPeers(l.a.ctx)
	return cli, nil
}

// restore brings a new session to where the agent was: its subscriptions
// (the watched topics and group channels too), a re-join when the
// credentials were not fresh, and the last property values.
func (l *mqttLink) restore(ctx context.Context, cli *paho.Client, fresh bool) error {
	l.mu.Lock()
	filters := []string{lmos.ThingTopic(l.a.td.id, "actions/+"), lmos.ThingTopic(l.a.td.id, "properties/+/set"), l.inbox + "#",
		lmos.CredentialTopic(l.a.td.id, "+")}
	if !fresh {
		filters = append(filters, lmos.ThingTopic(l.a.td.id, "td/result"))
	}
	for topic := range l.watches {
		filters = append(filters, topic)
	}
	l.mu.Unlock()
	if err := subscribe(ctx, cli, filters...); err != nil {
		return err
	}
	l.a.log.Debug("subscribed", "filters", filters)
	l.resubscribeGroups(ctx, cli)
	if !fresh {
		if _, err := l.join(ctx, cli, false); err != nil {
			return err
		}
	}
	l.a.mu.Lock()
	props := maps.Clone(l.a.props)
	l.a.mu.Unlock()
	for name, v := range props {
		if err := l.publishProperty(ctx, cli, name, v); err != nil {
			return err
		}
	}
	return nil
}

// goOnline makes cli the link's session and publishes "online", last: once
// the hub shows the agent online, Emit and the rest work (a consumer
// reacting to presence found Emit refused). If it cannot be published,
// the link is down again.
func (l *mqttLink) goOnline(ctx context.Context, cli *paho.Client, conn net.Conn) error {
	l.mu.Lock()
	l.cli, l.conn = cli, conn
	close(l.up)
	l.mu.Unlock()
	if err := l.publishOn(ctx, cli, &paho.Publish{Topic: lmos.ThingTopic(l.a.td.id, "status"), Payload: []byte("online"), QoS: 1, Retain: true}); err != nil {
		l.mu.Lock()
		if l.cli == cli {
			l.cli, l.conn, l.up = nil, nil, make(chan struct{})
		}
		l.mu.Unlock()
		return err
	}
	return nil
}

// joinAnonymously connects without credentials, publishes the TD and
// returns the credentials the hub issues.
func (l *mqttLink) joinAnonymously(ctx context.Context) (*Credentials, error) {
	// A client id of its own: the authenticated session follows at once,
	// and a broker may still be cleaning up this one (mochi removes the
	// subscriptions and the client entry by id after the connection ends).
	cli, _, err := l.dial(ctx, l.a.clientID+"-join", nil, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Disconnect(&paho.Disconnect{}) }()
	if err := subscribe(ctx, cli, lmos.ThingTopic(l.a.td.id, "td/result")); err != nil {
		return nil, err
	}
	res, err := l.join(ctx, cli, true)
	if err != nil {
		return nil, err
	}
	if res.Credentials == nil {
		return nil, fmt.Errorf("the hub accepted %s but issued no credentials", l.a.td.id)
	}
	l.a.mu.Lock()
	l.a.creds = res.Credentials
	l.a.mu.Unlock()
	if !l.onPrimary() {
		// A failover hub's credentials are kept in memory only: the
		// agent starts again on the hub of Options.URL.
		return res.Credentials, nil
	}
	if dir := l.a.opts.StateDir; dir != "" {
		if err := saveCredentials(dir, *res.Credentials); err != nil {
			// This run goes on; the next start joins again, which the hub
			// admits by the key's proof (the key is in the same place).
			l.a.log.Warn("cannot keep the credentials the hub issued", "err", err)
		}
	}
	if l.a.opts.OnCredentials != nil {
		l.a.opts.OnCredentials(*res.Credentials)
	}
	return res.Credentials, nil
}

// join publishes the TD and waits for its result (the caller subscribed
// to …/td/result).
func (l *mqttLink) join(ctx context.Context, cli *paho.Client, anonymous bool) (joinResult, error) {
	ch := make(chan joinResult, 1)
	l.mu.Lock()
	l.joinCh = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.joinCh = nil
		l.mu.Unlock()
	}()
	td, err := l.a.signedTD()
	if err != nil {
		return joinResult{}, err
	}
	err = l.publishOn(ctx, cli, &paho.Publish{
		Topic: lmos.ThingTopic(l.a.td.id, "td"), Payload: td, QoS: 1, Retain: true,
		Properties: &paho.PublishProperties{ContentType: lmos.MediaTD},
	})
	if err != nil {
		return joinResult{}, fmt.Errorf("cannot publish the Thing Description: %w", err)
	}
	l.a.log.Debug("published the Thing Description", "anonymous", anonymous)
	wait := ctx.Done()
	for {
		select {
		case res := <-ch:
			switch {
			case res.Status == lmos.JoinPending:
				// Join mode approve: the final result comes on this
				// connection when an administrator decides, however long
				// that takes (PROTOCOL §4.4).
				l.a.log.Info("the hub holds the join for an administrator's approval; waiting", "id", l.a.td.id)
				wait = l.a.ctx.Done()
				continue
			case res.Status == lmos.JoinAccepted:
				return res, nil
			case res.Problem != nil:
				return res, fmt.Errorf("the hub rejected %s: %w", l.a.td.id, res.Problem)
			default:
				return res, fmt.Errorf("the hub answered the join of %s with status %q", l.a.td.id, res.Status)
			}
		case <-cli.Done():
			return joinResult{}, errors.New("connection lost while joining")
		case <-wait:
			return joinResult{}, fmt.Errorf("no join result from the hub: %w", context.Cause(ctx))
		}
	}
}

// dial opens a TCP connection and an MQTT 5 session (clean start) on it.
func (l *mqttLink) dial(ctx context.Context, clientID string, creds *Credentials, will *paho.WillMessage) (*paho.Client, net.Conn, error) {
	var conn net.Conn
	var err error
	t := l.target()
	// Reaching the broker and its CONNACK are bounded by dialTimeout: an
	// unplugged hub must not hold an agent that has others to go to.
	ctx, cancel := context.WithTimeout(ctx, l.dialTimeout())
	defer cancel()
	if t.tls != nil {
		d := tls.Dialer{Config: t.tls}
		conn, err = d.DialContext(ctx, "tcp", t.addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", t.addr)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the broker: %w", err)
	}
	// paho writes one packet as several buffers from several goroutines
	// (the caller's, its pinger's, its acknowledgements'); a tls.Conn
	// writes each buffer as a record of its own, so without the lock
	// paho takes on a conn that offers one, a PINGREQ or another packet
	// could land inside a packet and the hub drop the connection as
	// malformed.
	conn = packets.NewThreadSafeConn(conn)
	cli := paho.NewClient(paho.ClientConfig{
		Conn:              conn,
		PacketTimeout:     l.a.opts.Timeout,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){l.receive},
		OnClientError:     func(err error) { l.a.log.Debug("mqtt client error", "err", err) },
		PingHandler:       keepAliveWatch{paho.NewDefaultPinger(), &l.silent},
		OnServerDisconnect: func(d *paho.Disconnect) {
			l.a.log.Info("the broker disconnected the agent", "reason", d.ReasonCode)
		},
	})
	cp := &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: uint16(l.a.opts.KeepAlive / time.Second), WillMessage: will}
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

// errConnectionLost ends a wait for the hub's acknowledgement whose
// connection ended first (whileUp).
var errConnectionLost = fmt.Errorf("%w (the connection ended before the hub acknowledged)", ErrNotConnected)

// whileUp runs call, a request of paho's that waits for the hub's
// acknowledgement (SUBACK, UNSUBACK, PUBACK), with ctx ended also when
// cli's connection ends. paho v0.22 forgets such a request when the
// connection drops (it cleans its session state without answering it),
// so it waited out PacketTimeout (Options.Timeout): an agent whose
// connection dropped while it subscribed or published reconnected only
// that much later, and an Emit hung as long.
func whileUp[T any](ctx context.Context, cli *paho.Client, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-cli.Done():
			cancel(errConnectionLost)
		case <-ctx.Done():
		}
	}()
	v, err := call(ctx)
	if err != nil && errors.Is(err, context.Canceled) && errors.Is(context.Cause(ctx), errConnectionLost) {
		err = errConnectionLost
	}
	return v, err
}

func subscribe(ctx context.Context, cli *paho.Client, filters ...string) error {
	s := &paho.Subscribe{}
	for _, f := range filters {
		s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: f, QoS: 1})
	}
	if _, err := whileUp(ctx, cli, func(ctx context.Context) (*paho.Suback, error) { return cli.Subscribe(ctx, s) }); err != nil {
		return fmt.Errorf("cannot subscribe to %s: %w", strings.Join(filters, ", "), err)
	}
	return nil
}

// client returns the current connection, waiting for one until ctx ends.
func (l *mqttLink) client(ctx context.Context) (*paho.Client, error) {
	for {
		l.mu.Lock()
		cli, up := l.cli, l.up
		l.mu.Unlock()
		if cli != nil {
			return cli, nil
		}
		select {
		case <-up:
		case <-l.a.closed:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrNotConnected, ctx.Err())
		}
	}
}

// publish publishes p on the current connection, waiting for one.
func (l *mqttLink) publish(ctx context.Context, p *paho.Publish) error {
	cli, err := l.client(ctx)
	if err != nil {
		return err
	}
	return l.publishOn(ctx, cli, p)
}

func (l *mqttLink) publishOn(ctx context.Context, cli *paho.Client, p *paho.Publish) error {
	if _, err := whileUp(ctx, cli, func(ctx context.Context) (*paho.PublishResponse, error) { return cli.Publish(ctx, p) }); err != nil {
		return fmt.Errorf("cannot publish to %s: %w", p.Topic, err)
	}
	return nil
}

// receive routes every incoming PUBLISH. It runs on paho's receive
// goroutine: handlers run on goroutines of their own.
func (l *mqttLink) receive(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	if p.Properties == nil {
		p.Properties = &paho.PublishProperties{}
	}
	own := lmos.ThingsPrefix + l.a.tid + "/"
	if rest, ok := strings.CutPrefix(p.Topic, own); ok {
		if name, ok := strings.CutPrefix(rest, "actions/"); ok && !strings.Contains(name, "/") {
			l.goHandle(p, "actions/"+name, func() { l.serveAction(name, p) })
			return true, nil
		}
		if rest, ok := strings.CutPrefix(rest, "properties/"); ok {
			if name, ok := strings.CutSuffix(rest, "/set"); ok && !strings.Contains(name, "/") {
				l.goHandle(p, "properties/"+name, func() { l.serveWrite(name, p) })
				return true, nil
			}
		}
		if gid, ok := strings.CutPrefix(rest, "credentials/"); ok && !strings.Contains(gid, "/") {
			l.a.received(gid, p.Payload) // its membership credentials (credentials.go)
			return true, nil
		}
		if rest == "td/result" {
			var res joinResult
			if err := json.Unmarshal(p.Payload, &res); err != nil {
				l.a.log.Warn("cannot decode join result", "err", err)
				return true, nil
			}
			l.a.log.Debug("join result", "status", res.Status)
			l.mu.Lock()
			ch := l.joinCh
			l.mu.Unlock()
			if ch != nil {
				select {
				case ch <- res:
				default:
				}
			}
			return true, nil
		}
	}
	if strings.HasPrefix(p.Topic, l.inbox) {
		l.mu.Lock()
		req := l.pending[string(p.Properties.CorrelationData)]
		l.mu.Unlock()
		if req != nil {
			select {
			case req.replies <- p: // in order; Invoke drains them
			case <-req.done:
			}
		}
		return true, nil
	}
	if l.receiveGroup(p) {
		return true, nil
	}
	l.mu.Lock()
	fns := make([]func(Value), 0, len(l.watches[p.Topic]))
	for _, fn := range l.watches[p.Topic] {
		fns = append(fns, fn)
	}
	l.mu.Unlock()
	v := Value{Payload: p.Payload, ContentType: contentTypeOr(p.Properties.ContentType, JSON)}
	for _, fn := range fns {
		fn(v)
	}
	return true, nil
}

// goHandle runs f, which serves request p of the affordance key
// (actions/{name} or properties/{name}), on a goroutine Close waits for.
// With maxHandlers running already, p is refused: a 503 problem when it
// has a valid Response Topic, else it is dropped.
func (l *mqttLink) goHandle(p *paho.Publish, key string, f func()) {
	l.a.mu.Lock()
	defer l.a.mu.Unlock()
	if l.a.closing {
		return
	}
	select {
	case l.a.running <- struct{}{}:
		l.a.handlers.Go(func() {
			defer func() { <-l.a.running }()
			f()
		})
		return
	default:
	}
	_, r := l.replierFor(p, l.a.contentType(key))
	if r.topic == "" {
		l.a.log.Debug("too many requests in progress; dropping one", "topic", p.Topic)
		return
	}
	select {
	case l.a.refusing <- struct{}{}:
		l.a.handlers.Go(func() {
			defer func() { <-l.a.refusing }()
			r.fail(NewProblem(http.StatusServiceUnavailable, "the agent is busy: too many requests in progress"))
		})
	default:
		l.a.log.Debug("too many requests in progress; dropping one", "topic", p.Topic)
	}
}

// brokerAddr returns host:port of an mqtt:// or tcp:// URL, or of an
// mqtts:// or ssl:// one (secure: MQTT over TLS).
func brokerAddr(raw string) (addr string, secure bool, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, fmt.Errorf("invalid hub URL %q: %w", raw, err)
	}
	port := "1883"
	switch u.Scheme {
	case "mqtt", "tcp":
	case "mqtts", "ssl":
		secure, port = true, "8883"
	default:
		return "", false, fmt.Errorf("invalid hub URL %q: the scheme must be mqtt:// or mqtts:// (or tcp://, ssl://)", raw)
	}
	if u.Hostname() == "" {
		return "", false, fmt.Errorf("invalid hub URL %q: no host", raw)
	}
	if u.Port() != "" {
		port = u.Port()
	}
	return net.JoinHostPort(u.Hostname(), port), secure, nil
}

// request is an Invoke waiting for its results.
type request struct {
	replies chan *paho.Publish
	done    chan struct{}
}

// send publishes input to topic at QoS 1, without a Response Topic, and
// returns once the broker acknowledged it.
func (l *mqttLink) send(ctx context.Context, topic string, input any, contentType string) error {
	payload, err := encode(input, contentType)
	if err != nil {
		return err
	}
	ctx, cancel := l.a.withTimeout(ctx)
	defer cancel()
	return l.publish(ctx, &paho.Publish{
		Topic: topic, Payload: payload, QoS: 1,
		Properties: &paho.PublishProperties{ContentType: contentType},
	})
}

// request publishes input to topic with the agent's inbox as Response
// Topic and returns the final result.
func (l *mqttLink) request(ctx context.Context, topic string, input any, cfg invokeConfig) (Output, error) {
	payload, err := encode(input, cfg.contentType)
	if err != nil {
		return Output{}, err
	}
	corr := make([]byte, 16)
	_, _ = rand.Read(corr)
	req := &request{replies: make(chan *paho.Publish, 16), done: make(chan struct{})}
	l.mu.Lock()
	l.pending[string(corr)] = req
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.pending, string(corr))
		l.mu.Unlock()
		close(req.done)
	}()
	cli, err := l.client(ctx)
	if err != nil {
		return Output{}, err
	}
	ack, err := whileUp(ctx, cli, func(ctx context.Context) (*paho.PublishResponse, error) {
		return cli.Publish(ctx, &paho.Publish{
			Topic: topic, Payload: payload, QoS: 1,
			Properties: &paho.PublishProperties{ContentType: cfg.contentType, ResponseTopic: l.inbox + "replies", CorrelationData: corr},
		})
	})
	if err != nil {
		return Output{}, fmt.Errorf("cannot publish to %s: %w", topic, err)
	}
	// PUBACK 0x10: no client subscribes to the topic, so no agent will
	// answer. An LMOS hub publishes a failed result saying why (PROTOCOL
	// §10) before the acknowledgement, but the two travel on different
	// queues; a broker that is not a hub sends none. Wait for it a moment.
	var unserved <-chan time.Time
	if ack != nil && ack.ReasonCode == noMatchingSubscribers {
		t := time.NewTimer(unservedGrace)
		defer t.Stop()
		unserved = t.C
	}
	for {
		select {
		case p := <-req.replies:
			out := Output{Payload: p.Payload, ContentType: contentTypeOr(p.Properties.ContentType, JSON)}
			status, ok := userProperty(p.Properties.User, statusProperty)
			if !ok {
				status = StatusCompleted // a responder that does not say
			}
			switch status {
			case StatusPending:
			case StatusRunning:
				if cfg.partial != nil {
					cfg.partial(out)
				}
			case StatusCompleted:
				return out, nil
			case StatusFailed:
				var prob Problem
				if err := out.Decode(&prob); err != nil {
					prob = Problem{Title: "failed", Detail: fmt.Sprintf("undecodable problem: %v", err)}
				}
				return out, fmt.Errorf("failed: %w", &prob)
			default: // as the hub does: an unknown status is a failure of the agent
				if len(status) > 64 {
					status = status[:64]
				}
				prob := NewProblem(http.StatusBadGateway, fmt.Sprintf("the agent answered with an unknown %s %q", statusProperty, status))
				return out, fmt.Errorf("the agent failed: %w", prob)
			}
		case <-unserved:
			return Output{}, NewProblem(http.StatusServiceUnavailable, "no client subscribes to "+topic)
		case <-ctx.Done():
			return Output{}, fmt.Errorf("no result: %w", ctx.Err())
		case <-l.a.closed:
			return Output{}, ErrClosed
		}
	}
}

// noMatchingSubscribers is the MQTT 5 PUBACK reason 0x10.
const noMatchingSubscribers = 0x10

// unservedGrace is how long a request acknowledged with 0x10 waits for the
// hub's failed result, which the hub sends at the same instant (a
// variable for tests).
var unservedGrace = 2 * time.Second

// userProperty returns the value of the user property key and whether it
// is present at all.
func userProperty(u paho.UserProperties, key string) (string, bool) {
	for _, p := range u {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// watch adds fn as an observer of topic and subscribes to it: always when
// resend (a new SUBSCRIBE delivers the retained message again), else when
// fn is its first observer.
func (l *mqttLink) watch(ctx context.Context, topic string, resend bool, fn func(Value)) (func(), error) {
	ctx, cancel := l.a.withTimeout(ctx)
	defer cancel()
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.mu.Lock()
	l.nextID++
	id := l.nextID
	first := len(l.watches[topic]) == 0
	if first {
		l.watches[topic] = make(map[uint64]func(Value))
	}
	l.watches[topic][id] = fn
	l.mu.Unlock()
	stop := func() { l.unwatch(topic, id) }
	if first || resend {
		cli, err := l.client(ctx)
		if err == nil {
			err = subscribe(ctx, cli, topic)
		}
		if err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// unwatch removes an observer, and the subscription with the last one.
func (l *mqttLink) unwatch(topic string, id uint64) {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.mu.Lock()
	delete(l.watches[topic], id)
	last := len(l.watches[topic]) == 0
	if last {
		delete(l.watches, topic)
	}
	cli := l.cli
	l.mu.Unlock()
	if last && cli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), l.a.opts.Timeout)
		defer cancel()
		if _, err := whileUp(ctx, cli, func(ctx context.Context) (*paho.Unsuback, error) {
			return cli.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{topic}})
		}); err != nil {
			l.a.log.Debug("cannot unsubscribe", "topic", topic, "err", err)
		}
	}
}

func (l *mqttLink) publishProperty(ctx context.Context, cli *paho.Client, name string, value any) error {
	ct := l.a.contentType("properties/" + name)
	payload, err := encode(value, ct)
	if err != nil {
		return fmt.Errorf("cannot set property %s: %w", name, err)
	}
	return l.publishOn(ctx, cli, &paho.Publish{
		Topic: lmos.ThingTopic(l.a.td.id, "properties/"+name), Payload: payload, QoS: 1, Retain: true,
		Properties: &paho.PublishProperties{ContentType: ct},
	})
}

// replier answers one request on its Response Topic, if it has one.
type replier struct {
	l           *mqttLink
	topic       string
	correlation []byte
	contentType string
	// trace is the request's W3C trace context (user properties
	// traceparent and tracestate), carried back on every result as the
	// WebSocket agent carries it in its replies (PROTOCOL §10).
	trace paho.UserProperties
}

// replyTopic reports whether the agent may publish results on topic: only
// a reply inbox lmos/v1/clients/{clientId}/…. Anything else would let a
// requester make the agent publish on its own topics (an empty result on
// its td topic deregisters it; a result on its events fakes an event).
func replyTopic(topic string) bool {
	rest, ok := strings.CutPrefix(topic, lmos.ClientsPrefix)
	client, _, _ := strings.Cut(rest, "/")
	return ok && client != "" && !strings.ContainsAny(rest, "+#\x00")
}

func (l *mqttLink) replierFor(p *paho.Publish, formType string) (Input, replier) {
	in := Input{Payload: p.Payload, ContentType: contentTypeOr(p.Properties.ContentType, formType)}
	// Results go back in the request's encoding when it is one we speak.
	ct := formType
	if mt := lmos.MediaType(in.ContentType); mt == JSON || mt == CBOR {
		ct = mt
	}
	topic := p.Properties.ResponseTopic
	if topic != "" && !replyTopic(topic) {
		l.a.log.Debug("the Response Topic is not a reply inbox (lmos/v1/clients/…): serving the request without results",
			"topic", p.Topic, "response_topic", topic)
		topic = ""
	}
	var trace paho.UserProperties
	for _, up := range p.Properties.User {
		if up.Key == "traceparent" || up.Key == "tracestate" {
			trace = append(trace, up)
		}
	}
	return in, replier{l: l, topic: topic, correlation: p.Properties.CorrelationData, contentType: ct, trace: trace}
}

func (r replier) send(status string, v any) error {
	if r.topic == "" {
		return nil
	}
	payload, err := encode(v, r.contentType)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.l.a.hctx, r.l.a.opts.Timeout)
	defer cancel()
	props := &paho.PublishProperties{ContentType: r.contentType, CorrelationData: r.correlation}
	props.User.Add(statusProperty, status)
	props.User = append(props.User, r.trace...)
	return r.l.publish(ctx, &paho.Publish{Topic: r.topic, Payload: payload, QoS: 1, Properties: props})
}

// fail answers with the problem err stands for.
func (r replier) fail(err error) {
	if serr := r.send(StatusFailed, problemOf(err)); serr != nil {
		r.l.a.log.Warn("cannot send a failed result", "topic", r.topic, "err", serr)
	}
}

func (l *mqttLink) serveAction(name string, p *paho.Publish) {
	in, r := l.replierFor(p, l.a.contentType("actions/"+name))
	h := l.a.actionHandler(name)
	if h == nil {
		r.fail(noAction(name))
		return
	}
	emit := func(partial any) error { return r.send(StatusRunning, partial) }
	out, err := call(func() (any, error) { return h(l.a.hctx, in, emit) })
	if err != nil {
		l.a.log.Debug("action failed", "action", name, "err", err)
		r.fail(err)
		return
	}
	if err := r.send(StatusCompleted, out); err != nil {
		l.a.log.Warn("cannot send an action result", "action", name, "err", err)
	}
}

func (l *mqttLink) serveWrite(name string, p *paho.Publish) {
	in, r := l.replierFor(p, l.a.contentType("properties/"+name))
	h := l.a.writeHandler(name)
	if h == nil {
		r.fail(noWritable(name))
		return
	}
	if _, err := call(func() (any, error) { return nil, h(l.a.hctx, in) }); err != nil {
		l.a.log.Debug("property write failed", "property", name, "err", err)
		r.fail(err)
		return
	}
	if err := r.send(StatusCompleted, nil); err != nil {
		l.a.log.Warn("cannot acknowledge a property write", "property", name, "err", err)
	}
}
