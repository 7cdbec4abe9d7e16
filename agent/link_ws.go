package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/fxamacker/cbor/v2"
)

// wsLink is the agent's connection when Options.URL is ws:// or wss://:
// the LMOS WebSocket envelope on the hub's /ws (PROTOCOL §5). The agent
// registers its TD with registerThing; the hub forwards consumers'
// requests for it on the socket, and the agent's own requests (Invoke,
// ReadProperty …) go out as consumer messages.
type wsLink struct {
	a      *Agent
	client *http.Client // wss:// with the TLS of Options; nil: the default
	binary bool         // CBOR frames (Options.ContentType application/cbor)

	mu sync.Mutex
	// urls are the hubs' /ws: Options.URL's first, then the failover hubs
	// (failover_ws.go); cur is the one used now.
	urls    []string
	cur     int
	c       *websocket.Conn // nil while reconnecting
	up      chan struct{}   // closed while c != nil
	pending map[string]chan wsFrame
	// watching holds the ids of pending observe/subscribe requests: the
	// hub sends the values of a subscription with its id as correlationId
	// from the acknowledgement on, and they belong to the observers.
	watching map[string]bool
	watches  map[string]map[uint64]func(Value) // "e|thing|event", "p|thing|property"
	groups   map[*groupWatch]bool              // GroupSubscribe's watches (groups.go)
	nextID   uint64
}

// wsFrame is one received envelope with its members kept encoded, so
// payloads reach the application in the frame's encoding.
type wsFrame struct {
	members map[string][]byte
	ct      string
}

func (f wsFrame) str(keys ...string) string {
	for _, k := range keys {
		b, ok := f.members[k]
		if !ok {
			continue
		}
		var s string
		var err error
		if f.ct == CBOR {
			err = lmos.DecodeCBOR(b, &s)
		} else {
			err = json.Unmarshal(b, &s)
		}
		if err == nil {
			return s
		}
	}
	return ""
}

func (f wsFrame) value(keys ...string) (Value, bool) {
	for _, k := range keys {
		if b, ok := f.members[k]; ok {
			return Value{Payload: b, ContentType: f.ct}, true
		}
	}
	return Value{}, false
}

// credential is a groupCredential's credential as JSON (CBOR frames carry
// the same document in CBOR); nil when there is none or it is not a JSON
// object.
func (f wsFrame) credential() []byte {
	v, ok := f.value(lmos.MemberCredential)
	if !ok {
		return nil
	}
	if f.ct != CBOR {
		return v.Payload
	}
	var doc map[string]any
	if v.Decode(&doc) != nil {
		return nil
	}
	b, _ := json.Marshal(doc)
	return b
}

// typ is the frame's messageType as lmos spells it (lmos.WSMessageType).
func (f wsFrame) typ() string { return lmos.WSMessageType(f.str(lmos.MemberMessageType)) }

// problem reads an error message, or an actionStatus's error member, as
// the hub reads a peer's problem (lmos.PeerProblem); without a type it is
// a failure.
func (f wsFrame) problem() *Problem {
	obj := map[string]any{}
	if b, ok := f.members[lmos.MemberError]; ok {
		_ = Value{Payload: b, ContentType: f.ct}.Decode(&obj)
	} else {
		for _, k := range []string{"type", "title", "detail", "instance", lmos.MemberStatus} {
			if v, ok := f.value(k); ok {
				var x any
				if v.Decode(&x) == nil {
					obj[k] = x
				}
			}
		}
	}
	p := lmos.PeerProblem(obj)
	if p.Type == "" {
		p.Type = ErrorTypeBase + lmos.CodeFailed
	}
	return &p
}

func decodeFrame(typ websocket.MessageType, data []byte) (wsFrame, error) {
	f := wsFrame{members: map[string][]byte{}, ct: JSON}
	if typ == websocket.MessageBinary {
		f.ct = CBOR
		var m map[string]cbor.RawMessage
		if err := lmos.DecodeCBOR(data, &m); err != nil {
			return f, err
		}
		for k, v := range m {
			f.members[k] = v
		}
		return f, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return f, err
	}
	for k, v := range m {
		f.members[k] = v
	}
	return f, nil
}

