package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
	"github.com/fxamacker/cbor/v2"
)

// kotlin-wot spells thingID/messageID, property for the name, data for
// values and subscribeevent in lower case; replies carry its members too.
func TestWSKotlinSpellings(t *testing.T) {
	h := startHub(t, nil)
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000d001", false)
	w := h.wsDial("webthingprotocol", nil)
	if w.c.Subprotocol() != "webthingprotocol" {
		t.Errorf("subprotocol %q", w.c.Subprotocol())
	}
	r := w.reply(w.send(map[string]any{"messageType": "readProperty", "thingID": a.id, "messageID": "k-1", "property": "temp"}, false))
	if r["messageType"] != "propertyReading" || r["property"] != "temp" || r["data"] != 21.5 || r["value"] != 21.5 || r["name"] != "temp" || r["correlationId"] != "k-1" {
		t.Errorf("propertyReading %v", r)
	}
	r = w.reply(w.send(map[string]any{"messageType": "writeProperty", "thingID": a.id, "property": "mode", "data": "eco"}, false))
	if r["messageType"] != "acknowledgement" {
		t.Errorf("write: %v", r)
	}
	if got := a.requests("writeProperty"); len(got) != 1 || got[0]["value"] != "eco" || got[0]["name"] != "mode" {
		t.Errorf("agent got writes %v", got)
	}
	if r = w.reply(w.send(map[string]any{"messageType": "subscribeevent", "thingID": a.id, "event": "alarm"}, false)); r["messageType"] != "acknowledgement" {
		t.Fatalf("subscribeevent: %v", r)
	}
	a.emit("alarm", "fire")
	if ev := w.next(func(m map[string]any) bool { return m["messageType"] == "event" }); ev["data"] != "fire" {
		t.Errorf("event %v", ev)
	}
}

// CBOR binary frames: answered in CBOR, transcoded for agents of either
// encoding; a CBOR agent (binary registerThing) gets CBOR requests.
func TestWSCBORFrames(t *testing.T) {
	h := startHub(t, nil)
	h.startAgent(agentID) // "add" takes CBOR, "addJSON" JSON
	cb := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000d101", true)
	w := h.wsDial("lmosprotocol", nil)
	for _, tc := range []struct{ thing, action string }{{agentID, "add"}, {agentID, "addJSON"}, {cb.id, "add"}} {
		w.send(map[string]any{"messageType": "invokeAction", "thingId": tc.thing, "action": tc.action, "messageId": "c-" + tc.action + tc.thing,
			"input": map[string]any{"a": 2, "b": 3.5}}, true)
		r := w.reply("c-" + tc.action + tc.thing)
		out, _ := r["output"].(map[string]any)
		if r["status"] != "completed" || num(out["sum"]) != 5.5 {
			t.Errorf("%s %s over CBOR: %v", tc.thing, tc.action, r)
		}
	}
	// A JSON consumer of the CBOR agent.
	r := w.reply(w.send(map[string]any{"messageType": "invokeAction", "thingId": cb.id, "action": "add", "input": map[string]any{"a": 1, "b": 1}}, false))
	if out, _ := r["output"].(map[string]any); r["status"] != "completed" || out["sum"] != 2.0 {
		t.Errorf("JSON consumer of a CBOR agent: %v", r)
	}
	// The CBOR agent's events reach JSON consumers.
	if r := w.reply(w.send(map[string]any{"messageType": "subscribeEvent", "thingId": cb.id, "event": "alarm"}, false)); r["messageType"] != "acknowledgement" {
		t.Fatal(r)
	}
	cb.emit("alarm", map[string]any{"level": 3})
	if ev := w.next(func(m map[string]any) bool { return m["messageType"] == "event" }); jsonText(ev["data"]) != `{"level":3}` {
		t.Errorf("event %v", ev)
	}
	// And the HTTP proxy reads the CBOR agent in JSON or CBOR.
	resp, body := h.request("GET", "/proxy/"+pathEscape(cb.id)+"/properties/temp", "", "application/cbor", nil, "")
	var f float64
	if resp.StatusCode != 200 || cbor.Unmarshal(body, &f) != nil || f != 21.5 {
		t.Errorf("proxy read: %d %x", resp.StatusCode, body)
	}
}

