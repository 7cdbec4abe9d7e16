package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
	"github.com/fxamacker/cbor/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// proxyTD is an agent's TD: actions whose forms say JSON or CBOR, a
// property and an event.
func proxyTD(id string) []byte {
	form := func(ct, topic string) []any {
		return []any{map[string]any{"href": "mqtt://hub/lmos/v1/things/" + lmos.TopicKey(id) + "/" + topic, "contentType": ct}}
	}
	action := func(name, ct string) map[string]any { return map[string]any{"forms": form(ct, "actions/"+name)} }
	b, _ := json.Marshal(map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Agent",
		"id":                  id,
		"title":               "Proxy test agent",
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{
			"add":     action("add", "application/cbor"),
			"addJSON": action("addJSON", "application/json"),
			"count":   action("count", "application/json"),
			"fail":    action("fail", "application/json"),
			"never":   action("never", "application/json"),
			// order's input uses the TD 1.1 terms the hub used to ignore:
			// pattern, multipleOf and tuple items.
			"order": func() map[string]any {
				a := action("order", "application/json")
				a["input"] = map[string]any{"type": "object", "properties": map[string]any{
					"code": map[string]any{"type": "string", "pattern": "^[0-9]+$"},
					"qty":  map[string]any{"type": "integer", "multipleOf": 5},
					"at":   map[string]any{"type": "array", "items": []any{map[string]any{"type": "number"}, map[string]any{"type": "number"}}},
				}}
				return a
			}(),
		},
		"properties": map[string]any{
			"temp":  map[string]any{"type": "number", "forms": form("application/json", "properties/temp")},
			"power": map[string]any{"type": "boolean", "forms": form("application/cbor", "properties/power")},
			"mode":  map[string]any{"type": "string", "forms": form("application/json", "properties/mode")},
			"level": map[string]any{"type": "number", "readOnly": true, "forms": form("application/json", "properties/level")},
			"pin":   map[string]any{"type": "string", "writeOnly": true, "forms": form("application/json", "properties/pin")},
		},
		"events": map[string]any{"alarm": map[string]any{"forms": form("application/json", "events/alarm")}},
	})
	return b
}

// proxyAgent is an MQTT 5 agent written with paho: it joins, goes online,
// serves its actions per PROTOCOL §4.3 and records what it receives.
type proxyAgent struct {
	t    *testing.T
	id   string
	tid  string
	mc   *mqttClient
	got  chan *paho.Publish // every request it received
	stop chan struct{}
}

func (h *testHub) startAgent(id string) *proxyAgent {
	h.t.Helper()
	creds := h.mqttDial(nil).join(id, proxyTD(id))
	tid := lmos.TopicKey(id)
	mc := h.mqttDial(&paho.Connect{CleanStart: true, Username: creds.Username, UsernameFlag: true,
		Password: []byte(creds.Password), PasswordFlag: true,
		WillMessage: &paho.WillMessage{Topic: "lmos/v1/things/" + tid + "/status", Payload: []byte("offline"), Retain: true, QoS: 1}})
	a := &proxyAgent{t: h.t, id: id, tid: tid, mc: mc, got: make(chan *paho.Publish, 64), stop: make(chan struct{})}
	mc.sub("lmos/v1/things/" + tid + "/actions/+")
	mc.sub("lmos/v1/things/" + tid + "/properties/+/set")
	mc.pub("lmos/v1/things/"+tid+"/status", []byte("online"), true)
	waitFor(h.t, 2*time.Second, "agent online", func() bool { s, _ := h.presenceOf(id); return s == "online" })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-a.stop:
				return
			case p := <-mc.Msgs:
				a.got <- p
				a.serve(p)
			}
		}
	}()
	h.t.Cleanup(func() { close(a.stop); <-done })
	return a
}

// reply publishes one result of request p.
func (a *proxyAgent) reply(p *paho.Publish, status, contentType string, payload []byte) {
	if p.Properties == nil || p.Properties.ResponseTopic == "" {
		return // fire-and-forget (MQTT 3.1.1 consumers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	props := &paho.PublishProperties{CorrelationData: p.Properties.CorrelationData, ContentType: contentType,
		User: paho.UserProperties{{Key: "lmos-status", Value: status}}}
	if _, err := a.mc.C.Publish(ctx, &paho.Publish{Topic: p.Properties.ResponseTopic, Payload: payload, QoS: 1, Properties: props}); err != nil {
		a.t.Errorf("agent reply: %v", err)
	}
}