// isWS reports whether a hub URL is a WebSocket URL.
func isWS(raw string) bool {
	return strings.HasPrefix(raw, "ws://") || strings.HasPrefix(raw, "wss://")
}

// newWSAgent is the Agent of Connect for a ws:// or wss:// URL (the
// hub's /ws), not connected yet.
func newWSAgent(opts Options) (*Agent, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("invalid hub URL %q: want ws://host:port/ws", opts.URL)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/ws"
	}
	td, err := prepareTD(opts.TD, u.String(), opts.ContentType)
	if err != nil {
		return nil, fmt.Errorf("cannot prepare the Thing Description: %w", err)
	}
	var client *http.Client
	if u.Scheme == "wss" {
		cfg, err := clientTLS(opts, opts.Logger)
		if err != nil {
			return nil, err
		}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	if opts.ClientID == "" {
		opts.ClientID = randomClientID()
	}
	urls, err := wsFailoverURLs(u.String(), opts)
	if err != nil {
		return nil, err
	}
	if _, err := directoryOf(opts.Directory); err != nil {
		return nil, err
	}
	a := newAgent(opts, td, opts.Logger.With("component", "agent", "id", td.id, "transport", "ws"))
	a.link = &wsLink{a: a, urls: urls, client: client, binary: isCBOR(opts.ContentType), up: make(chan struct{}),
		pending: make(map[string]chan wsFrame), watching: make(map[string]bool), watches: make(map[string]map[uint64]func(Value))}
	return a, nil
}

// connect makes the first connection and registration. The connection is
// in use before Connect returns: the agent's first requests wait for
// nothing (as over MQTT).
func (l *wsLink) connect() (func(), error) {
	c, early, err := l.establish(true, time.Now())
	if err != nil {
		return nil, err
	}
	l.attach(c, early)
	return func() { l.run(c) }, nil
}

// establish dials and registers, retrying network failures with backoff
// until l.a.ctx ends. A refused first registration is returned at once (to
// Connect). On a reconnect every refusal is retried, as the MQTT link
// does: giving up would leave an open Agent without a connection for good,
// its requests waiting out their contexts. Refusals there pass by
// themselves: 409 (the hub still holds the agent's old socket, which it
// notices gone only when it fails a ping or a write), 429, 503, and the
// 500 of a hub that is stopping (its store already closed) while the
// agent redials it before its listener closes.
func (l *wsLink) establish(initial bool, lost time.Time) (*websocket.Conn, []wsFrame, error) {
	rounds, switched := 0, false
	for n := 0; ; n++ {
		var by time.Time
		if !initial && !switched {
			by = lost.Add(l.a.opts.FailoverGrace)
		}
		c, early, err := l.dialRegister(by)
		if err == nil {
			go l.learnPeers(l.a.ctx)
			return c, early, nil
		}
		var p *Problem
		refused := errors.As(err, &p)
		if initial && (refused || untrusted(err)) {
			return nil, nil, err
		}
		if refused && p.Status != http.StatusConflict && p.Status != http.StatusTooManyRequests && p.Status != http.StatusServiceUnavailable {
			// Not one that passes by itself: say so, once per attempt.
			l.a.log.Warn("the hub refused the registration; retrying", "err", err)
		} else {
			l.a.log.Debug("websocket connect failed", "err", err, "initial", initial)
		}
		d := backoff(n, l.a.opts.MaxBackoff)
		if l.failoverDue(lost) {
			// Failover: each failed attempt after the grace tries the
			// next hub at once; a round of the whole list backs off.
			d = 0
			if l.nextHub() {
				rounds++
				d = backoff(rounds, l.a.opts.MaxBackoff)
			}
			switched = true
		} else if until := time.Until(lost.Add(l.a.opts.FailoverGrace)); !switched && until > 0 && d > until && len(l.urlsNow()) > 1 {
			d = until // the next hub is tried once the grace is over
		}
		select {
		case <-l.a.ctx.Done():
			return nil, nil, errors.Join(err, l.a.ctx.Err())
		case <-time.After(d):
		}
	}
}

// urlsNow returns the hubs the agent may be on.
func (l *wsLink) urlsNow() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.urls...)
}