// The W3C trace context of a request is passed through to the agent and
// back on the replies.
func TestWSTraceContext(t *testing.T) {
	h := startHub(t, nil)
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000d201", false)
	w := h.wsDial("lmosprotocol", nil)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := w.reply(w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "add",
		"input": map[string]any{"a": 1, "b": 2}, "traceparent": tp, "tracestate": "lmos=1"}, false))
	if r["traceparent"] != tp || r["tracestate"] != "lmos=1" {
		t.Errorf("reply trace context: %v", r)
	}
	if got := a.requests("invokeAction"); len(got) != 1 || got[0]["traceparent"] != tp || got[0]["tracestate"] != "lmos=1" {
		t.Errorf("agent request: %v", got)
	}
	// To an MQTT agent it travels as user properties.
	m := h.startAgent(agentID)
	r = w.reply(w.send(map[string]any{"messageType": "invokeAction", "thingId": agentID, "action": "addJSON",
		"input": map[string]any{"a": 1, "b": 2}, "traceparent": tp}, false))
	if r["traceparent"] != tp || r["status"] != "completed" {
		t.Errorf("reply from the MQTT agent: %v", r)
	}
	if p := m.request("lmos/v1/things/" + m.tid + "/actions/addJSON"); p.Properties.User.Get("traceparent") != tp {
		t.Errorf("MQTT agent got user properties %v", p.Properties.User)
	}
}

// Observations, subscriptions to all events, unsubscribing, queryAction and
// cancelAction.
func TestWSStreamsAndActionControl(t *testing.T) {
	h := startHub(t, nil)
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000d301", false)
	w := h.wsDial("lmosprotocol", nil)
	ack := func(m map[string]any) {
		t.Helper()
		if r := w.reply(w.send(m, false)); r["messageType"] != "acknowledgement" {
			t.Fatalf("%v: %v", m["messageType"], r)
		}
	}
	ack(map[string]any{"messageType": "observeProperty", "thingId": a.id, "name": "temp"})
	a.send(map[string]any{"messageType": "propertyReading", "thingId": a.id, "name": "temp", "value": 19}, false)
	if r := w.next(func(m map[string]any) bool { return m["messageType"] == "propertyReading" }); r["value"] != 19.0 || r["name"] != "temp" {
		t.Errorf("observed %v", r)
	}
	ack(map[string]any{"messageType": "unobserveProperty", "thingId": a.id, "name": "temp"})
	ack(map[string]any{"messageType": "subscribeAllEvents", "thingId": a.id})
	topic := "lmos/v1/things/" + lmos.TopicKey(a.id) + "/events/alarm"
	waitFor(t, 2*time.Second, "subscribed", func() bool { return h.Main.Broker.Subscribers(topic) == 1 })
	a.emit("alarm", 1)
	if r := w.next(func(m map[string]any) bool { return m["messageType"] == "event" }); r["data"] != 1.0 {
		t.Errorf("event %v", r)
	}
	ack(map[string]any{"messageType": "unsubscribeAllEvents", "thingId": a.id})
	waitFor(t, 2*time.Second, "streams closed", func() bool {
		_, n := h.Main.Broker.Interactions()
		return n == 0 && h.Main.Broker.Subscribers(topic) == 0
	})

	// queryAction reports the latest invocation's status.
	w.reply(w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "add", "input": map[string]any{"a": 1, "b": 1}}, false))
	if r := w.reply(w.send(map[string]any{"messageType": "queryAction", "thingId": a.id, "action": "add"}, false)); r["status"] != "completed" {
		t.Errorf("queryAction %v", r)
	}
	expectWSError(t, w.reply(w.send(map[string]any{"messageType": "queryAction", "thingId": a.id, "action": "count"}, false)), 404, "not-found", "")
	// cancelAction ends an invocation the agent never answers.
	w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "never", "messageId": "never"}, false)
	cid := w.send(map[string]any{"messageType": "cancelAction", "thingId": a.id, "action": "never"}, false)
	got := map[string]map[string]any{}
	for len(got) < 2 { // the acknowledgement and the invocation's error, in any order
		r := w.next(nil)
		got[r["correlationId"].(string)] = r
	}
	if got[cid]["messageType"] != "acknowledgement" {
		t.Errorf("cancelAction: %v", got[cid])
	}
	expectWSError(t, got["never"], 503, "unavailable", "cancelled")
	if r := w.reply(w.send(map[string]any{"messageType": "queryAction", "thingId": a.id, "action": "never"}, false)); r["status"] != "failed" {
		t.Errorf("queryAction after cancel %v", r)
	}
}