// serve answers the actions: add sums {a, b} in CBOR, addJSON in JSON
// without a Content Type (the form says JSON), count reports three running
// results, fail fails with a problem, never never answers.
func (a *proxyAgent) serve(p *paho.Publish) {
	action, ok := strings.CutPrefix(p.Topic, "lmos/v1/things/"+a.tid+"/actions/")
	if !ok {
		return
	}
	var in struct{ A, B float64 }
	ct := ""
	if p.Properties != nil {
		ct = p.Properties.ContentType
	}
	switch action {
	case "order":
		a.reply(p, "completed", "application/json", p.Payload)
	case "add":
		if ct != "application/cbor" || cbor.Unmarshal(p.Payload, &in) != nil {
			a.reply(p, "failed", "application/json", []byte(`{"title":"bad input","detail":"want CBOR"}`))
			return
		}
		out, _ := cbor.Marshal(map[string]any{"sum": in.A + in.B})
		a.reply(p, "completed", "application/cbor", out)
	case "addJSON":
		if ct != "application/json" || json.Unmarshal(p.Payload, &in) != nil {
			a.reply(p, "failed", "application/json", []byte(`{"title":"bad input","detail":"want JSON"}`))
			return
		}
		out, _ := json.Marshal(map[string]any{"sum": in.A + in.B})
		a.reply(p, "completed", "", out)
	case "count":
		a.reply(p, "pending", "application/json", nil)
		for i := 1; i <= 3; i++ {
			out, _ := json.Marshal(map[string]int{"n": i})
			a.reply(p, "running", "application/json", out)
		}
		a.reply(p, "completed", "application/json", []byte(`{"done": true}`))
	case "fail":
		a.reply(p, "failed", "application/json",
			[]byte(`{"type":"https://agent.example/errors#jammed","title":"Jammed","status":500,"detail":"the feeder is jammed"}`))
	}
}

// request waits for the next request the agent received on topic.
func (a *proxyAgent) request(topic string) *paho.Publish {
	a.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case p := <-a.got:
			if p.Topic == topic {
				return p
			}
		case <-timeout:
			a.t.Fatalf("agent got nothing on %s within 5s", topic)
			return nil
		}
	}
}

func actionPath(id, name string) string { return "/proxy/" + pathEscape(id) + "/actions/" + name }

const agentID = "urn:uuid:5b0d6c1e-0000-4000-8000-00000000a9e1"

