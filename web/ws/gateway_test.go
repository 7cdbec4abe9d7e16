package ws

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/regtest"
)

// gateway is the WebSocket transport alone over a real registry in a temp
// dir and a real Router that routes WebSocket Things back to it, served by
// httptest; no broker (observations of agents need one, and the transport
// suite covers them with the hub whole).
type gateway struct {
	t   *testing.T
	g   *Transport
	reg *hub.Registry
	url string // ws://…
}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	rt := hub.NewRouter(reg)
	g := New(Config{Registry: reg, Router: rt, ProxyTimeout: 10 * time.Second})
	rt.Handle(hub.SourceWS, g)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.ServeWS(w, r, r.RemoteAddr, hub.AnonymousFrom(r.RemoteAddr))
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { g.CloseAll(2 * time.Second) })
	return &gateway{t: t, g: g, reg: reg, url: "ws" + strings.TrimPrefix(ts.URL, "http")}
}

// pending counts the hub's requests to agents that wait for a reply, over
// every connection.
func (gw *gateway) pending() int {
	gw.g.mu.Lock()
	conns := make([]*wsConn, 0, len(gw.g.open))
	for c := range gw.g.open {
		conns = append(conns, c)
	}
	gw.g.mu.Unlock()
	n := 0
	for _, c := range conns {
		c.mu.Lock()
		n += len(c.pending)
		c.mu.Unlock()
	}
	return n
}

// until fails unless cond holds within 5 s (a request's bookkeeping ends
// on the goroutine of its delivery, after the reply went out).
func (gw *gateway) until(what string, cond func() bool) {
	gw.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			gw.t.Fatalf("%s: not within 5s", what)
		}
	}
}

// peer is a coder/websocket client speaking JSON envelopes: an agent, a
// consumer or both.
type peer struct {
	t  *testing.T
	c  *websocket.Conn
	in chan map[string]any
	// closed receives the read error once the connection ends.
	closed chan error
}

func (gw *gateway) dial(header http.Header) *peer {
	gw.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, gw.url, &websocket.DialOptions{Subprotocols: []string{"lmosprotocol"}, HTTPHeader: header})
	if err != nil {
		gw.t.Fatalf("dial: %v", err)
	}
	p := &peer{t: gw.t, c: c, in: make(chan map[string]any, 64), closed: make(chan error, 1)}
	go func() {
		for {
			typ, b, err := c.Read(context.Background())
			if err != nil {
				p.closed <- err
				return
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); typ != websocket.MessageText || err != nil {
				gw.t.Errorf("undecodable frame from the hub (%v): %q", err, b)
				continue
			}
			p.in <- m
		}
	}()
	gw.t.Cleanup(func() { _ = c.CloseNow() })
	return p
}