// Closing an agent's socket makes its Thing offline everywhere: the
// registry, the proxy (503) and MQTT consumers (retained status).
func TestWSAgentCloseIsOffline(t *testing.T) {
	h := startHub(t, nil)
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000d401", false)
	mc := h.mqttDial(nil)
	mc.sub("lmos/v1/things/" + lmos.TopicKey(a.id) + "/status")
	if p := mc.next("lmos/v1/things/" + lmos.TopicKey(a.id) + "/status"); string(p.Payload) != "online" {
		t.Errorf("retained status %q", p.Payload)
	}
	a.c.Close(websocket.StatusNormalClosure, "bye")
	waitFor(t, 2*time.Second, "offline", func() bool { s, via := h.presenceOf(a.id); return s == "offline" && via == "ws" })
	if p := mc.next("lmos/v1/things/" + lmos.TopicKey(a.id) + "/status"); string(p.Payload) != "offline" {
		t.Errorf("status %q", p.Payload)
	}
	resp, body := h.request("POST", actionPath(a.id, "add"), "application/json", "", []byte(`{"a":1,"b":2}`), testToken)
	expectProblem(t, resp, body, http.StatusServiceUnavailable, "offline")
	// The agent comes back on a new connection and is reached again.
	b := h.startWSAgent(a.id, false)
	w := h.wsDial("lmosprotocol", nil)
	if r := w.reply(w.send(map[string]any{"messageType": "readProperty", "thingId": b.id, "name": "temp"}, false)); r["value"] != 21.5 {
		t.Errorf("after re-registration: %v", r)
	}
}

// An MQTT 3.1.1 consumer's invocation of a WebSocket agent is
// fire-and-forget, as for MQTT agents.
func TestWSAgentFromMQTT311(t *testing.T) {
	h := startHub(t, nil)
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000d501", false)
	mc := h.mqttDial(&paho.Connect{CleanStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := mc.C.Publish(ctx, &paho.Publish{Topic: "lmos/v1/things/" + lmos.TopicKey(a.id) + "/actions/add", QoS: 1, Payload: []byte(`{"a":1,"b":2}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "agent invoked", func() bool { return len(a.requests("invokeAction")) == 1 })
	if in := a.requests("invokeAction")[0]["input"]; jsonText(in) != `{"a":1,"b":2}` {
		t.Errorf("input %v", in)
	}
}

// The directory TD links the WebSocket gateway (PROTOCOL §3.2), and the
// link works.
func TestWSDirectoryLink(t *testing.T) {
	h := startHub(t, nil)
	var td struct {
		Links []map[string]any `json:"links"`
	}
	h.getJSON("/.well-known/wot", http.StatusOK, &td)
	var href string
	for _, l := range td.Links {
		if l["rel"] == "lmos:websocket" && l["subprotocol"] == "lmosprotocol" {
			href, _ = l["href"].(string)
		}
	}
	if href != "ws"+strings.TrimPrefix(h.URL, "http")+"/ws" {
		t.Fatalf("lmos:websocket link %q in %v", href, td.Links)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, href, &websocket.DialOptions{Subprotocols: []string{"lmosprotocol"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close(websocket.StatusNormalClosure, "")
}
