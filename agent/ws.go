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
	url    string
	binary bool // CBOR frames (Options.ContentType application/cbor)

	mu      sync.Mutex
	c       *websocket.Conn // nil while reconnecting
	up      chan struct{}   // closed while c != nil
	pending map[string]chan wsFrame
	watches map[string]map[uint64]func(Value) // "e|thing|event", "p|thing|property"
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

func (f wsFrame) typ() string { return strings.ToLower(f.str("messageType")) }

// problem reads an error message, or an actionStatus's error member.
func (f wsFrame) problem() *Problem {
	src := f
	if b, ok := f.members["error"]; ok {
		var m map[string]json.RawMessage
		var mc map[string]cbor.RawMessage
		src = wsFrame{members: map[string][]byte{}, ct: f.ct}
		if f.ct == CBOR {
			_ = lmos.DecodeCBOR(b, &mc)
			for k, v := range mc {
				src.members[k] = v
			}
		} else {
			_ = json.Unmarshal(b, &m)
			for k, v := range m {
				src.members[k] = v
			}
		}
	}
	p := &Problem{Type: src.str("type"), Title: src.str("title"), Detail: src.str("detail")}
	if v, ok := src.value("status"); ok {
		var n int
		if v.Decode(&n) != nil {
			var s string
			_ = v.Decode(&s)
			fmt.Sscan(s, &n)
		}
		p.Status = n
	}
	if p.Type == "" {
		p.Type = ErrorTypeBase + "failed"
	}
	return p
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

// connectWS is Connect for a ws:// or wss:// URL (the hub's /ws).
func connectWS(ctx context.Context, opts Options) (*Agent, error) {
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
	if opts.ClientID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		opts.ClientID = "lmos-agent-" + hex.EncodeToString(b[:])
	}
	a := &Agent{
		opts:     opts,
		clientID: opts.ClientID,
		td:       td,
		tid:      lmos.TopicKey(td.id),
		log:      opts.Logger.With("component", "agent", "id", td.id, "transport", "ws"),
		closed:   make(chan struct{}),
		done:     make(chan struct{}),
		up:       make(chan struct{}),
		actions:  make(map[string]StreamHandler),
		writes:   make(map[string]WriteHandler),
		props:    make(map[string]any),
		running:  make(chan struct{}, maxHandlers),
		refusing: make(chan struct{}, maxRefusals),
		ws: &wsLink{url: u.String(), binary: isCBOR(opts.ContentType), up: make(chan struct{}),
			pending: make(map[string]chan wsFrame), watches: make(map[string]map[uint64]func(Value))},
	}
	return start(ctx, a, opts.URL, a.wsEstablish, a.wsRun)
}

// wsEstablish dials and registers, retrying network failures with backoff
// until a.ctx ends; a refused registration is returned at once, except on
// a reconnect a refusal that passes by itself: 409 (the hub still holds
// the agent's old socket, which it notices gone only when it fails a ping
// or a write), 429 and 503.
func (a *Agent) wsEstablish(initial bool) (*websocket.Conn, error) {
	for n := 0; ; n++ {
		c, err := a.wsDialRegister()
		if err == nil {
			return c, nil
		}
		var p *Problem
		if errors.As(err, &p) && (initial || p.Status != http.StatusConflict && p.Status != http.StatusTooManyRequests && p.Status != http.StatusServiceUnavailable) {
			return nil, err
		}
		a.log.Debug("websocket connect failed", "err", err, "initial", initial)
		select {
		case <-a.ctx.Done():
			return nil, errors.Join(err, a.ctx.Err())
		case <-time.After(backoff(n, a.opts.MaxBackoff)):
		}
	}
}

func (a *Agent) wsDialRegister() (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(a.ctx, a.opts.Timeout)
	defer cancel()
	c, _, err := websocket.Dial(ctx, a.ws.url, &websocket.DialOptions{Subprotocols: []string{"lmosprotocol"}})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	id := newMessageID()
	msg := map[string]any{"messageType": "registerThing", "messageId": id, "thingId": a.td.id, "td": json.RawMessage(a.td.doc)}
	if err := a.wsWrite(ctx, c, msg); err != nil {
		c.CloseNow()
		return nil, err
	}
	// Until the read loop runs, the reply is read here.
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			c.CloseNow()
			return nil, err
		}
		f, err := decodeFrame(typ, data)
		if err != nil || f.str("correlationId") != id {
			continue
		}
		if f.typ() == "error" {
			c.Close(websocket.StatusNormalClosure, "")
			return nil, fmt.Errorf("the hub refused the registration: %w", f.problem())
		}
		return c, nil
	}
}

