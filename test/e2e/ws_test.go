package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fxamacker/cbor/v2"
	"github.com/google/uuid"
)

// wsClient is a real WebSocket client (coder/websocket) on the hub's /ws.
type wsClient struct {
	t      *testing.T
	c      *websocket.Conn
	msgs   chan map[string]any
	closed chan error // the read error that ended the connection
}

var cborMaps = func() cbor.DecMode {
	dm, _ := cbor.DecOptions{DefaultMapType: reflect.TypeOf(map[string]any(nil))}.DecMode()
	return dm
}()

// wsDial opens /ws with the given subprotocol ("" offers none) and headers.
func (h *testHub) wsDial(subprotocol string, header http.Header) *wsClient {
	h.t.Helper()
	c, err := h.wsDialErr("/ws", subprotocol, header)
	if err != nil {
		h.t.Fatalf("dial /ws: %v", err)
	}
	return h.wsWrap(c)
}

func (h *testHub) wsDialErr(path, subprotocol string, header http.Header) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{HTTPHeader: header}
	if subprotocol != "" {
		opts.Subprotocols = []string{subprotocol}
	}
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+path, opts)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("%w (HTTP %d)", err, resp.StatusCode)
		}
		return nil, err
	}
	return c, nil
}

func (h *testHub) wsWrap(c *websocket.Conn) *wsClient {
	c.SetReadLimit(4 << 20)
	w := &wsClient{t: h.t, c: c, msgs: make(chan map[string]any, 256), closed: make(chan error, 1)}
	go func() {
		for {
			typ, b, err := c.Read(context.Background())
			if err != nil {
				w.closed <- err
				close(w.msgs)
				return
			}
			var m map[string]any
			if typ == websocket.MessageBinary {
				err = cborMaps.Unmarshal(b, &m)
			} else {
				err = json.Unmarshal(b, &m)
			}
			if err != nil {
				h.t.Errorf("undecodable frame from the hub: %q", b)
				continue
			}
			w.msgs <- m
		}
	}()
	h.t.Cleanup(func() { _ = c.Close(websocket.StatusNormalClosure, "") })
	return w
}

// send writes m as JSON text (cbor false) or CBOR binary, with a fresh
// messageId unless m has one; it returns the messageId.
func (w *wsClient) send(m map[string]any, binary bool) string {
	w.t.Helper()
	_, ok := m["messageId"]
	_, kotlin := m["messageID"]
	if !ok && !kotlin {
		m["messageId"] = uuid.NewString()
	}
	var b []byte
	var err error
	typ := websocket.MessageText
	if binary {
		typ = websocket.MessageBinary
		b, err = cbor.Marshal(m)
	} else {
		b, err = json.Marshal(m)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	w.raw(typ, b)
	id, _ := m["messageId"].(string)
	if kotlin {
		id, _ = m["messageID"].(string)
	}
	return id
}

func (w *wsClient) raw(typ websocket.MessageType, b []byte) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, typ, b); err != nil {
		w.t.Fatalf("ws write: %v", err)
	}
}

// next waits for the next message matching keep (nil: any).
func (w *wsClient) next(keep func(map[string]any) bool) map[string]any {
	w.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				w.t.Fatalf("ws closed while waiting: %v", <-w.closed)
			}
			if keep == nil || keep(m) {
				return m
			}
		case <-timeout:
			w.t.Fatal("no ws message within 5s")
			return nil
		}
	}
}

// reply waits for the next message correlated with id.
func (w *wsClient) reply(id string) map[string]any {
	w.t.Helper()
	return w.next(func(m map[string]any) bool { return m["correlationId"] == id })
}

// closeStatus waits for the hub to close the connection and returns the
// status code.
func (w *wsClient) closeStatus() websocket.StatusCode {
	w.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-w.msgs:
			if !ok {
				return websocket.CloseStatus(<-w.closed)
			}
		case <-timeout:
			w.t.Fatal("the hub did not close the connection within 5s")
			return 0
		}
	}
}