// maxEarlyFrames bounds the frames kept while the registration's answer
// is awaited (dialRegister).
const maxEarlyFrames = 64

// dialRegister connects and registers the TD. It returns the frames that
// came before the hub's acknowledgement, for attach to dispatch: the hub
// routes requests to the agent from the moment it records the Thing
// online, which may be before it queues the acknowledgement, so a
// consumer's request can overtake it (a consumer waiting for the agent to
// come back after a hub restart sends one at once). Dropping it would
// leave that consumer waiting for a result until its context ends.
func (l *wsLink) dialRegister(by time.Time) (*websocket.Conn, []wsFrame, error) {
	ctx, cancel := context.WithTimeout(l.a.ctx, l.dialTimeout(by))
	defer cancel()
	c, _, err := websocket.Dial(ctx, l.hubURL(), &websocket.DialOptions{Subprotocols: []string{lmos.WSSubprotocol}, HTTPClient: l.client})
	if err != nil {
		return nil, nil, err
	}
	c.SetReadLimit(1 << 20)
	td, err := l.a.signedTD()
	if err != nil {
		c.CloseNow()
		return nil, nil, err
	}
	id := newMessageID()
	msg := map[string]any{lmos.MemberMessageType: lmos.WSRegisterThing, lmos.MemberMessageID: id, lmos.MemberThingID: l.a.td.id, lmos.MemberTD: json.RawMessage(td)}
	if err := l.write(ctx, c, msg); err != nil {
		c.CloseNow()
		return nil, nil, err
	}
	// Until the read loop runs, the reply is read here.
	var early []wsFrame
	readCtx := ctx
	for {
		typ, data, err := c.Read(readCtx)
		if err != nil {
			c.CloseNow()
			return nil, nil, err
		}
		f, err := decodeFrame(typ, data)
		if err != nil {
			continue
		}
		if f.str(lmos.MemberCorrelationID) != id {
			if len(early) == maxEarlyFrames {
				c.Close(websocket.StatusPolicyViolation, "too many messages before the registration's answer")
				return nil, nil, errors.New("the hub sent too many messages before answering the registration")
			}
			early = append(early, f)
			continue
		}
		if f.typ() == lmos.WSError {
			c.Close(websocket.StatusNormalClosure, "")
			return nil, nil, fmt.Errorf("the hub refused the registration: %w", f.problem())
		}
		if f.typ() == lmos.WSAcknowledgement && f.str(lmos.MemberMessage) == lmos.JoinPending {
			// Join mode approve: the final answer comes on this socket
			// when an administrator decides, however long that takes.
			l.a.log.Info("the hub holds the registration for an administrator's approval; waiting", "id", l.a.td.id)
			readCtx = l.a.ctx
			continue
		}
		return c, early, nil
	}
}

