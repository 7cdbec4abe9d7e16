package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// agentThing is the Thing's side of the proxy tests: the hub.Transport the
// real Router hands a lamp's interactions to, answering as an agent would,
// deterministically. The unit under test is the HTTP handler (web/proxy.go)
// over a real Router and registry; the real transports pass their own
// suite (test/kit/transporttest), so a test transport is fine here.
type agentThing struct {
	mu  sync.Mutex
	on  []byte // the value of property "on"
	got []hub.Interaction
	// values are the observed values and event data the streams send.
	values chan []byte
	// ended receives the op of every delivery when it returns.
	ended chan hub.Op
}

// thingFailure is the problem the lamp reports for action "fail", as an
// agent-side transport hands it over (status 502).
var thingFailure = lmos.Problem{Type: "https://lamp.example/errors#overheated", Title: "Overheated",
	Status: http.StatusBadGateway, Detail: "the lamp is too hot to dim"}

func (a *agentThing) Deliver(ctx context.Context, in hub.Interaction, emit func(hub.Result) error) error {
	a.mu.Lock()
	a.got = append(a.got, in)
	a.mu.Unlock()
	defer func() { a.ended <- in.Op }()
	completed := func(data []byte) hub.Result {
		return hub.Result{Status: hub.StatusCompleted, Data: data, ContentType: lmos.MediaJSON}
	}
	switch in.Op {
	case hub.OpReadProperty:
		a.mu.Lock()
		v := a.on
		a.mu.Unlock()
		return emit(completed(v))
	case hub.OpWriteProperty:
		a.mu.Lock()
		a.on = in.Input
		a.mu.Unlock()
		return emit(completed(nil))
	case hub.OpInvokeAction:
		return a.invoke(ctx, in, emit)
	}
	// observeproperty, subscribeevent: in place, then one value each.
	if err := emit(hub.Result{Status: hub.StatusPending}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case v := <-a.values:
			if err := emit(hub.Result{Status: hub.StatusRunning, Data: v, ContentType: lmos.MediaJSON}); err != nil {
				return err
			}
		}
	}
}

func (a *agentThing) invoke(ctx context.Context, in hub.Interaction, emit func(hub.Result) error) error {
	switch in.Name {
	case "dim":
		for _, st := range []string{hub.StatusPending, hub.StatusRunning} {
			if err := emit(hub.Result{Status: st}); err != nil {
				return err
			}
		}
		return emit(hub.Result{Status: hub.StatusCompleted, Data: []byte(`{"level": ` + string(in.Input) + `}`), ContentType: lmos.MediaJSON})
	case "fail":
		p := thingFailure
		return emit(hub.Result{Status: hub.StatusFailed, Problem: &p})
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	}
	return emit(hub.Result{Status: hub.StatusCompleted}) // toggle: no output
}

// delivered is what the Thing was asked so far.
func (a *agentThing) delivered() []hub.Interaction {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]hub.Interaction(nil), a.got...)
}

func (a *agentThing) value() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return string(a.on)
}