// send writes m (with a fresh messageId unless it has one) and returns
// its messageId.
func (p *peer) send(m map[string]any) string {
	p.t.Helper()
	if _, ok := m["messageId"]; !ok {
		m["messageId"] = uuid.NewString()
	}
	b, err := json.Marshal(m)
	if err != nil {
		p.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.c.Write(ctx, websocket.MessageText, b); err != nil {
		p.t.Fatalf("write: %v", err)
	}
	return m["messageId"].(string)
}

// next is the next message the hub sent; it must be of type typ and
// answer messageId correlation (either unchecked when "").
func (p *peer) next(typ, correlation string) map[string]any {
	p.t.Helper()
	if typ == "" {
		typ = "message"
	}
	select {
	case m := <-p.in:
		if typ != "message" && m["messageType"] != typ || correlation != "" && m["correlationId"] != correlation {
			p.t.Fatalf("got %v, want a %s answering %q", m, typ, correlation)
		}
		return m
	case err := <-p.closed:
		p.t.Fatalf("connection ended (%v) while waiting for a %s", err, typ)
	case <-time.After(10 * time.Second):
		p.t.Fatalf("no %s within 10s", typ)
	}
	return nil
}

// problem fails unless m is an error message of status with type …code.
func (p *peer) problem(m map[string]any, status int, code string) {
	p.t.Helper()
	if m["status"] != float64(status) || m["type"] != lmos.ErrorTypeBase+code || m["title"] == "" || m["instance"] != "/ws" {
		p.t.Fatalf("error %v, want status %d and type …%s", m, status, code)
	}
}

const agentThingID = "urn:example:ws-lamp"

func lampDescription(id string) map[string]any {
	form := []any{map[string]any{"href": "ws://hub/ws"}}
	return map[string]any{
		"@context":            "https://www.w3.org/2022/wot/td/v1.1",
		"id":                  id,
		"title":               "WS lamp",
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"properties":          map[string]any{"on": map[string]any{"type": "boolean", "forms": form}},
		"actions":             map[string]any{"dim": map[string]any{"input": map[string]any{"type": "integer"}, "forms": form}},
	}
}

// agent dials and registers the lamp; the test answers its requests.
func (gw *gateway) agent() *peer {
	gw.t.Helper()
	a := gw.dial(nil)
	id := a.send(map[string]any{"messageType": "registerThing", "td": lampDescription(agentThingID)})
	if ack := a.next("acknowledgement", id); ack["message"] != "registered" {
		gw.t.Fatalf("registerThing answered %v", ack)
	}
	th, err := gw.reg.Get(agentThingID)
	if err != nil || th.Meta.Presence.Status != hub.PresenceOnline || th.Meta.Presence.Via != hub.SourceWS {
		gw.t.Fatalf("after registerThing: %+v, %v", th.Meta, err)
	}
	return a
}

// invoke has consumer c invoke dim and returns its messageId and the
// request the agent a got for it.
func invoke(c, a *peer, input int) (string, map[string]any) {
	c.t.Helper()
	id := c.send(map[string]any{"messageType": "invokeAction", "thingId": agentThingID, "action": "dim", "input": input})
	req := a.next("invokeAction", "")
	if req["action"] != "dim" || req["input"] != float64(input) || req["thingId"] != agentThingID || req["messageId"] == "" {
		c.t.Fatalf("the agent got %v", req)
	}
	return id, req
}

func TestConsumerInteractsWithAnAgentThroughTheGateway(t *testing.T) {
	gw := newGateway(t)
	a, c := gw.agent(), gw.dial(nil)

	id, req := invoke(c, a, 5)
	if n := gw.pending(); n != 1 {
		t.Fatalf("%d requests pending while the agent works, want 1", n)
	}
	reply := func(status string, extra ...any) {
		m := map[string]any{"messageType": "actionStatus", "thingId": agentThingID, "correlationId": req["messageId"], "action": "dim", "status": status}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		a.send(m)
	}
	reply("running")
	if m := c.next("actionStatus", id); m["status"] != "running" || m["action"] != "dim" {
		t.Fatalf("consumer got %v", m)
	}
	reply("completed", "output", 10)
	if m := c.next("actionStatus", id); m["status"] != "completed" || m["output"] != 10.0 {
		t.Fatalf("consumer got %v", m)
	}
	gw.until("the request's bookkeeping ends", func() bool { return gw.pending() == 0 })
	if m := c.next("actionStatus", c.send(map[string]any{"messageType": "queryAction", "thingId": agentThingID, "action": "dim"})); m["status"] != "completed" {
		t.Fatalf("queryAction after completion: %v", m)
	}

	// A property read: the agent's value reaches the consumer.
	id = c.send(map[string]any{"messageType": "readProperty", "thingId": agentThingID, "name": "on"})
	req = a.next("readProperty", "")
	a.send(map[string]any{"messageType": "propertyReading", "thingId": agentThingID, "correlationId": req["messageId"], "name": "on", "value": true})
	if m := c.next("propertyReading", id); m["value"] != true || m["name"] != "on" {
		t.Fatalf("consumer got %v", m)
	}
	gw.until("the read's bookkeeping ends", func() bool { return gw.pending() == 0 })
}

func TestCancelAndDisconnectEndTheAgentsRequest(t *testing.T) {
	gw := newGateway(t)
	a := gw.agent()

	// cancelAction: acknowledged, the request to the agent is forgotten,
	// and a late reply of the agent is dropped.
	c := gw.dial(nil)
	invokeID, req := invoke(c, a, 1)
	cancelID := c.send(map[string]any{"messageType": "cancelAction", "thingId": agentThingID, "action": "dim"})
	// The acknowledgement and the invocation's end (503: cancelled) come
	// from different goroutines, in either order.
	for range 2 {
		m := c.next("", "")
		switch m["correlationId"] {
		case cancelID:
			if m["messageType"] != "acknowledgement" || m["message"] != "cancelled" {
				t.Fatalf("cancelAction answered %v", m)
			}
		case invokeID:
			if m["messageType"] != "error" {
				t.Fatalf("the cancelled invocation ended with %v", m)
			}
			c.problem(m, http.StatusServiceUnavailable, hub.EUNAVAILABLE)
		default:
			t.Fatalf("unexpected %v", m)
		}
	}
	gw.until("cancelAction ends the request", func() bool { return gw.pending() == 0 })
	a.send(map[string]any{"messageType": "actionStatus", "thingId": agentThingID, "correlationId": req["messageId"], "action": "dim", "status": "completed"})
	if m := c.next("actionStatus", c.send(map[string]any{"messageType": "queryAction", "thingId": agentThingID, "action": "dim"})); m["status"] != "failed" {
		t.Fatalf("queryAction after cancelAction: %v", m)
	}

	// The consumer goes: its request goes too.
	c2 := gw.dial(nil)
	invoke(c2, a, 2)
	_ = c2.c.Close(websocket.StatusNormalClosure, "")
	gw.until("a gone consumer's request ends", func() bool { return gw.pending() == 0 })

	// The agent goes: the consumer waiting for it gets 503 and the Thing
	// is offline.
	c3 := gw.dial(nil)
	id, _ := invoke(c3, a, 3)
	_ = a.c.Close(websocket.StatusNormalClosure, "")
	c3.problem(c3.next("error", id), http.StatusServiceUnavailable, hub.EUNAVAILABLE)
	gw.until("the request of a gone agent ends", func() bool { return gw.pending() == 0 })
	gw.until("the Thing goes offline", func() bool {
		th, err := gw.reg.Get(agentThingID)
		return err == nil && th.Meta.Presence.Status == hub.PresenceOffline
	})
	// Now nobody reaches it.
	c3.problem(c3.next("error", c3.send(map[string]any{"messageType": "readProperty", "thingId": agentThingID, "name": "on"})),
		http.StatusServiceUnavailable, hub.EUNAVAILABLE)
}

func TestAnotherConnectionCannotTakeARegisteredThing(t *testing.T) {
	gw := newGateway(t)
	gw.agent()
	other := gw.dial(nil)
	desc := lampDescription(agentThingID)
	desc["title"] = "impostor"
	id := other.send(map[string]any{"messageType": "registerThing", "td": desc})
	other.problem(other.next("error", id), http.StatusConflict, hub.ECONFLICT)
	th, err := gw.reg.Get(agentThingID)
	if err != nil || th.Summary.Title != "WS lamp" {
		t.Fatalf("the refused registration changed the Thing: %v %v", th.Summary, err)
	}
}

func TestEnvelopeRefusals(t *testing.T) {
	gw := newGateway(t)
	c := gw.dial(nil)
	m := c.next("error", c.send(map[string]any{"messageType": "dance"}))
	if m["status"] != 400.0 || m["type"] != lmos.ErrorTypeBase+"unsupported-message-type" {
		t.Fatalf("unknown messageType: %v", m)
	}
	m = c.next("error", c.send(map[string]any{"messageType": "invokeAction", "action": "dim"}))
	c.problem(m, http.StatusBadRequest, hub.EINVALID)
	if v, _ := m["validationErrors"].([]any); len(v) != 1 || v[0].(map[string]any)["field"] != "/thingId" {
		t.Fatalf("validationErrors %v", m["validationErrors"])
	}
	c.problem(c.next("error", c.send(map[string]any{"messageType": "readProperty", "thingId": "urn:example:nobody", "name": "on"})),
		http.StatusNotFound, hub.ENOTFOUND)
	c.problem(c.next("error", c.send(map[string]any{"messageType": "registerThing", "td": "not an object"})),
		http.StatusBadRequest, hub.EINVALID)
	if n := gw.reg.Count(); n != 0 {
		t.Fatalf("%d Things registered by refused messages", n)
	}

	// A frame that is no envelope at all closes the connection (1003),
	// also after the hub has written on it: the close frame must not be
	// lost to the end of the connection's context.
	c.problem(c.next("error", c.send(map[string]any{"messageType": "readProperty", "thingId": "urn:example:nobody", "name": "on"})),
		http.StatusNotFound, hub.ENOTFOUND)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageText, []byte("[1]")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.closed:
		if websocket.CloseStatus(err) != websocket.StatusUnsupportedData {
			t.Fatalf("closed with %v, want 1003", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection stayed open after an unparseable frame")
	}
}

func TestOriginCheck(t *testing.T) {
	gw := newGateway(t)
	host := strings.TrimPrefix(gw.url, "ws://")
	gw.dial(http.Header{"Origin": {"http://" + host}}) // the hub's own host
	gw.dial(nil)                                       // not a browser
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, gw.url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.example"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign Origin: %v, %v; want 403", resp, err)
	}
}