// write sends one message as JSON text or CBOR binary; json.RawMessage
// members (payloads, the TD) are embedded as they are, transcoded for CBOR.
func (l *wsLink) write(ctx context.Context, c *websocket.Conn, msg map[string]any) error {
	if l.binary {
		for k, v := range msg {
			if raw, ok := v.(json.RawMessage); ok {
				var x any
				if err := json.Unmarshal(raw, &x); err != nil {
					return err
				}
				msg[k] = x
			}
		}
		b, err := lmos.EncodeCBOR(msg)
		if err != nil {
			return err
		}
		return c.Write(ctx, websocket.MessageBinary, b)
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return c.Write(ctx, websocket.MessageText, b)
}

// sendMsg sends msg on the current connection.
func (l *wsLink) sendMsg(ctx context.Context, msg map[string]any) error {
	l.mu.Lock()
	c := l.c
	l.mu.Unlock()
	if c == nil {
		return ErrNotConnected
	}
	ctx, cancel := l.a.withTimeout(ctx)
	defer cancel()
	return l.write(ctx, c, msg)
}

// run reads until the connection drops, then reconnects, registers
// again, restores observations and republishes properties, until Close.
func (l *wsLink) run(c *websocket.Conn) {
	defer close(l.a.done)
	for {
		stop := make(chan struct{})
		var silent atomic.Bool
		go l.keepAlive(c, stop, &silent)
		l.read(c)
		close(stop)
		l.mu.Lock()
		l.c = nil
		l.up = make(chan struct{})
		for id, ch := range l.pending {
			close(ch) // the requests fail: their replies are lost
			delete(l.pending, id)
		}
		l.mu.Unlock()
		c.CloseNow()
		if l.a.ctx.Err() != nil {
			return
		}
		lost := time.Now()
		if silent.Load() {
			// The hub has not answered for a keep alive already, which
			// counts towards the failover grace (as over MQTT).
			lost = lost.Add(-l.a.opts.KeepAlive)
		}
		var early []wsFrame
		var err error
		if c, early, err = l.establish(false, lost); err != nil {
			l.a.log.Warn("cannot reconnect to the hub", "err", err)
			return
		}
		l.attach(c, early)
	}
}

// attach makes c the connection in use, handles the frames that came
// before the registration's answer, and restores the observations and
// property values on it.
func (l *wsLink) attach(c *websocket.Conn, early []wsFrame) {
	l.mu.Lock()
	l.c = c
	close(l.up)
	l.mu.Unlock()
	for _, f := range early {
		l.dispatch(f)
	}
	l.restore()
}

// connected waits until the agent has a connection, ctx ends or the
// agent closes, as mqttLink.client: a request made while the agent
// reconnects waits for it.
func (l *wsLink) connected(ctx context.Context) error {
	for {
		l.mu.Lock()
		c, up := l.c, l.up
		l.mu.Unlock()
		if c != nil {
			return nil
		}
		select {
		case <-up:
		case <-l.a.closed:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNotConnected, ctx.Err())
		}
	}
}

// restore re-subscribes observations and republishes properties after
// a (re)connect.
func (l *wsLink) restore() {
	l.mu.Lock()
	keys := make([]string, 0, len(l.watches))
	for k := range l.watches {
		keys = append(keys, k)
	}
	l.mu.Unlock()
	for _, k := range keys {
		go func() {
			if err := l.watchRequest(l.a.ctx, k, true); err != nil {
				l.a.log.Warn("cannot restore a subscription", "key", k, "err", err)
			}
		}()
	}
	l.restoreGroups()
	l.a.mu.Lock()
	props := maps.Clone(l.a.props)
	l.a.mu.Unlock()
	for name, v := range props {
		if err := l.publishProperty(name, v); err != nil {
			l.a.log.Debug("cannot republish a property", "name", name, "err", err)
		}
	}
}

func (l *wsLink) read(c *websocket.Conn) {
	for {
		typ, data, err := c.Read(l.a.ctx)
		if err != nil {
			if l.a.ctx.Err() == nil {
				l.a.log.Info("websocket connection lost", "err", err)
			}
			return
		}
		f, err := decodeFrame(typ, data)
		if err != nil {
			l.a.log.Debug("undecodable frame from the hub", "err", err)
			continue
		}
		l.dispatch(f)
	}
}

