package e2e

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
)

// expectWSError checks an error message: its problem members, the status
// and type code, and a detail fragment.
func expectWSError(t *testing.T, m map[string]any, status int, code, detail string) {
	t.Helper()
	if m["messageType"] != "error" {
		t.Fatalf("want an error message, got %v", m)
	}
	if st, _ := m["status"].(float64); int(st) != status {
		t.Errorf("error status %v, want %d: %v", m["status"], status, m)
	}
	if m["type"] != lmos.ErrorTypeBase+code || m["title"] != http.StatusText(status) || m["instance"] != "/ws" {
		t.Errorf("error type/title/instance: %v, want code %s", m, code)
	}
	if d, _ := m["detail"].(string); !strings.Contains(d, detail) {
		t.Errorf("error detail %q lacks %q", d, detail)
	}
}

// Frames that are not envelopes close the connection: 1003 for what does
// not parse, 1009 for a frame over 1 MiB (PROTOCOL §5).
func TestWSBadFramesClose(t *testing.T) {
	h := startHub(t, nil)
	before := h.snapshot()
	for name, f := range map[string]struct {
		typ  websocket.MessageType
		data []byte
	}{
		"not JSON":      {websocket.MessageText, []byte("hello")},
		"JSON array":    {websocket.MessageText, []byte(`[1,2]`)},
		"trailing data": {websocket.MessageText, []byte(`{"messageType":"readProperty"} {}`)},
		"bad CBOR":      {websocket.MessageBinary, []byte{0xbf, 0x61}},
		"CBOR text":     {websocket.MessageBinary, []byte{0x63, 'a', 'b', 'c'}},
		"CBOR tag":      {websocket.MessageBinary, []byte{0xc1, 0x1a, 0, 0, 0, 1}},
	} {
		t.Run(name, func(t *testing.T) {
			w := h.wsDial("lmosprotocol", nil)
			w.raw(f.typ, f.data)
			if got := w.closeStatus(); got != websocket.StatusUnsupportedData {
				t.Errorf("close %v, want 1003", got)
			}
		})
	}
	t.Run("too large", func(t *testing.T) {
		w := h.wsDial("lmosprotocol", nil)
		big := `{"messageType":"readProperty","pad":"` + strings.Repeat("x", 1<<20) + `"}`
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.c.Write(ctx, websocket.MessageText, []byte(big))
		if got := w.closeStatus(); got != websocket.StatusMessageTooBig {
			t.Errorf("close %v, want 1009", got)
		}
	})
	if after := h.snapshot(); after != before {
		t.Errorf("bad frames changed the hub:\n%s\n%s", before, after)
	}
}