// waitEnded fails unless a delivery of op returns.
func (a *agentThing) waitEnded(t *testing.T, op hub.Op) {
	t.Helper()
	select {
	case got := <-a.ended:
		if got != op {
			t.Fatalf("a %s delivery ended, want %s", got, op)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the %s delivery did not end", op)
	}
}

const (
	lampID    = "urn:example:proxied-lamp"
	offlineID = "urn:example:offline-lamp"
	lampPath  = "/proxy/" + lampID
)

// lampTD has one of each affordance kind, a read-only and a write-only
// property, and an action whose input is an integer 0..100.
func lampTD(id string) []byte {
	form := []any{map[string]any{"href": "mqtt://hub/x"}}
	aff := func(kv ...any) map[string]any {
		m := map[string]any{"forms": form}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	var td map[string]any
	_ = json.Unmarshal([]byte(thingTD(id, "Lamp")), &td)
	td["properties"] = map[string]any{
		"on":     aff("type", "boolean"),
		"power":  aff("type", "number", "readOnly", true),
		"secret": aff("type", "string", "writeOnly", true),
	}
	td["actions"] = map[string]any{"dim": aff("input", map[string]any{"type": "integer", "minimum": 0, "maximum": 100}),
		"toggle": aff(), "fail": aff(), "hang": aff()}
	td["events"] = map[string]any{"overheat": aff("data", map[string]any{"type": "number"})}
	b, _ := json.Marshal(td)
	return b
}

// withRouter gives the adapter a real Router whose MQTT Things the lamp
// answers for.
func withRouter(lamp *agentThing) func(*web.Config, *hub.Registry) {
	return func(c *web.Config, reg *hub.Registry) {
		rt := hub.NewRouter(reg)
		rt.Handle(hub.SourceMQTT, lamp)
		c.Router = rt
	}
}

// newProxy is the adapter with the lamp (online, reached over MQTT) and an
// offline Thing registered.
func newProxy(t *testing.T, configure ...func(*web.Config, *hub.Registry)) (*directory, *agentThing) {
	t.Helper()
	lamp := &agentThing{on: []byte("false"), values: make(chan []byte), ended: make(chan hub.Op, 64)}
	d := newDirectory(t, append([]func(*web.Config, *hub.Registry){withRouter(lamp)}, configure...)...)
	ctx := context.Background()
	for _, id := range []string{lampID, offlineID} {
		if _, err := d.reg.Put(ctx, id, lampTD(id), hub.Origin{Source: hub.SourceMQTT}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.reg.SetPresence(ctx, offlineID, hub.PresenceOffline, hub.SourceMQTT); err != nil {
		t.Fatal(err)
	}
	return d, lamp
}

func TestProxyReadsAndWritesAProperty(t *testing.T) {
	d, lamp := newProxy(t)
	r := d.do("GET", lampPath+"/properties/on", "", "").want(t, "read", http.StatusOK)
	if string(r.body) != "false" || r.header.Get("Content-Type") != lmos.MediaJSON || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("read: %q, Content-Type %q, Cache-Control %q", r.body, r.header.Get("Content-Type"), r.header.Get("Cache-Control"))
	}
	d.do("PUT", lampPath+"/properties/on", lmos.MediaJSON, "true").want(t, "write", http.StatusNoContent)
	if r := d.do("GET", lampPath+"/properties/on", "", "").want(t, "read after write", http.StatusOK); string(r.body) != "true" {
		t.Fatalf("read after write: %q", r.body)
	}
	// A CBOR body goes to the Thing as CBOR (true is 0xf5).
	d.do("PUT", lampPath+"/properties/on", lmos.MediaCBOR, "\xf5").want(t, "write CBOR", http.StatusNoContent)
	got := lamp.delivered()
	last := got[len(got)-1]
	if len(got) != 4 || last.Op != hub.OpWriteProperty || last.ContentType != lmos.MediaCBOR || string(last.Input) != "\xf5" {
		t.Fatalf("the Thing got %d interactions, the last %+v", len(got), last)
	}
}

// refusal is one request the proxy must refuse before the Thing hears of it.
type refusal struct {
	what                      string
	method, path, ctype, body string
	header                    []string
	status                    int
	code                      string
}

func (c refusal) check(t *testing.T, d *directory) response {
	t.Helper()
	r := d.do(c.method, c.path, c.ctype, c.body, c.header...)
	p := r.problem(t, c.what, c.status, c.code)
	if p.Instance != c.path {
		t.Fatalf("%s: instance %q, want %q", c.what, p.Instance, c.path)
	}
	return r
}

func TestProxyRefusalsReachNoThing(t *testing.T) {
	// access.anonymous: read, so writes and invocations need a token.
	d, lamp := newProxy(t, func(c *web.Config, _ *hub.Registry) { c.Access, _ = hub.NewAccess(hub.AnonymousRead, "open", nil) })
	on, act := lampPath+"/properties/on", lampPath+"/actions/dim"
	for _, c := range []refusal{
		{what: "unknown Thing", method: "GET", path: "/proxy/urn:example:nobody/properties/on", status: 404, code: hub.ENOTFOUND},
		{what: "unknown property", method: "GET", path: lampPath + "/properties/colour", status: 404, code: hub.ENOTFOUND},
		{what: "unknown action", method: "POST", path: lampPath + "/actions/explode", status: 404, code: hub.ENOTFOUND},
		{what: "unknown event", method: "GET", path: lampPath + "/events/nope", header: []string{"Accept", "text/event-stream"}, status: 404, code: hub.ENOTFOUND},
		{what: "observe unknown property", method: "GET", path: lampPath + "/properties/colour", header: []string{"Accept", "text/event-stream"}, status: 404, code: hub.ENOTFOUND},
		{what: "unknown Thing before a bad body", method: "PUT", path: "/proxy/urn:example:nobody/properties/on", ctype: lmos.MediaJSON, body: "{", status: 404, code: hub.ENOTFOUND},
		{what: "write against the schema", method: "PUT", path: on, ctype: lmos.MediaJSON, body: `"yes"`, status: 400, code: hub.EINVALID},
		{what: "write not JSON", method: "PUT", path: on, ctype: lmos.MediaJSON, body: "{", status: 400, code: hub.EINVALID},
		{what: "write bad CBOR", method: "PUT", path: on, ctype: lmos.MediaCBOR, body: "\xff\xff", status: 400, code: hub.EINVALID},
		{what: "write as text", method: "PUT", path: on, ctype: "text/plain", body: "true", status: 415, code: hub.EUNSUPPORTED},
		{what: "input above the maximum", method: "POST", path: act, ctype: lmos.MediaJSON, body: "101", status: 400, code: hub.EINVALID},
		{what: "input not JSON", method: "POST", path: act, ctype: lmos.MediaJSON, body: "[", status: 400, code: hub.EINVALID},
		{what: "offline Thing", method: "GET", path: "/proxy/" + offlineID + "/properties/on", status: 503, code: hub.EUNAVAILABLE},
		{what: "invoke on an offline Thing", method: "POST", path: "/proxy/" + offlineID + "/actions/toggle", status: 503, code: hub.EUNAVAILABLE},
		{what: "observe an offline Thing", method: "GET", path: "/proxy/" + offlineID + "/properties/on", header: []string{"Accept", "text/event-stream"}, status: 503, code: hub.EUNAVAILABLE},
	} {
		c.check(t, d)
	}

	// The credentials: writes and invocations need a token (operate); 401
	// says how to authenticate, and whether the token sent was bad.
	noToken := refusal{what: "write without token", method: "PUT", path: on, ctype: lmos.MediaJSON, body: "true",
		header: []string{"Authorization", ""}, status: 401, code: hub.EUNAUTHORIZED}
	if v := noToken.check(t, d).header.Get("WWW-Authenticate"); v != `Bearer realm="lmos-hub"` {
		t.Fatalf("WWW-Authenticate %q without a token", v)
	}
	badToken := refusal{what: "invoke with a bad token", method: "POST", path: act, ctype: lmos.MediaJSON, body: "1",
		header: []string{"Authorization", "Bearer nope"}, status: 401, code: hub.EUNAUTHORIZED}
	if v := badToken.check(t, d).header.Get("WWW-Authenticate"); v != `Bearer realm="lmos-hub", error="invalid_token"` {
		t.Fatalf("WWW-Authenticate %q with a bad token", v)
	}
	// An offline Thing may come back: 503 says when to retry.
	if v := d.do("GET", "/proxy/"+offlineID+"/properties/on", "", "").header.Get("Retry-After"); v != "1" {
		t.Fatalf("503: Retry-After %q", v)
	}
	// Writing a read-only property and reading a write-only one: 405 with
	// the methods the property has.
	for _, c := range []struct{ method, name, allow string }{{"PUT", "power", "GET, HEAD"}, {"GET", "secret", "PUT"}} {
		r := refusal{what: c.method + " " + c.name, method: c.method, path: lampPath + "/properties/" + c.name, ctype: lmos.MediaJSON, body: "1",
			status: 405, code: hub.EMETHOD}
		if c.method == "GET" {
			r.ctype, r.body = "", ""
		}
		if allow := r.check(t, d).header.Get("Allow"); allow != c.allow {
			t.Fatalf("%s %s: Allow %q, want %q", c.method, c.name, allow, c.allow)
		}
	}

	if got := lamp.delivered(); len(got) != 0 {
		t.Fatalf("the Thing got %d refused interactions: %+v", len(got), got)
	}
	if v := lamp.value(); v != "false" {
		t.Fatalf("a refused write changed the property to %s", v)
	}
}

func TestProxyWithoutRouterIsUnavailable(t *testing.T) {
	d := newDirectory(t)
	d.do("PUT", "/things/"+lampID, tdType, string(lampTD(lampID))).want(t, "PUT", http.StatusCreated)
	for _, c := range []refusal{
		{what: "read", method: "GET", path: lampPath + "/properties/on", status: 503, code: hub.EUNAVAILABLE},
		{what: "invoke", method: "POST", path: lampPath + "/actions/toggle", status: 503, code: hub.EUNAVAILABLE},
		{what: "subscribe", method: "GET", path: lampPath + "/events/overheat", header: []string{"Accept", "text/event-stream"}, status: 503, code: hub.EUNAVAILABLE},
	} {
		if v := c.check(t, d).header.Get("Retry-After"); v != "1" {
			t.Fatalf("%s: Retry-After %q", c.what, v)
		}
	}
}

func TestProxyInvokesAnAction(t *testing.T) {
	d, lamp := newProxy(t)
	r := d.do("POST", lampPath+"/actions/dim", lmos.MediaJSON, "40").want(t, "dim", http.StatusOK)
	var out map[string]any
	r.json(t, &out)
	if out["level"] != 40.0 || r.header.Get("Content-Type") != lmos.MediaJSON || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("dim answered %s (%q)", r.body, r.header.Get("Content-Type"))
	}
	// No input and no output: 204.
	d.do("POST", lampPath+"/actions/toggle", "", "").want(t, "toggle", http.StatusNoContent)
	got := lamp.delivered()
	if len(got) != 2 || got[0].Name != "dim" || string(got[0].Input) != "40" || got[1].Name != "toggle" || got[1].Input != nil {
		t.Fatalf("the Thing got %+v", got)
	}
}

func TestProxyAnswersTheThingsFailureWith502(t *testing.T) {
	d, _ := newProxy(t)
	r := d.do("POST", lampPath+"/actions/fail", "", "").want(t, "fail", http.StatusBadGateway)
	if ct := r.header.Get("Content-Type"); ct != lmos.MediaProblem {
		t.Fatalf("Content-Type %q", ct)
	}
	var p lmos.Problem
	r.json(t, &p)
	if p.Status != http.StatusBadGateway || p.Type != thingFailure.Type || p.Title != thingFailure.Title || p.Detail != thingFailure.Detail {
		t.Fatalf("problem %+v, want the Thing's with status 502", p)
	}
}

func TestProxyTimeoutIs504AndEndsTheDelivery(t *testing.T) {
	d, lamp := newProxy(t, func(c *web.Config, _ *hub.Registry) { c.ProxyTimeout = 100 * time.Millisecond })
	refusal{what: "hang", method: "POST", path: lampPath + "/actions/hang", status: 504, code: hub.ETIMEOUT}.check(t, d)
	lamp.waitEnded(t, hub.OpInvokeAction)
}

func TestProxyStreamsAnInvocation(t *testing.T) {
	d, lamp := newProxy(t)
	req := func(action, body string) *sseStream {
		return d.streamRequest("POST", lampPath+"/actions/"+action, lmos.MediaJSON, body)
	}
	s := req("dim", "7")
	first := s.next()
	if first.retry != "2000" || first.event != hub.StatusPending {
		t.Fatalf("first frame %q", first.raw)
	}
	if f := s.next(); f.event != hub.StatusRunning || f.retry != "" {
		t.Fatalf("second frame %q", f.raw)
	}
	if f := s.next(); f.event != hub.StatusCompleted || f.data != `{"level":7}` {
		t.Fatalf("final frame %q", f.raw)
	}
	lamp.waitEnded(t, hub.OpInvokeAction)

	f := req("fail", "").next()
	var p lmos.Problem
	if err := json.Unmarshal([]byte(f.data), &p); err != nil || f.event != hub.StatusFailed {
		t.Fatalf("failure frame %q: %v", f.raw, err)
	}
	if p.Status != http.StatusBadGateway || p.Type != thingFailure.Type || p.Detail != thingFailure.Detail {
		t.Fatalf("failure frame's problem %+v", p)
	}
}

func TestProxyObservesAndSubscribesUntilTheClientGoes(t *testing.T) {
	d, lamp := newProxy(t)
	for _, c := range []struct {
		path, name, value string
		op                hub.Op
	}{
		{lampPath + "/properties/on", "on", "true", hub.OpObserveProperty},
		{lampPath + "/events/overheat", "overheat", "71.5", hub.OpSubscribeEvent},
	} {
		// 200 comes once the stream is in place: a value sent now arrives.
		s := d.stream(c.path)
		for i := range 2 {
			v := fmt.Sprintf("%s%s", c.value, strings.Repeat(" ", i)) // JSON, sent compact
			lamp.values <- []byte(v)
			f := s.next()
			if f.event != c.name || f.data != c.value || (i == 0) != (f.retry == "2000") {
				t.Fatalf("%s: frame %d %q", c.path, i, f.raw)
			}
		}
		s.close()
		lamp.waitEnded(t, c.op)
	}
}

// streamRequest is stream for any method and body.
func (d *directory) streamRequest(method, path, ctype, body string) *sseStream {
	d.t.Helper()
	return d.streamWith(func(req *http.Request) {
		req.Method = method
		if body != "" {
			req.Body = ioNopCloser(body)
			req.ContentLength = int64(len(body))
			req.Header.Set("Content-Type", ctype)
		}
	}, path)
}

func TestProxyDropsASlowStreamReader(t *testing.T) {
	d, lamp := newProxy(t, func(c *web.Config, _ *hub.Registry) { c.SSEWriteTimeout = 100 * time.Millisecond })
	// A client that asks for events and never reads them, with a small
	// receive buffer so the hub's writes soon block.
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(conn, "GET %s/events/overheat HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n", lampPath)

	big := []byte(`"` + strings.Repeat("x", 256<<10) + `"`)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for range 1000 { // 256 MB at most: far more than the socket buffers hold
			select {
			case lamp.values <- big:
			case <-stop:
				return
			}
		}
	}()
	// The hub gives up on the client after SSEWriteTimeout, and counts it;
	// the delivery ends then too (its context may end before the count).
	lamp.waitEnded(t, hub.OpSubscribeEvent)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		body := string(d.do("GET", "/metrics", "", "").want(t, "metrics", http.StatusOK).body)
		if strings.Contains(body, "\nlmos_sse_dropped_total 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lmos_sse_dropped_total is not 1:\n%s", grepLines(body, "lmos_sse"))
		}
	}
	// The client sees its stream end: 200, then EOF.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the slow client's answer: %v %v", resp, err)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