func (l *wsLink) dispatch(f wsFrame) {
	typ := f.typ()
	switch typ {
	case lmos.WSInvokeAction, lmos.WSWriteProperty, lmos.WSReadProperty:
		l.a.mu.Lock()
		closing := l.a.closing
		l.a.mu.Unlock()
		if closing {
			return
		}
		select {
		case l.a.running <- struct{}{}:
			l.a.handlers.Go(func() {
				defer func() { <-l.a.running }()
				l.serve(typ, f)
			})
		default:
			l.replyError(f, NewProblem(http.StatusServiceUnavailable, "the agent is busy: too many requests in progress"))
		}
		return
	}
	if corr := f.str(lmos.MemberCorrelationID); corr != "" {
		l.mu.Lock()
		ch := l.pending[corr]
		if l.watching[corr] && (typ == lmos.WSEvent || typ == lmos.WSPropertyReading || typ == lmos.WSGroupMessage) {
			ch = nil
		}
		l.mu.Unlock()
		if ch != nil {
			select {
			case ch <- f:
			default:
				l.a.log.Debug("dropping a reply: the requester is behind")
			}
			return
		}
	}
	if typ == lmos.WSGroupCredential {
		l.a.received(f.str(lmos.MemberGroup), f.credential())
		return
	}
	var key, name string
	switch typ {
	case lmos.WSGroupMessage:
		l.dispatchGroup(f)
		return
	case lmos.WSEvent:
		name = f.str(lmos.MemberEvent, lmos.MemberName)
		key = "e|" + f.str(lmos.MemberThingID, lmos.MemberThingIDAlt) + "|" + name
	case lmos.WSPropertyReading:
		name = f.str(lmos.MemberName, lmos.MemberProperty)
		key = "p|" + f.str(lmos.MemberThingID, lmos.MemberThingIDAlt) + "|" + name
	default:
		return
	}
	v, _ := f.value(lmos.MemberData, lmos.MemberValue)
	if typ == lmos.WSPropertyReading {
		v, _ = f.value(lmos.MemberValue, lmos.MemberData)
	}
	l.mu.Lock()
	fns := make([]func(Value), 0, len(l.watches[key]))
	for _, fn := range l.watches[key] {
		fns = append(fns, fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn(v)
	}
}

// reply answers a request of the hub.
func (l *wsLink) reply(req wsFrame, msg map[string]any) {
	msg[lmos.MemberThingID], msg[lmos.MemberCorrelationID], msg[lmos.MemberMessageID] = l.a.td.id, req.str(lmos.MemberMessageID, lmos.MemberMessageIDAlt), newMessageID()
	if tp := req.str(lmos.MemberTraceparent); tp != "" {
		msg[lmos.MemberTraceparent] = tp
	}
	ctx, cancel := context.WithTimeout(l.a.hctx, l.a.opts.Timeout)
	defer cancel()
	if err := l.sendMsg(ctx, msg); err != nil {
		l.a.log.Debug("cannot answer the hub", "type", msg[lmos.MemberMessageType], "err", err)
	}
}

func (l *wsLink) replyError(req wsFrame, p *Problem) {
	l.reply(req, map[string]any{lmos.MemberMessageType: lmos.WSError, "type": p.Type, "title": p.Title, lmos.MemberStatus: p.Status, "detail": p.Detail})
}

// payload encodes v for a message member in the agent's encoding.
func (l *wsLink) payload(v any) (json.RawMessage, error) {
	b, err := encode(v, JSON)
	if err != nil || b == nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}

// serve runs the handler of a request of the hub and answers it.
func (l *wsLink) serve(typ string, f wsFrame) {
	switch typ {
	case lmos.WSInvokeAction:
		name := f.str(lmos.MemberAction, lmos.MemberName)
		h := l.a.actionHandler(name)
		status := func(st string, out any) {
			msg := map[string]any{lmos.MemberMessageType: lmos.WSActionStatus, lmos.MemberAction: name, lmos.MemberStatus: st}
			if st == StatusFailed {
				p := problemOf(out.(error))
				msg[lmos.MemberError] = p
			} else if raw, err := l.payload(out); err != nil {
				l.a.log.Warn("cannot encode an action result", "action", name, "err", err)
				return
			} else if raw != nil {
				msg[lmos.MemberOutput] = raw
			}
			l.reply(f, msg)
		}
		if h == nil {
			status(StatusFailed, noAction(name))
			return
		}
		in, _ := f.value(lmos.MemberInput)
		emit := func(partial any) error { status(StatusRunning, partial); return nil }
		out, err := call(func() (any, error) { return h(l.a.hctx, in, emit) })
		if err != nil {
			status(StatusFailed, err)
			return
		}
		status(StatusCompleted, out)
	case lmos.WSWriteProperty:
		name := f.str(lmos.MemberName, lmos.MemberProperty)
		h := l.a.writeHandler(name)
		if h == nil {
			l.replyError(f, noWritable(name))
			return
		}
		v, _ := f.value(lmos.MemberValue, lmos.MemberData)
		if _, err := call(func() (any, error) { return nil, h(l.a.hctx, v) }); err != nil {
			l.replyError(f, problemOf(err))
			return
		}
		l.reply(f, map[string]any{lmos.MemberMessageType: lmos.WSAcknowledgement, lmos.MemberMessage: "written"})
	case lmos.WSReadProperty:
		name := f.str(lmos.MemberName, lmos.MemberProperty)
		l.a.mu.Lock()
		v, ok := l.a.props[name]
		l.a.mu.Unlock()
		if !ok {
			l.replyError(f, NewProblem(http.StatusServiceUnavailable, fmt.Sprintf("the agent has set no value of %q yet", name)))
			return
		}
		raw, err := l.payload(v)
		if err != nil {
			l.replyError(f, problemOf(err))
			return
		}
		l.reply(f, map[string]any{lmos.MemberMessageType: lmos.WSPropertyReading, lmos.MemberName: name, lmos.MemberValue: raw,
			lmos.MemberTimestamp: time.Now().UTC().Format(time.RFC3339Nano)})
	}
}

// publishProperty publishes a property value (an unsolicited propertyReading).
func (l *wsLink) publishProperty(name string, value any) error {
	raw, err := l.payload(value)
	if err != nil {
		return fmt.Errorf("cannot set property %s: %w", name, err)
	}
	return l.sendMsg(l.a.ctx, map[string]any{lmos.MemberMessageType: lmos.WSPropertyReading, lmos.MemberMessageID: newMessageID(), lmos.MemberThingID: l.a.td.id,
		lmos.MemberName: name, lmos.MemberValue: raw, lmos.MemberTimestamp: time.Now().UTC().Format(time.RFC3339Nano)})
}

// emit sends an event.
func (l *wsLink) emit(event string, data any) error {
	raw, err := l.payload(data)
	if err != nil {
		return fmt.Errorf("cannot emit %s: %w", event, err)
	}
	if err := l.sendMsg(l.a.ctx, map[string]any{lmos.MemberMessageType: lmos.WSEvent, lmos.MemberMessageID: newMessageID(), lmos.MemberThingID: l.a.td.id,
		lmos.MemberEvent: event, lmos.MemberData: raw, lmos.MemberTimestamp: time.Now().UTC().Format(time.RFC3339Nano)}); err != nil {
		return fmt.Errorf("cannot emit %s: %w", event, err)
	}
	return nil
}

// request sends a consumer message and passes every reply to each until
// it returns true (the final one) or ctx ends. The values of a watching
// request (observeProperty, subscribeEvent) go to the observers instead.
func (l *wsLink) request(ctx context.Context, msg map[string]any, watching bool, each func(wsFrame) (bool, error)) error {
	ctx, cancel := l.a.withTimeout(ctx)
	defer cancel()
	if err := l.connected(ctx); err != nil {
		return err
	}
	id := newMessageID()
	msg[lmos.MemberMessageID] = id
	ch := make(chan wsFrame, 64)
	l.mu.Lock()
	l.pending[id] = ch
	if watching {
		l.watching[id] = true
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.pending, id)
		delete(l.watching, id)
		l.mu.Unlock()
	}()
	if err := l.sendMsg(ctx, msg); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.a.closed:
			return ErrClosed
		case f, ok := <-ch:
			if !ok {
				return ErrNotConnected
			}
			if f.typ() == lmos.WSError {
				return f.problem()
			}
			done, err := each(f)
			if done || err != nil {
				return err
			}
		}
	}
}