func TestProxyInvokeTranscodes(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Access.Anonymous = "read" }) // writes and invocations need a token
	a := h.startAgent(agentID)

	// JSON consumer, CBOR agent.
	resp, body := h.request("POST", actionPath(agentID, "add"), "application/json", "application/json", []byte(`{"a": 1, "b": 2}`), testToken)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || strings.TrimSpace(string(body)) != `{"sum":3}` {
		t.Fatalf("JSON→CBOR agent: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	// The reply inbox names the hub: lmos/v1/clients/inline/{start of the hub id}/r/{uuid}.
	inbox := "lmos/v1/clients/inline/" + strings.ReplaceAll(h.Main.DB.HubID(), "-", "")[:12] + "/r/"
	if p := a.request("lmos/v1/things/" + a.tid + "/actions/add"); p.Properties.ContentType != "application/cbor" ||
		!strings.HasPrefix(p.Properties.ResponseTopic, inbox) || len(p.Properties.CorrelationData) == 0 ||
		h.Main.Broker.ReplyInbox() != inbox {
		t.Fatalf("request properties %+v, inbox %q", p.Properties, h.Main.Broker.ReplyInbox())
	}

	// CBOR consumer, JSON agent that names no Content Type on its reply.
	in, _ := cbor.Marshal(map[string]any{"a": 40, "b": 2.5})
	resp, body = h.request("POST", actionPath(agentID, "addJSON"), "application/cbor", "application/cbor", in, testToken)
	var out map[string]any
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/cbor" || cbor.Unmarshal(body, &out) != nil || out["sum"] != 42.5 {
		t.Fatalf("CBOR→JSON agent: %d %q %x (%v)", resp.StatusCode, resp.Header.Get("Content-Type"), body, out)
	}
	if p := a.request("lmos/v1/things/" + a.tid + "/actions/addJSON"); !json.Valid(p.Payload) || p.Properties.ContentType != "application/json" {
		t.Fatalf("agent got %q as %q", p.Payload, p.Properties.ContentType)
	}

	// CBOR in, JSON out.
	resp, body = h.request("POST", actionPath(agentID, "add"), "application/cbor", "", in, testToken)
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"sum":42.5}` {
		t.Fatalf("CBOR in, JSON out: %d %s", resp.StatusCode, body)
	}

	// Invalid input is refused before it reaches the agent.
	resp, body = h.request("POST", actionPath(agentID, "add"), "application/json", "", []byte(`{"a":`), testToken)
	expectProblem(t, resp, body, 400, "invalid JSON")
	resp, body = h.request("POST", actionPath(agentID, "add"), "application/cbor", "", []byte{0xbf}, testToken)
	expectProblem(t, resp, body, 400, "invalid CBOR")
	resp, body = h.request("POST", actionPath(agentID, "add"), "text/plain", "", []byte(`1`), testToken)
	expectProblem(t, resp, body, 415, "Content-Type")
	// With access.anonymous: read, an invocation needs a token (operate).
	resp, body = h.request("POST", actionPath(agentID, "add"), "application/json", "", []byte(`{}`), "")
	expectProblem(t, resp, body, 401, "")
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
}

// readSSE parses a whole event stream.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(r)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Type != "" {
				out = append(out, ev)
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.Type = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.Data = line[6:]
		}
	}
	return out
}

func TestProxyInvokeStreamsResults(t *testing.T) {
	h := startHub(t, nil)
	h.startAgent(agentID)
	resp, body := h.request("POST", actionPath(agentID, "count"), "", "text/event-stream", nil, testToken)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	evs := readSSE(t, bytes.NewReader(body))
	var got []string
	for _, e := range evs {
		got = append(got, e.Type+" "+e.Data)
	}
	want := []string{"pending ", `running {"n":1}`, `running {"n":2}`, `running {"n":3}`, `completed {"done":true}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events\n got %q\nwant %q", got, want)
	}
}

func TestProxyInvokeFailedIs502WithTheAgentsProblem(t *testing.T) {
	h := startHub(t, nil)
	h.startAgent(agentID)
	resp, body := h.request("POST", actionPath(agentID, "fail"), "application/json", "", []byte(`{}`), testToken)
	p := expectProblem(t, resp, body, 502, "the feeder is jammed")
	if p.Type != "https://agent.example/errors#jammed" || p.Title != "Jammed" || p.Instance != actionPath(agentID, "fail") {
		t.Fatalf("problem %+v", p)
	}
	// Streamed, the failure is the last event.
	resp, body = h.request("POST", actionPath(agentID, "fail"), "", "text/event-stream", nil, testToken)
	evs := readSSE(t, bytes.NewReader(body))
	if resp.StatusCode != 200 || len(evs) != 1 || evs[0].Type != "failed" || !strings.Contains(evs[0].Data, `"status":502`) ||
		!strings.Contains(evs[0].Data, "jammed") {
		t.Fatalf("streamed failure: %d %+v", resp.StatusCode, evs)
	}
}