func TestWSErrorMessages(t *testing.T) {
	h := startHub(t, nil)
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000c001", false)
	w := h.wsDial("lmosprotocol", nil)
	before := h.snapshot()

	// Unknown messageType: an error, the connection stays.
	id := w.send(map[string]any{"messageType": "danceAction", "thingId": a.id}, false)
	expectWSError(t, w.reply(id), 400, "unsupported-message-type", "danceaction")
	// No messageType, a member of the wrong type.
	id = w.send(map[string]any{"thingId": a.id}, false)
	expectWSError(t, w.reply(id), 400, "invalid", "invalid members")
	id = w.send(map[string]any{"messageType": "readProperty", "thingId": 7, "name": "temp"}, false)
	expectWSError(t, w.reply(id), 400, "invalid", "invalid members")
	// Unknown Thing and affordance: 404.
	id = w.send(map[string]any{"messageType": "readProperty", "thingId": "urn:uuid:00000000-0000-4000-8000-000000000000", "name": "temp"}, false)
	expectWSError(t, w.reply(id), 404, "not-found", "")
	id = w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "nope"}, false)
	expectWSError(t, w.reply(id), 404, "not-found", "nope")
	id = w.send(map[string]any{"messageType": "subscribeEvent", "thingId": a.id, "event": "nope"}, false)
	expectWSError(t, w.reply(id), 404, "not-found", "nope")
	// Input that violates the action's schema: 400, the agent is not called.
	for _, input := range []any{
		map[string]any{"a": 1},
		map[string]any{"a": "x", "b": 1},
		map[string]any{"a": 1, "b": -1},
		"text",
	} {
		id = w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "add", "input": input}, false)
		r := w.reply(id)
		expectWSError(t, r, 400, "invalid", "data schema")
		if ve, _ := r["validationErrors"].([]any); len(ve) == 0 {
			t.Errorf("no validationErrors for %v: %v", input, r)
		}
	}
	id = w.send(map[string]any{"messageType": "writeProperty", "thingId": a.id, "name": "mode", "value": "turbo"}, false)
	expectWSError(t, w.reply(id), 400, "invalid", "data schema")
	// A valid input passes (the agent is reached exactly once).
	id = w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "add", "input": map[string]any{"a": 1, "b": 2}}, false)
	if r := w.reply(id); r["status"] != "completed" || jsonText(r["output"]) != `{"sum":3}` {
		t.Fatalf("add: %v", r)
	}
	if n := len(a.requests("invokeAction")); n != 1 {
		t.Errorf("the agent got %d invocations, want 1 (the valid one)", n)
	}
	if n := len(a.requests("writeProperty")); n != 0 {
		t.Errorf("the agent got %d writes, want 0", n)
	}
	// A failure of the agent: actionStatus failed with its problem (502).
	id = w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "fail"}, false)
	r := w.reply(id)
	p, _ := r["error"].(map[string]any)
	if r["status"] != "failed" || p["type"] != "https://agent.example/errors#jammed" || p["status"] != 502.0 || p["detail"] != "the feeder is jammed" {
		t.Errorf("failed action: %v", r)
	}
	// Values only the agent of a Thing may emit.
	id = w.send(map[string]any{"messageType": "event", "thingId": a.id, "event": "alarm", "data": 1}, false)
	expectWSError(t, w.reply(id), 403, "forbidden", "only the agent")
	if after := h.snapshot(); after != before {
		t.Errorf("rejections changed the hub:\n%s\n%s", before, after)
	}
}

// registerThing is refused for an id bound to another connection (409), to
// an MQTT agent's credential or registered over HTTP (403), under join
// mode closed (403), and for an invalid TD (400); nothing changes.
func TestWSRegisterRefusals(t *testing.T) {
	h := startHub(t, nil)
	first := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000c101", false)
	h.startAgent(agentID) // joined over MQTT: holds a credential
	httpID := "urn:uuid:5b0d6c1e-0000-4000-8000-00000000c103"
	h.put(httpID, makeTD(httpID, "over HTTP"))
	before := h.snapshot()

	w := h.wsDial("lmosprotocol", nil)
	register := func(td map[string]any) map[string]any {
		return w.reply(w.send(map[string]any{"messageType": "registerThing", "td": td}, false))
	}
	expectWSError(t, register(wsTD(first.id)), 409, "conflict", "another WebSocket connection")
	expectWSError(t, register(wsTD(agentID)), 403, "forbidden", "MQTT")
	expectWSError(t, register(wsTD(httpID)), 403, "forbidden", "other means")
	bad := wsTD("urn:uuid:5b0d6c1e-0000-4000-8000-00000000c104")
	delete(bad, "securityDefinitions")
	r := register(bad)
	expectWSError(t, r, 400, "invalid", "")
	if ve, _ := r["validationErrors"].([]any); len(ve) == 0 {
		t.Errorf("no validationErrors: %v", r)
	}
	noID := wsTD("x")
	delete(noID, "id")
	expectWSError(t, register(noID), 400, "invalid", "needs an id")
	expectWSError(t, w.reply(w.send(map[string]any{"messageType": "registerThing", "td": "nope"}, false)), 400, "invalid", "object")
	// The first agent is still the one reached.
	if s, via := h.presenceOf(first.id); s != "online" || via != "ws" {
		t.Errorf("first agent presence %s via %s", s, via)
	}
	if after := h.snapshot(); after != before {
		t.Errorf("refused registrations changed the hub:\n%s\n%s", before, after)
	}

	closed := startHub(t, func(c *Config) { c.Join.Mode = "closed" })
	cw := closed.wsDial("lmosprotocol", nil)
	expectWSError(t, cw.reply(cw.send(map[string]any{"messageType": "registerThing", "td": wsTD("urn:uuid:5b0d6c1e-0000-4000-8000-00000000c105")}, false)),
		403, "forbidden", "closed")
	if n := closed.Main.Registry.Count(); n != 0 {
		t.Errorf("join mode closed stored %d Things", n)
	}
}