// wsTD is a WebSocket agent's TD: the same affordances as proxyTD plus an
// action whose input has a schema.
func wsTD(id string) map[string]any {
	form := func() []any { return []any{map[string]any{"href": "ws://hub/ws", "subprotocol": "lmosprotocol"}} }
	aff := func(extra map[string]any) map[string]any {
		a := map[string]any{"forms": form()}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	return map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Agent",
		"id":                  id,
		"title":               "WebSocket test agent",
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{
			"count": aff(nil),
			"fail":  aff(nil),
			"never": aff(nil),
			"echo":  aff(nil),
			"add": aff(map[string]any{"input": map[string]any{"type": "object", "required": []any{"a", "b"},
				"properties": map[string]any{"a": map[string]any{"type": "number"}, "b": map[string]any{"type": "number", "minimum": 0}}}}),
		},
		"properties": map[string]any{
			"temp": aff(map[string]any{"type": "number"}),
			"mode": aff(map[string]any{"type": "string", "enum": []any{"eco", "boost"}}),
		},
		"events": map[string]any{"alarm": aff(nil)},
	}
}

// wsAgent is a WebSocket agent written against the envelope: it registers
// its TD and serves requests: readProperty temp = 21.5, writeProperty
// acknowledged, count = pending, three running, completed; add sums; fail
// fails.
type wsAgent struct {
	*wsClient
	id     string
	binary bool
	mu     sync.Mutex
	got    []map[string]any
	stop   chan struct{}
}

func (h *testHub) startWSAgent(id string, binary bool) *wsAgent {
	h.t.Helper()
	return h.startWSAgentTD(id, wsTD(id), binary)
}

// startWSAgentTD is startWSAgent registering td.
func (h *testHub) startWSAgentTD(id string, td map[string]any, binary bool) *wsAgent {
	h.t.Helper()
	a := &wsAgent{wsClient: h.wsDial("lmosprotocol", nil), id: id, binary: binary, stop: make(chan struct{})}
	mid := a.send(map[string]any{"messageType": "registerThing", "thingId": id, "td": td}, binary)
	if r := a.reply(mid); r["messageType"] != "acknowledgement" {
		h.t.Fatalf("registerThing: %v", r)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-a.stop:
				return
			case m, ok := <-a.msgs:
				if !ok {
					return
				}
				a.mu.Lock()
				a.got = append(a.got, m)
				a.mu.Unlock()
				a.serve(m)
			}
		}
	}()
	h.t.Cleanup(func() { close(a.stop); <-done })
	return a
}

func (a *wsAgent) answer(req map[string]any, m map[string]any) {
	m["thingId"], m["correlationId"] = a.id, req["messageId"]
	a.send(m, a.binary)
}

func (a *wsAgent) serve(req map[string]any) {
	switch req["messageType"] {
	case "readProperty":
		a.answer(req, map[string]any{"messageType": "propertyReading", "name": req["name"], "value": 21.5})
	case "writeProperty":
		a.answer(req, map[string]any{"messageType": "acknowledgement", "message": "ok"})
	case "invokeAction":
		switch req["action"] {
		case "count":
			a.answer(req, map[string]any{"messageType": "actionStatus", "action": "count", "status": "pending"})
			for i := 1; i <= 3; i++ {
				a.answer(req, map[string]any{"messageType": "actionStatus", "action": "count", "status": "running", "output": map[string]any{"n": i}})
			}
			a.answer(req, map[string]any{"messageType": "actionStatus", "action": "count", "status": "completed", "output": map[string]any{"done": true}})
		case "add":
			in, _ := req["input"].(map[string]any)
			x, _ := in["a"].(float64)
			y, _ := in["b"].(float64)
			if a.binary { // CBOR integers
				x, y = num(in["a"]), num(in["b"])
			}
			a.answer(req, map[string]any{"messageType": "actionStatus", "action": "add", "status": "completed", "output": map[string]any{"sum": x + y}})
		case "echo":
			a.answer(req, map[string]any{"messageType": "actionStatus", "action": "echo", "status": "completed", "output": req["input"]})
		case "fail":
			a.answer(req, map[string]any{"messageType": "actionStatus", "action": "fail", "status": "failed",
				"error": map[string]any{"type": "https://agent.example/errors#jammed", "title": "Jammed", "status": 500, "detail": "the feeder is jammed"}})
		}
	}
}

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case uint64:
		return float64(x)
	case int64:
		return float64(x)
	}
	return 0
}

// requests returns the requests of type typ the agent received.
func (a *wsAgent) requests(typ string) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []map[string]any
	for _, m := range a.got {
		if m["messageType"] == typ {
			out = append(out, m)
		}
	}
	return out
}

// emit sends an event of the agent.
func (a *wsAgent) emit(event string, data any) {
	a.send(map[string]any{"messageType": "event", "thingId": a.id, "event": event, "data": data}, a.binary)
}