func TestProxyInvokeTimeoutCleansUp(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.ProxyTimeout = Duration(300 * time.Millisecond) })
	a := h.startAgent(agentID)
	b := h.Main.Broker
	inboxSubs := b.Subscribers(b.ReplyInbox() + "x")
	actionSubs := b.Subscribers("lmos/v1/things/" + a.tid + "/actions/never")
	// Warm up (HTTP connection, timers), then take the baseline.
	h.request("POST", actionPath(agentID, "addJSON"), "application/json", "", []byte(`{"a":1,"b":1}`), testToken)
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(50 * time.Millisecond)
	base := runtime.NumGoroutine()

	for range 3 {
		start := time.Now()
		resp, body := h.request("POST", actionPath(agentID, "never"), "application/json", "", []byte(`{}`), testToken)
		p := expectProblem(t, resp, body, 504, "no final result")
		if p.Type != lmos.ErrorTypeBase+hub.ETIMEOUT {
			t.Errorf("type %q", p.Type)
		}
		if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
			t.Errorf("answered after %s, want ≈ 300ms", d)
		}
	}
	// Streamed, the timeout is a failed event with the 504 problem.
	resp, body := h.request("POST", actionPath(agentID, "never"), "", "text/event-stream", nil, testToken)
	evs := readSSE(t, bytes.NewReader(body))
	if resp.StatusCode != 200 || len(evs) != 1 || evs[0].Type != "failed" || !strings.Contains(evs[0].Data, `"status":504`) {
		t.Fatalf("streamed timeout: %d %+v", resp.StatusCode, evs)
	}

	http.DefaultClient.CloseIdleConnections()
	waitFor(t, 2*time.Second, "no invocation waiting", func() bool { n, s := b.Interactions(); return n == 0 && s == 0 })
	waitFor(t, 2*time.Second, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
	if n := b.Subscribers(b.ReplyInbox() + "x"); n != inboxSubs || inboxSubs != 1 {
		t.Errorf("inbox subscriptions %d, before %d", n, inboxSubs)
	}
	if n := b.Subscribers("lmos/v1/things/" + a.tid + "/actions/never"); n != actionSubs {
		t.Errorf("action subscriptions %d, before %d", n, actionSubs)
	}
	// A late answer after the timeout goes nowhere and breaks nothing.
	for range 4 {
		a.request("lmos/v1/things/" + a.tid + "/actions/never")
	}
}

func TestProxyRejections(t *testing.T) {
	h := startHub(t, nil)
	a := h.startAgent(agentID)
	h.put("urn:http-only", makeTD("urn:http-only", "No transport"))
	unknown := "urn:uuid:5b0d6c1e-0000-4000-8000-0000000000ff"
	for _, c := range []struct {
		method, path string
		status       int
		detail       string
	}{
		{"POST", actionPath(unknown, "add"), 404, "no Thing"},
		{"POST", actionPath(agentID, "nope"), 404, `no action "nope"`},
		{"GET", "/proxy/" + pathEscape(agentID) + "/properties/nope", 404, `no property "nope"`},
		{"PUT", "/proxy/" + pathEscape(agentID) + "/properties/nope", 404, `no property "nope"`},
		{"GET", "/proxy/" + pathEscape(agentID) + "/events/nope", 404, `no event "nope"`},
		{"GET", "/proxy/" + pathEscape(agentID) + "/events/add", 404, `no event "add"`},
		{"POST", actionPath("urn:http-only", "run"), 503, "no transport"},
		// A property nobody has published yet.
		{"GET", "/proxy/" + pathEscape(agentID) + "/properties/mode", 503, "no value"},
		// What the TD rules out never reaches the agent.
		{"PUT", "/proxy/" + pathEscape(agentID) + "/properties/level", 405, `property "level" of Thing "` + agentID + `" is read-only`},
		{"GET", "/proxy/" + pathEscape(agentID) + "/properties/pin", 405, `property "pin" of Thing "` + agentID + `" is write-only`},
	} {
		resp, body := h.request(c.method, c.path, "application/json", "", []byte(`1`), testToken)
		expectProblem(t, resp, body, c.status, c.detail)
	}
	select {
	case p := <-a.got:
		t.Fatalf("a refused request reached the agent: %s", p.Topic)
	default:
	}
	for path, allow := range map[string]string{"level": "GET, HEAD", "pin": "PUT"} {
		method := map[string]string{"level": "PUT", "pin": "GET"}[path]
		resp, _ := h.request(method, "/proxy/"+pathEscape(agentID)+"/properties/"+path, "application/json", "", []byte(`1`), testToken)
		if got := resp.Header.Get("Allow"); got != allow {
			t.Errorf("%s %s: Allow %q, want %q", method, path, got, allow)
		}
	}
	// A value the property's schema rules out is refused for HTTP
	// consumers too (the router checks it), and never reaches the agent.
	resp, body := h.request("PUT", "/proxy/"+pathEscape(agentID)+"/properties/temp", "application/json", "", []byte(`"hot"`), testToken)
	if p := expectProblem(t, resp, body, 400, "data schema"); len(p.ValidationErrors) != 1 || p.ValidationErrors[0].Field != "" {
		t.Errorf("validationErrors %+v, want one for the value itself", p.ValidationErrors)
	}
	select {
	case p := <-a.got:
		t.Fatalf("a value the schema rules out reached the agent: %s", p.Topic)
	case <-time.After(200 * time.Millisecond):
	}
	// Observing a write-only property is refused as reading it is.
	resp, body = h.request("GET", "/proxy/"+pathEscape(agentID)+"/properties/pin", "", "text/event-stream", nil, "")
	expectProblem(t, resp, body, 405, "write-only")

	// Offline: its status says so.
	a.mc.pub("lmos/v1/things/"+a.tid+"/status", []byte("offline"), true)
	waitFor(t, 2*time.Second, "offline", func() bool { s, _ := h.presenceOf(agentID); return s == "offline" })
	resp, body = h.request("POST", actionPath(agentID, "add"), "application/json", "", []byte(`{}`), testToken)
	expectProblem(t, resp, body, 503, "offline")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	resp, body = h.request("GET", "/proxy/"+pathEscape(agentID)+"/events/alarm", "", "", nil, "")
	expectProblem(t, resp, body, 503, "offline")
}