func (l *wsLink) invoke(ctx context.Context, thingID, action string, input any, cfg invokeConfig) (Output, error) {
	raw, err := l.payload(input)
	if err != nil {
		return Output{}, err
	}
	msg := map[string]any{lmos.MemberMessageType: lmos.WSInvokeAction, lmos.MemberThingID: thingID, lmos.MemberAction: action}
	if raw != nil {
		msg[lmos.MemberInput] = raw
	}
	var out Output
	err = l.request(ctx, msg, false, func(f wsFrame) (bool, error) {
		if f.typ() != lmos.WSActionStatus {
			return false, nil
		}
		v, _ := f.value(lmos.MemberOutput)
		switch f.str(lmos.MemberStatus) {
		case StatusCompleted:
			out = v
			return true, nil
		case StatusFailed:
			return true, f.problem()
		case StatusRunning:
			if cfg.partial != nil && len(v.Payload) > 0 {
				cfg.partial(v)
			}
		}
		return false, nil
	})
	return out, err
}

// writeProperty sends writeProperty and waits for the hub's answer (the
// acknowledgement or an error), with or without WithAck.
func (l *wsLink) writeProperty(ctx context.Context, thingID, name string, value any, _ invokeConfig) error {
	raw, err := l.payload(value)
	if err != nil {
		return err
	}
	return l.request(ctx, map[string]any{lmos.MemberMessageType: lmos.WSWriteProperty, lmos.MemberThingID: thingID, lmos.MemberName: name, lmos.MemberValue: raw}, false,
		func(wsFrame) (bool, error) { return true, nil })
}