// wsWrite sends one message as JSON text or CBOR binary; json.RawMessage
// members (payloads, the TD) are embedded as they are, transcoded for CBOR.
func (a *Agent) wsWrite(ctx context.Context, c *websocket.Conn, msg map[string]any) error {
	if a.ws.binary {
		for k, v := range msg {
			if raw, ok := v.(json.RawMessage); ok {
				var x any
				if err := json.Unmarshal(raw, &x); err != nil {
					return err
				}
				msg[k] = x
			}
		}
		b, err := cbor.Marshal(msg)
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

// wsSend sends msg on the current connection.
func (a *Agent) wsSend(ctx context.Context, msg map[string]any) error {
	a.ws.mu.Lock()
	c := a.ws.c
	a.ws.mu.Unlock()
	if c == nil {
		return ErrNotConnected
	}
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	return a.wsWrite(ctx, c, msg)
}

// wsRun reads until the connection drops, then reconnects, registers
// again, restores observations and republishes properties, until Close.
func (a *Agent) wsRun(c *websocket.Conn) {
	defer close(a.done)
	for {
		a.ws.mu.Lock()
		a.ws.c = c
		close(a.ws.up)
		a.ws.mu.Unlock()
		a.wsRestore()
		a.wsRead(c)
		a.ws.mu.Lock()
		a.ws.c = nil
		a.ws.up = make(chan struct{})
		for id, ch := range a.ws.pending {
			close(ch) // the requests fail: their replies are lost
			delete(a.ws.pending, id)
		}
		a.ws.mu.Unlock()
		c.CloseNow()
		if a.ctx.Err() != nil {
			return
		}
		var err error
		if c, err = a.wsEstablish(false); err != nil {
			a.log.Warn("cannot reconnect to the hub", "err", err)
			return
		}
	}
}

// wsRestore re-subscribes observations and republishes properties after
// a (re)connect.
func (a *Agent) wsRestore() {
	a.ws.mu.Lock()
	keys := make([]string, 0, len(a.ws.watches))
	for k := range a.ws.watches {
		keys = append(keys, k)
	}
	a.ws.mu.Unlock()
	for _, k := range keys {
		go func() {
			if err := a.wsWatchRequest(a.ctx, k, true); err != nil {
				a.log.Warn("cannot restore a subscription", "key", k, "err", err)
			}
		}()
	}
	a.mu.Lock()
	props := maps.Clone(a.props)
	a.mu.Unlock()
	for name, v := range props {
		if err := a.wsProperty(name, v, ""); err != nil {
			a.log.Debug("cannot republish a property", "name", name, "err", err)
		}
	}
}

func (a *Agent) wsRead(c *websocket.Conn) {
	for {
		typ, data, err := c.Read(a.ctx)
		if err != nil {
			if a.ctx.Err() == nil {
				a.log.Info("websocket connection lost", "err", err)
			}
			return
		}
		f, err := decodeFrame(typ, data)
		if err != nil {
			a.log.Debug("undecodable frame from the hub", "err", err)
			continue
		}
		a.wsDispatch(f)
	}
}

func (a *Agent) wsDispatch(f wsFrame) {
	typ := f.typ()
	switch typ {
	case "invokeaction", "writeproperty", "readproperty":
		a.mu.Lock()
		closing := a.closing
		a.mu.Unlock()
		if closing {
			return
		}
		select {
		case a.running <- struct{}{}:
			a.handlers.Go(func() {
				defer func() { <-a.running }()
				a.wsServe(typ, f)
			})
		default:
			a.wsReplyError(f, NewProblem(http.StatusServiceUnavailable, "the agent is busy: too many requests in progress"))
		}
		return
	}
	if corr := f.str("correlationId"); corr != "" {
		a.ws.mu.Lock()
		ch := a.ws.pending[corr]
		a.ws.mu.Unlock()
		if ch != nil {
			select {
			case ch <- f:
			default:
				a.log.Debug("dropping a reply: the requester is behind")
			}
			return
		}
	}
	var key, name string
	switch typ {
	case "event":
		name = f.str("event", "name")
		key = "e|" + f.str("thingId", "thingID") + "|" + name
	case "propertyreading":
		name = f.str("name", "property")
		key = "p|" + f.str("thingId", "thingID") + "|" + name
	default:
		return
	}
	v, _ := f.value("data", "value")
	if typ == "propertyreading" {
		v, _ = f.value("value", "data")
	}
	a.ws.mu.Lock()
	fns := make([]func(Value), 0, len(a.ws.watches[key]))
	for _, fn := range a.ws.watches[key] {
		fns = append(fns, fn)
	}
	a.ws.mu.Unlock()
	for _, fn := range fns {
		fn(v)
	}
}

// wsReply answers a request of the hub.
func (a *Agent) wsReply(req wsFrame, msg map[string]any) {
	msg["thingId"], msg["correlationId"], msg["messageId"] = a.td.id, req.str("messageId", "messageID"), newMessageID()
	if tp := req.str("traceparent"); tp != "" {
		msg["traceparent"] = tp
	}
	ctx, cancel := context.WithTimeout(a.hctx, a.opts.Timeout)
	defer cancel()
	if err := a.wsSend(ctx, msg); err != nil {
		a.log.Debug("cannot answer the hub", "type", msg["messageType"], "err", err)
	}
}

func (a *Agent) wsReplyError(req wsFrame, p *Problem) {
	a.wsReply(req, map[string]any{"messageType": "error", "type": p.Type, "title": p.Title, "status": p.Status, "detail": p.Detail})
}

// wsPayload encodes v for a message member in the agent's encoding.
func (a *Agent) wsPayload(v any) (json.RawMessage, error) {
	b, err := encode(v, JSON)
	if err != nil || b == nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}

// wsServe runs the handler of a request of the hub and answers it.
func (a *Agent) wsServe(typ string, f wsFrame) {
	switch typ {
	case "invokeaction":
		name := f.str("action", "name")
		a.mu.Lock()
		h := a.actions[name]
		a.mu.Unlock()
		status := func(st string, out any) {
			msg := map[string]any{"messageType": "actionStatus", "action": name, "status": st}
			if st == StatusFailed {
				p := problemOf(out.(error))
				msg["error"] = p
			} else if raw, err := a.wsPayload(out); err != nil {
				a.log.Warn("cannot encode an action result", "action", name, "err", err)
				return
			} else if raw != nil {
				msg["output"] = raw
			}
			a.wsReply(f, msg)
		}
		if h == nil {
			status(StatusFailed, NewProblem(http.StatusNotFound, fmt.Sprintf("the agent has no action %q", name)))
			return
		}
		in, _ := f.value("input")
		emit := func(partial any) error { status(StatusRunning, partial); return nil }
		out, err := call(func() (any, error) { return h(a.hctx, in, emit) })
		if err != nil {
			status(StatusFailed, err)
			return
		}
		status(StatusCompleted, out)
	case "writeproperty":
		name := f.str("name", "property")
		a.mu.Lock()
		h := a.writes[name]
		a.mu.Unlock()
		if h == nil {
			a.wsReplyError(f, NewProblem(http.StatusNotFound, fmt.Sprintf("the agent has no writable property %q", name)))
			return
		}
		v, _ := f.value("value", "data")
		if _, err := call(func() (any, error) { return nil, h(a.hctx, v) }); err != nil {
			a.wsReplyError(f, problemOf(err))
			return
		}
		a.wsReply(f, map[string]any{"messageType": "acknowledgement", "message": "written"})
	case "readproperty":
		name := f.str("name", "property")
		a.mu.Lock()
		v, ok := a.props[name]
		a.mu.Unlock()
		if !ok {
			a.wsReplyError(f, NewProblem(http.StatusServiceUnavailable, fmt.Sprintf("the agent has set no value of %q yet", name)))
			return
		}
		raw, err := a.wsPayload(v)
		if err != nil {
			a.wsReplyError(f, problemOf(err))
			return
		}
		a.wsReply(f, map[string]any{"messageType": "propertyReading", "name": name, "value": raw,
			"timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
	}
}

// wsProperty publishes a property value (an unsolicited propertyReading).
func (a *Agent) wsProperty(name string, value any, _ string) error {
	raw, err := a.wsPayload(value)
	if err != nil {
		return fmt.Errorf("cannot set property %s: %w", name, err)
	}
	return a.wsSend(a.ctx, map[string]any{"messageType": "propertyReading", "messageId": newMessageID(), "thingId": a.td.id,
		"name": name, "value": raw, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
}

// wsEmit sends an event.
func (a *Agent) wsEmit(event string, data any) error {
	raw, err := a.wsPayload(data)
	if err != nil {
		return fmt.Errorf("cannot emit %s: %w", event, err)
	}
	if err := a.wsSend(a.ctx, map[string]any{"messageType": "event", "messageId": newMessageID(), "thingId": a.td.id,
		"event": event, "data": raw, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)}); err != nil {
		return fmt.Errorf("cannot emit %s: %w", event, err)
	}
	return nil
}

// wsRequest sends a consumer message and passes every reply to each until
// it returns true (the final one) or ctx ends.
func (a *Agent) wsRequest(ctx context.Context, msg map[string]any, each func(wsFrame) (bool, error)) error {
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	id := newMessageID()
	msg["messageId"] = id
	ch := make(chan wsFrame, 64)
	a.ws.mu.Lock()
	a.ws.pending[id] = ch
	a.ws.mu.Unlock()
	defer func() {
		a.ws.mu.Lock()
		delete(a.ws.pending, id)
		a.ws.mu.Unlock()
	}()
	if err := a.wsSend(ctx, msg); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.closed:
			return ErrClosed
		case f, ok := <-ch:
			if !ok {
				return ErrNotConnected
			}
			if f.typ() == "error" {
				return f.problem()
			}
			done, err := each(f)
			if done || err != nil {
				return err
			}
		}
	}
}

func (a *Agent) wsInvoke(ctx context.Context, thingID, action string, input any, cfg invokeConfig) (Output, error) {
	raw, err := a.wsPayload(input)
	if err != nil {
		return Output{}, err
	}
	msg := map[string]any{"messageType": "invokeAction", "thingId": thingID, "action": action}
	if raw != nil {
		msg["input"] = raw
	}
	var out Output
	err = a.wsRequest(ctx, msg, func(f wsFrame) (bool, error) {
		if f.typ() != "actionstatus" {
			return false, nil
		}
		v, _ := f.value("output")
		switch f.str("status") {
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

func (a *Agent) wsWriteProperty(ctx context.Context, thingID, name string, value any) error {
	raw, err := a.wsPayload(value)
	if err != nil {
		return err
	}
	return a.wsRequest(ctx, map[string]any{"messageType": "writeProperty", "thingId": thingID, "name": name, "value": raw},
		func(wsFrame) (bool, error) { return true, nil })
}

func (a *Agent) wsReadProperty(ctx context.Context, thingID, name string) (Value, error) {
	var v Value
	err := a.wsRequest(ctx, map[string]any{"messageType": "readProperty", "thingId": thingID, "name": name},
		func(f wsFrame) (bool, error) {
			if f.typ() != "propertyreading" {
				return false, nil
			}
			v, _ = f.value("value", "data")
			return true, nil
		})
	return v, err
}

// wsWatch adds an observer of key ("e|thing|event" or "p|thing|property")
// and subscribes for the first one.
func (a *Agent) wsWatch(ctx context.Context, key string, fn func(Value)) (func(), error) {
	a.ws.mu.Lock()
	first := len(a.ws.watches[key]) == 0
	if first {
		a.ws.watches[key] = make(map[uint64]func(Value))
	}
	a.nextID++
	id := a.nextID
	a.ws.watches[key][id] = fn
	a.ws.mu.Unlock()
	stop := func() {
		a.ws.mu.Lock()
		delete(a.ws.watches[key], id)
		last := len(a.ws.watches[key]) == 0
		if last {
			delete(a.ws.watches, key)
		}
		a.ws.mu.Unlock()
		if last {
			ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
			defer cancel()
			if err := a.wsWatchRequest(ctx, key, false); err != nil {
				a.log.Debug("cannot unsubscribe", "key", key, "err", err)
			}
		}
	}
	if first {
		if err := a.wsWatchRequest(ctx, key, true); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// wsWatchRequest subscribes (on) or unsubscribes key and waits for the
// acknowledgement.
func (a *Agent) wsWatchRequest(ctx context.Context, key string, on bool) error {
	kind, rest, _ := strings.Cut(key, "|")
	i := strings.LastIndexByte(rest, '|')
	thing, name := rest[:i], rest[i+1:]
	msg := map[string]any{"thingId": thing}
	switch {
	case kind == "e" && on:
		msg["messageType"], msg["event"] = "subscribeEvent", name
	case kind == "e":
		msg["messageType"], msg["event"] = "unsubscribeEvent", name
	case on:
		msg["messageType"], msg["name"] = "observeProperty", name
	default:
		msg["messageType"], msg["name"] = "unobserveProperty", name
	}
	return a.wsRequest(ctx, msg, func(f wsFrame) (bool, error) { return f.typ() == "acknowledgement", nil })
}

// wsClose unregisters by closing the socket (the hub sets the Thing
// offline) after the handlers finished.
func (a *Agent) wsClose() {
	a.ws.mu.Lock()
	c := a.ws.c
	a.ws.mu.Unlock()
	a.cancel()
	if c != nil {
		_ = c.Close(websocket.StatusNormalClosure, "agent closing")
	}
	<-a.done
	a.stopHandlers()
}

func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