// TestProxyInvokeChecksDataSchema: an action input that breaks a pattern, a
// multipleOf or a tuple's items is refused with 400 and validationErrors
// pointing into the value, also when the client asked for an event
// stream, and never reaches the agent; a valid one does.
func TestProxyInvokeChecksDataSchema(t *testing.T) {
	h := startHub(t, nil)
	a := h.startAgent(agentID)
	for _, c := range []struct{ input, field string }{
		{`{"code":"ABC123"}`, "/code"},
		{`{"qty":7}`, "/qty"},
		{`{"at":[1.5,"north"]}`, "/at/1"},
	} {
		// Streamed or not: a stream that would begin with 200 is refused
		// before it begins.
		for _, accept := range []string{"", "text/event-stream"} {
			resp, body := h.request("POST", actionPath(agentID, "order"), "application/json", accept, []byte(c.input), testToken)
			p := expectProblem(t, resp, body, 400, "data schema")
			if len(p.ValidationErrors) != 1 || p.ValidationErrors[0].Field != c.field || p.ValidationErrors[0].Description == "" {
				t.Errorf("%s (Accept %q): validationErrors %+v, want one at %s", c.input, accept, p.ValidationErrors, c.field)
			}
		}
	}
	select {
	case p := <-a.got:
		t.Fatalf("an input the schema rules out reached the agent: %s %s", p.Topic, p.Payload)
	default:
	}
	valid := `{"code":"123","qty":10,"at":[1.5,2]}`
	resp, body := h.request("POST", actionPath(agentID, "order"), "application/json", "", []byte(valid), testToken)
	if resp.StatusCode != 200 {
		t.Fatalf("valid input: %d %s", resp.StatusCode, body)
	}
	select {
	case p := <-a.got:
		if string(p.Payload) != valid {
			t.Errorf("the agent got %s, want %s", p.Payload, valid)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the valid input never reached the agent")
	}
}

func TestProxyPropertiesAndEvents(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Access.Anonymous = "read" }) // writes and invocations need a token
	a := h.startAgent(agentID)
	base := "/proxy/" + pathEscape(agentID)

	// readproperty: the retained value, in either encoding.
	a.mc.pub("lmos/v1/things/"+a.tid+"/properties/temp", []byte("21.5"), true)
	waitFor(t, 2*time.Second, "retained temp", func() bool {
		resp, _ := h.request("GET", base+"/properties/temp", "", "", nil, "")
		return resp.StatusCode == 200
	})
	resp, body := h.request("GET", base+"/properties/temp", "", "", nil, "")
	if resp.StatusCode != 200 || string(body) != "21.5" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("read: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, body = h.request("GET", base+"/properties/temp", "", "application/cbor", nil, "")
	var f float64
	if resp.StatusCode != 200 || cbor.Unmarshal(body, &f) != nil || f != 21.5 {
		t.Fatalf("read CBOR: %d %x", resp.StatusCode, body)
	}

	// writeproperty reaches the agent, in its form's encoding (CBOR).
	resp, body = h.request("PUT", base+"/properties/power", "application/json", "", []byte(`true`), "")
	expectProblem(t, resp, body, 401, "")
	resp, body = h.request("PUT", base+"/properties/power", "application/json", "", []byte(`true`), testToken)
	if resp.StatusCode != 204 {
		t.Fatalf("write: %d %s", resp.StatusCode, body)
	}
	p := a.request("lmos/v1/things/" + a.tid + "/properties/power/set")
	var on bool
	if cbor.Unmarshal(p.Payload, &on) != nil || !on || p.Properties.ContentType != "application/cbor" {
		t.Fatalf("agent got %x as %q", p.Payload, p.Properties.ContentType)
	}

	// subscribeevent as SSE: two events.
	eventTopic := "lmos/v1/things/" + a.tid + "/events/alarm"
	s := h.openSSE(base+"/events/alarm", "")
	waitFor(t, 2*time.Second, "stream subscribed", func() bool { return h.Main.Broker.Subscribers(eventTopic) == 1 })
	a.mc.pub(eventTopic, []byte(`{"level": 1}`), false)
	cb, _ := cbor.Marshal(map[string]int{"level": 2})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.mc.C.Publish(ctx, &paho.Publish{Topic: eventTopic, Payload: cb, QoS: 1,
		Properties: &paho.PublishProperties{ContentType: "application/cbor"}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`{"level":1}`, `{"level":2}`} {
		if ev := s.next(5 * time.Second); ev.Type != "alarm" || ev.Data != want {
			t.Fatalf("event %d: %+v, want %s", i, ev, want)
		}
	}

	// observeproperty: the current value first, then changes.
	obsCtx, obsCancel := context.WithCancel(context.Background())
	defer obsCancel()
	req, _ := http.NewRequestWithContext(obsCtx, "GET", h.URL+base+"/properties/temp", nil)
	req.Header.Set("Accept", "text/event-stream")
	obs, err := http.DefaultClient.Do(req)
	if err != nil || obs.StatusCode != 200 {
		t.Fatalf("observe: %v %v", obs, err)
	}
	defer obs.Body.Close()
	a.mc.pub("lmos/v1/things/"+a.tid+"/properties/temp", []byte("22"), true)
	sc := bufio.NewScanner(obs.Body)
	var values []string
	for len(values) < 2 && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			values = append(values, v)
		}
	}
	if strings.Join(values, ",") != "21.5,22" {
		t.Fatalf("observed %q", values)
	}

	// Closing the streams removes their subscriptions.
	s.Close()
	obsCancel()
	waitFor(t, 2*time.Second, "streams closed", func() bool {
		_, n := h.Main.Broker.Interactions()
		return n == 0 && h.Main.Broker.Subscribers(eventTopic) == 0
	})
}