// Cross-site WebSocket connections are refused on /mqtt and /ws: the Origin
// must be the hub's host or one of http.allowedOrigins.
func TestWSOriginCheck(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.AllowedOrigins = []string{"https://dash.example:8443"} })
	foreign := http.Header{"Origin": {"http://evil.example"}}
	for _, path := range []string{"/mqtt", "/ws"} {
		sub := "mqtt"
		if path == "/ws" {
			sub = "lmosprotocol"
		}
		if _, err := h.wsDialErr(path, sub, foreign); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
			t.Errorf("%s from a foreign origin: %v, want 403", path, err)
		}
		for _, origin := range []string{h.URL, "https://dash.example:8443"} {
			c, err := h.wsDialErr(path, sub, http.Header{"Origin": {origin}})
			if err != nil {
				t.Errorf("%s from %s: %v", path, origin, err)
				continue
			}
			c.Close(websocket.StatusNormalClosure, "")
		}
	}
	if n := h.Main.Broker.Clients(); n > 1 {
		t.Errorf("broker has %d clients after refused connections", n)
	}
}

// /mqtt is the same broker with the same ACL, for browsers.
func TestMQTTOverWebSocket(t *testing.T) {
	h := startHub(t, nil)
	a := h.startAgent(agentID)
	c, err := h.wsDialErr("/mqtt", "mqtt", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != "mqtt" {
		t.Fatalf("subprotocol %q", c.Subprotocol())
	}
	nc := websocket.NetConn(context.Background(), c, websocket.MessageBinary)
	msgs := make(chan *paho.Publish, 16)
	pc := paho.NewClient(paho.ClientConfig{Conn: nc, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { msgs <- pr.Packet; return true, nil }}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// KeepAlive 0: paho's pinger writes its first PINGREQ at once, and paho
	// writes a packet in several Write calls, which over a WebSocket
	// net.Conn (one message per Write) interleave with another goroutine's.
	// Browser clients write whole packets.
	if _, err := pc.Connect(ctx, &paho.Connect{CleanStart: true, ClientID: "browser-1"}); err != nil {
		t.Fatal(err)
	}
	defer pc.Disconnect(&paho.Disconnect{})
	// Requests and replies as over TCP: invoke the MQTT agent.
	if _, err := pc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "lmos/v1/clients/browser-1/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	// The ACL applies: a filter over every Thing's subtree is refused.
	sa, err := pc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "lmos/v1/#", QoS: 1}}})
	if sa == nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 0x87 {
		t.Errorf("lmos/v1/# suback %+v (%v)", sa, err)
	}
	if _, err := pc.Publish(ctx, &paho.Publish{Topic: "lmos/v1/things/" + a.tid + "/actions/addJSON", QoS: 1, Payload: []byte(`{"a":2,"b":3}`),
		Properties: &paho.PublishProperties{ResponseTopic: "lmos/v1/clients/browser-1/r", CorrelationData: []byte{1}, ContentType: "application/json"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-msgs:
		if !bytes.Contains(p.Payload, []byte(`"sum":5`)) {
			t.Errorf("reply %s", p.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reply over /mqtt")
	}
	// A client that does not offer the mqtt subprotocol is closed.
	c2, err := h.wsDialErr("/mqtt", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c2.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("no subprotocol: %v, want close 1008", err)
	}
}

// TestCloseWithMQTTOverWebSocketClient: the hub stops in time with a client
// still connected over /mqtt, and that client's connection ends.
func TestCloseWithMQTTOverWebSocketClient(t *testing.T) {
	h := startHub(t, nil)
	c, err := h.wsDialErr("/mqtt", "mqtt", nil)
	if err != nil {
		t.Fatal(err)
	}
	nc := websocket.NetConn(context.Background(), c, websocket.MessageBinary)
	pc := paho.NewClient(paho.ClientConfig{Conn: nc})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pc.Connect(ctx, &paho.Connect{CleanStart: true, ClientID: "browser-2"}); err != nil {
		t.Fatal(err)
	}
	h.Close() // fails the test if the hub cannot stop within 5 s
	select {
	case <-pc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the /mqtt client is still connected after the hub closed")
	}
}