func (l *wsLink) readProperty(ctx context.Context, thingID, name string) (Value, error) {
	var v Value
	err := l.request(ctx, map[string]any{lmos.MemberMessageType: lmos.WSReadProperty, lmos.MemberThingID: thingID, lmos.MemberName: name}, false,
		func(f wsFrame) (bool, error) {
			if f.typ() != lmos.WSPropertyReading {
				return false, nil
			}
			v, _ = f.value(lmos.MemberValue, lmos.MemberData)
			return true, nil
		})
	if err != nil {
		return v, fmt.Errorf("cannot read %s of %s: %w", name, thingID, err)
	}
	return v, nil
}

// observe watches the key "p|thing|property" or "e|thing|event".
func (l *wsLink) observe(ctx context.Context, thingID, kind, name string, fn func(Value)) (func(), error) {
	k := "e"
	if kind == "properties" {
		k = "p"
	}
	return l.watch(ctx, k+"|"+thingID+"|"+name, fn)
}

// setProperty sends an unsolicited propertyReading; while reconnecting
// the value waits for restore.
func (l *wsLink) setProperty(name string, value any) error {
	if err := l.publishProperty(name, value); err != nil && !errors.Is(err, ErrNotConnected) {
		return err
	}
	return nil
}

// watch adds an observer of key ("e|thing|event" or "p|thing|property")
// and subscribes for the first one.
func (l *wsLink) watch(ctx context.Context, key string, fn func(Value)) (func(), error) {
	l.mu.Lock()
	first := len(l.watches[key]) == 0
	if first {
		l.watches[key] = make(map[uint64]func(Value))
	}
	l.nextID++
	id := l.nextID
	l.watches[key][id] = fn
	l.mu.Unlock()
	stop := func() {
		l.mu.Lock()
		delete(l.watches[key], id)
		last := len(l.watches[key]) == 0
		if last {
			delete(l.watches, key)
		}
		l.mu.Unlock()
		if last {
			ctx, cancel := context.WithTimeout(context.Background(), l.a.opts.Timeout)
			defer cancel()
			if err := l.watchRequest(ctx, key, false); err != nil {
				l.a.log.Debug("cannot unsubscribe", "key", key, "err", err)
			}
		}
	}
	if first {
		if err := l.watchRequest(ctx, key, true); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// watchRequest subscribes (on) or unsubscribes key and waits for the
// acknowledgement.
func (l *wsLink) watchRequest(ctx context.Context, key string, on bool) error {
	kind, rest, _ := strings.Cut(key, "|")
	i := strings.LastIndexByte(rest, '|')
	thing, name := rest[:i], rest[i+1:]
	msg := map[string]any{lmos.MemberThingID: thing}
	switch {
	case kind == "e" && on:
		msg[lmos.MemberMessageType], msg[lmos.MemberEvent] = lmos.WSSubscribeEvent, name
	case kind == "e":
		msg[lmos.MemberMessageType], msg[lmos.MemberEvent] = lmos.WSUnsubscribeEvent, name
	case on:
		msg[lmos.MemberMessageType], msg[lmos.MemberName] = lmos.WSObserveProperty, name
	default:
		msg[lmos.MemberMessageType], msg[lmos.MemberName] = lmos.WSUnobserveProperty, name
	}
	return l.request(ctx, msg, on, func(f wsFrame) (bool, error) { return f.typ() == lmos.WSAcknowledgement, nil })
}

// close unregisters by closing the socket (the hub sets the Thing
// offline) after the handlers finished.
func (l *wsLink) close() error {
	l.mu.Lock()
	c := l.c
	l.mu.Unlock()
	l.a.cancel()
	if c != nil {
		_ = c.Close(websocket.StatusNormalClosure, "agent closing")
	}
	<-l.a.done
	l.a.stopHandlers()
	return nil
}

func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