// An MQTT 3.1.1 consumer cannot carry Response Topic or Correlation Data:
// its invocation is fire-and-forget (PROTOCOL §10).
func TestMQTT311InvokeIsFireAndForget(t *testing.T) {
	pubBin, _ := requireMosquitto(t)
	h := startHub(t, nil)
	a := h.startAgent(agentID)
	topic := "lmos/v1/things/" + a.tid + "/actions/addJSON"
	if out, err := h.mosq(pubBin, "-V", "mqttv311", "-q", "1", "-t", topic, "-m", `{"a":2,"b":3}`); err != nil {
		t.Fatalf("mosquitto_pub: %q %v", out, err)
	}
	p := a.request(topic)
	if string(p.Payload) != `{"a":2,"b":3}` || (p.Properties != nil && (p.Properties.ResponseTopic != "" || p.Properties.CorrelationData != nil)) {
		t.Fatalf("agent got %q %+v", p.Payload, p.Properties)
	}
}

// No network client may take the inline client's id, whose inbox carries
// every proxied result.
func TestMQTTInlineClientIDRefused(t *testing.T) {
	h := startHub(t, nil)
	conn, err := net.Dial("tcp", h.Main.MQTTAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: "inline", CleanStart: true, KeepAlive: 30})
	if err == nil || ca == nil || ca.ReasonCode < 0x80 {
		t.Fatalf("connect as inline: %+v %v", ca, err)
	}
}
