package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// joinList is GET /api/join.
type joinList struct {
	Mode      string `json:"mode"`
	Effective string `json:"effective"`
	Remaining int    `json:"remaining"`
	Pending   int    `json:"pending"`
	List      []struct {
		ID, Title, Door, Source, Signer string
		Properties, Actions             []string
		Events                          []string
	} `json:"list"`
}

func (h *testHub) joinList() joinList {
	h.t.Helper()
	resp, body := h.do("GET", "/api/join", "", nil, testToken)
	if resp.StatusCode != 200 {
		h.t.Fatalf("GET /api/join: %d %s", resp.StatusCode, body)
	}
	var l joinList
	if err := json.Unmarshal(body, &l); err != nil {
		h.t.Fatal(err)
	}
	return l
}

// decide POSTs approve or deny for id and wants status want.
func (h *testHub) decide(id, verb string, want int) []byte {
	h.t.Helper()
	resp, body := h.do("POST", "/api/join/pending/"+pathEscape(id)+"/"+verb, "", nil, testToken)
	if resp.StatusCode != want {
		h.t.Fatalf("%s %s: %d %s, want %d", verb, id, resp.StatusCode, body, want)
	}
	return body
}

func (h *testHub) absent(id string) {
	h.t.Helper()
	if resp, body := h.do("GET", "/things/"+pathEscape(id), "", nil, ""); resp.StatusCode != 404 {
		h.t.Fatalf("GET %s: %d %s, want 404 (nothing may reach the registry)", id, resp.StatusCode, body)
	}
}

func resultOf(m map[string]any) lmos.JoinResult {
	var r lmos.JoinResult
	b, _ := json.Marshal(m["result"])
	_ = json.Unmarshal(b, &r)
	return r
}

// Join mode approve over MQTT with Eclipse Paho for Python (strict: any
// disconnect or refusal fails it): a new agent gets "pending", is listed
// by GET /api/join, reaches nothing in the registry, and cannot publish as
// its Thing (mosquitto_pub, MQTT 5 QoS 1, is told "Not authorized"; a
// subscriber of the Thing's topics gets nothing of it). On approval the
// still-waiting connection gets "accepted" with credentials without
// publishing again, and connects with them. A second agent is denied: 403
// on its connection, nothing stored, the list empty.
func TestApproveModeMQTTWaitingAgents(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	pub := mosquittoTool(t, "mosquitto_pub")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := "mqtt://" + h.Main.MQTTAddr.String()
	const id, denied = "urn:example:approve-me", "urn:example:deny-me"

	base := "lmos/v1/things/" + lmos.TopicKey(id)
	watch := h.MQTT(nil)
	for _, f := range []string{"/td", "/status", "/events/+"} {
		watch.MustSub(base + f)
	}
	feed := h.MQTT(nil)
	feed.MustSub("lmos/v1/hub/events")

	py := startScript(t, ctx, "paho-mqtt waiting agent", "paho_join_wait.py", url, id)
	if r := resultOf(py.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil })); r.Status != lmos.JoinPending || r.ID != id || r.Credentials != nil {
		t.Fatalf("first result %+v, want pending", r)
	}
	h.absent(id)
	l := h.joinList()
	if l.Mode != "approve" || l.Pending != 1 || len(l.List) != 1 || l.List[0].ID != id || l.List[0].Door != "mqtt" ||
		l.List[0].Source != "127.0.0.1" || l.List[0].Title != "paho waiting agent" || fmt.Sprint(l.List[0].Events) != "[e]" {
		t.Fatalf("GET /api/join: %+v", l)
	}
	var ev struct {
		Type, ID string
		Join     map[string]any
	}
	// The feed is read by anyone with directory read: the address that
	// knocked is for administrators only (GET /api/join above).
	payload := feed.Next("lmos/v1/hub/events").Payload
	if err := json.Unmarshal(payload, &ev); err != nil || ev.Type != "join_pending" || ev.ID != id || ev.Join == nil || ev.Join["door"] != "mqtt" {
		t.Fatalf("feed: %+v %v", ev, err)
	}
	if _, has := ev.Join["source"]; has || strings.Contains(string(payload), "127.0.0.1") {
		t.Fatalf("the join event shows the source address to every reader: %s", payload)
	}

	// The pending Thing cannot publish as that Thing.
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	out, err := exec.CommandContext(ctx, pub, "-h", host, "-p", port, "-V", "5", "-q", "1",
		"-t", "lmos/v1/things/"+lmos.TopicKey(id)+"/events/e", "-m", `"forged"`).CombinedOutput()
	if !strings.Contains(string(out), "Not authorized") {
		t.Fatalf("mosquitto_pub as the pending Thing: %v %s, want the PUBACK's Not authorized", err, out)
	}

	h.decide(id, "approve", http.StatusNoContent)
	r := resultOf(py.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil }))
	if r.Status != lmos.JoinAccepted || r.Credentials == nil || r.Credentials.Username != lmos.TopicKey(id) || r.Credentials.Password == "" {
		t.Fatalf("result after approval %+v", r)
	}
	if resp, body := h.do("GET", "/things/"+pathEscape(id), "", nil, ""); resp.StatusCode != 200 || !strings.Contains(string(body), "paho waiting agent") {
		t.Fatalf("approved Thing: %d %s", resp.StatusCode, body)
	}
	py.do(10*time.Second, map[string]any{"cmd": "reconnect"})
	// The subscriber's first message of the Thing is its accepted TD, then
	// its status: the forged event never arrived.
	for _, want := range []string{"/td", "/status"} {
		select {
		case m := <-watch.Msgs:
			if m.Topic != base+want {
				t.Fatalf("subscriber got %s (%q), want …%s", m.Topic, m.Payload, want)
			}
		case <-ctx.Done():
			t.Fatalf("subscriber got no %s", want)
		}
	}
	py.exit()
	if l := h.joinList(); l.Pending != 0 || len(l.List) != 0 {
		t.Fatalf("after approval: %+v", l)
	}

	py2 := startScript(t, ctx, "paho-mqtt denied agent", "paho_join_wait.py", url, denied)
	if r := resultOf(py2.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil })); r.Status != lmos.JoinPending {
		t.Fatalf("denied agent's first result %+v", r)
	}
	h.decide(denied, "deny", http.StatusNoContent)
	r = resultOf(py2.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil }))
	if r.Status != lmos.JoinRejected || r.Problem == nil || r.Problem.Status != 403 || r.Credentials != nil {
		t.Fatalf("result after denial %+v", r)
	}
	py2.exit()
	h.absent(denied)
	if l := h.joinList(); l.Pending != 0 {
		t.Fatalf("after denial: %+v", l)
	}
	h.decide(denied, "approve", http.StatusNotFound)
}

// Join mode approve over WebSocket with an independent client (npm ws):
// registerThing is acknowledged "pending", the agent may not emit for the
// Thing, and on approval its still-open socket gets "registered" on the
// same correlationId; a denied one gets a 403 error there.
func TestApproveModeWebSocketWaitingAgents(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"
	const id, denied = "urn:example:ws-approve", "urn:example:ws-deny"
	td := func(id string) map[string]any {
		var m map[string]any
		_ = json.Unmarshal(hubtest.BareTD(id, "ws waiting agent"), &m)
		return m
	}
	reply := func(p *scriptProc) map[string]any {
		m := p.next(10*time.Second, func(m map[string]any) bool { return m["reply"] != nil })
		return m["reply"].(map[string]any)
	}
	ws := startScript(t, ctx, "ws waiting agent", "ws-join-wait.mjs", wsURL)
	ws.do(10*time.Second, map[string]any{"cmd": "register", "td": td(id)})
	first := reply(ws)
	if first["messageType"] != "acknowledgement" || first["message"] != "pending" {
		t.Fatalf("first reply %v", first)
	}
	// Sending it again on the same socket is no way around the approval.
	ws.do(10*time.Second, map[string]any{"cmd": "register", "td": td(id)})
	if again := reply(ws); again["messageType"] != "acknowledgement" || again["message"] != "pending" {
		t.Fatalf("registerThing again while pending: %v", again)
	}
	h.absent(id)
	corr := first["correlationId"]
	ws.do(10*time.Second, map[string]any{"cmd": "emit", "thingId": id, "event": "e"})
	if m := reply(ws); m["messageType"] != "error" || m["status"] != float64(403) {
		t.Fatalf("emit while pending: %v", m)
	}
	h.decide(id, "approve", http.StatusNoContent)
	// The answer goes to the latest registerThing, the one still waiting.
	if m := reply(ws); m["messageType"] != "acknowledgement" || m["message"] != "registered" || m["correlationId"] == corr {
		t.Fatalf("after approval: %v", m)
	}
	if s, via := h.presenceOf(id); s != "online" || via != "ws" {
		t.Fatalf("approved agent presence %s via %s", s, via)
	}
	ws.do(10*time.Second, map[string]any{"cmd": "register", "td": td(denied)})
	if m := reply(ws); m["message"] != "pending" {
		t.Fatalf("second registration: %v", m)
	}
	h.decide(denied, "deny", http.StatusNoContent)
	if m := reply(ws); m["messageType"] != "error" || m["status"] != float64(403) {
		t.Fatalf("after denial: %v", m)
	}
	h.absent(denied)
	ws.exit()
}

// An admin's HTTP write is an approval in itself: PUT registers a new
// Thing under approve; without the token it is refused and nothing is
// stored. The join API needs the admin token too, and a bad window is
// refused with the problem and changes nothing.
func TestApproveModeHTTPAndJoinAPI(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	const id = "urn:example:http-admin"
	if resp, _ := h.do("PUT", "/things/"+pathEscape(id), lmos.MediaTD, makeTD(id, "T"), ""); resp.StatusCode != 401 {
		t.Fatalf("anonymous PUT: %d", resp.StatusCode)
	}
	h.absent(id)
	if resp, body := h.do("PUT", "/things/"+pathEscape(id), lmos.MediaTD, makeTD(id, "T"), testToken); resp.StatusCode != 201 {
		t.Fatalf("admin PUT: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/join", ""}, {"POST", "/api/join/permit", `{"seconds":5}`},
		{"POST", "/api/join/pending/x/approve", ""}, {"POST", "/api/join/pending/x/deny", ""},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		if resp, _ := h.do(c.method, c.path, "application/json", body, ""); resp.StatusCode != 401 {
			t.Errorf("%s %s without a token: %d", c.method, c.path, resp.StatusCode)
		}
	}
	for _, bad := range []string{`{"seconds":255}`, `{"seconds":-1}`, `{}`, `{"seconds":"5"}`} {
		resp, body := h.do("POST", "/api/join/permit", "application/json", []byte(bad), testToken)
		var p lmos.Problem
		if resp.StatusCode != 400 || json.Unmarshal(body, &p) != nil || p.Status != 400 || resp.Header.Get("Content-Type") != lmos.MediaProblem {
			t.Fatalf("permit %s: %d %s", bad, resp.StatusCode, body)
		}
	}
	if l := h.joinList(); l.Effective != "approve" || l.Remaining != 0 {
		t.Fatalf("after refused windows: %+v", l)
	}
}

// The permit-join window, opened through the API and shown in
// /api/status, admits a new MQTT agent as open would (credentials at
// once, mosquitto_rr-free: Eclipse Paho's result); closing it parks the
// next one again.
func TestPermitJoinWindowOverAPI(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := "mqtt://" + h.Main.MQTTAddr.String()
	resp, body := h.do("POST", "/api/join/permit", "application/json", []byte(`{"seconds":120}`), testToken)
	if resp.StatusCode != 200 {
		t.Fatalf("permit: %d %s", resp.StatusCode, body)
	}
	var st struct {
		Join struct {
			Mode, Effective string
			PermitUntil     *time.Time
			Remaining       int
		}
	}
	h.getJSON("/api/status", 200, &st)
	if st.Join.Mode != "approve" || st.Join.Effective != "open" || st.Join.PermitUntil == nil || st.Join.Remaining < 110 || st.Join.Remaining > 120 {
		t.Fatalf("status in the window: %+v", st.Join)
	}
	py := startScript(t, ctx, "paho-mqtt agent in the window", "paho_join_wait.py", url, "urn:example:in-window")
	if r := resultOf(py.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil })); r.Status != lmos.JoinAccepted || r.Credentials == nil {
		t.Fatalf("join in the window: %+v", r)
	}
	py.do(10*time.Second, map[string]any{"cmd": "reconnect"})
	py.exit()
	if resp, _ := h.do("POST", "/api/join/permit", "application/json", []byte(`{"seconds":0}`), testToken); resp.StatusCode != 200 {
		t.Fatalf("close: %d", resp.StatusCode)
	}
	st.Join.PermitUntil = nil
	h.getJSON("/api/status", 200, &st)
	if st.Join.Effective != "approve" || st.Join.PermitUntil != nil {
		t.Fatalf("status after closing: %+v", st.Join)
	}
	py2 := startScript(t, ctx, "paho-mqtt agent after the window", "paho_join_wait.py", url, "urn:example:after-window")
	if r := resultOf(py2.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil })); r.Status != lmos.JoinPending {
		t.Fatalf("join after the window: %+v", r)
	}
	py2.exit()
}

// Pending joins survive a restart: listed again, and approvable (the agent
// is gone, so the Thing is registered without credentials).
func TestPendingJoinsSurviveHubRestart(t *testing.T) {
	dir := t.TempDir()
	edit := func(c *Config) { c.Join.Mode = "approve" }
	h := startHubIn(t, dir, edit)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const id = "urn:example:restart"
	py := startScript(t, ctx, "paho-mqtt agent", "paho_join_wait.py", "mqtt://"+h.Main.MQTTAddr.String(), id)
	if r := resultOf(py.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil })); r.Status != lmos.JoinPending {
		t.Fatalf("%+v", r)
	}
	py.exit()
	h.Close()
	h = startHubIn(t, dir, edit)
	if l := h.joinList(); l.Pending != 1 || l.List[0].ID != id {
		t.Fatalf("after restart: %+v", l)
	}
	h.absent(id)
	h.decide(id, "approve", http.StatusNoContent)
	if resp, _ := h.do("GET", "/things/"+pathEscape(id), "", nil, ""); resp.StatusCode != 200 {
		t.Fatalf("approved after restart: %d", resp.StatusCode)
	}
}

// A flood of new Things from one address under approve (Eclipse Paho for
// Python, one result per join) fills that address's share of the pending
// list (16) and no more: the rest are rejected 507 with the limit's name,
// counted by it, whichever door (WebSocket too, from the same address);
// nothing reaches the registry.
func TestApproveModeFloodFromOneSourceIsBounded(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	var joins []floodJoin
	for i := range 20 {
		id := fmt.Sprintf("urn:example:flood-%d", i)
		joins = append(joins, floodJoin{id: id, contentType: lmos.MediaTD, payload: makeTD(id, "flood")})
	}
	res := pahoFlood(t, h, "approve", joins)
	for i, r := range res {
		want, status := "pending", 0
		if i >= 16 {
			want, status = "rejected", 507
		}
		if r.Status != want || r.Problem.Status != status {
			t.Fatalf("join %d: %+v, want %s %d", i, r, want, status)
		}
	}
	if l := h.joinList(); l.Pending != 16 {
		t.Fatalf("pending %d, want 16", l.Pending)
	}
	var st struct{ Things int }
	h.getJSON("/api/status", 200, &st)
	if st.Things != 0 {
		t.Fatalf("%d Things registered while pending", st.Things)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws := startScript(t, ctx, "ws agent from the flooding address", "ws-join-wait.mjs", "ws"+strings.TrimPrefix(h.URL, "http")+"/ws")
	var td map[string]any
	_ = json.Unmarshal(makeTD("urn:example:flood-ws", "flood"), &td)
	ws.do(10*time.Second, map[string]any{"cmd": "register", "td": td})
	m := ws.next(10*time.Second, func(m map[string]any) bool { return m["reply"] != nil })["reply"].(map[string]any)
	if m["messageType"] != "error" || m["status"] != float64(507) {
		t.Fatalf("WebSocket registration from the same address: %v", m)
	}
	ws.exit()
	_, body := h.do("GET", "/metrics", "", nil, "")
	for _, want := range []string{`lmos_mqtt_refused_total{reason="join.pendingPerSource"} 4`, `lmos_ws_refused_total{reason="join.pendingPerSource"} 1`, "lmos_join_pending 16"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The Go agent library waits for the decision on its connection, over
// MQTT and WebSocket: Connect returns once an admin approves, and the
// agent is online and serves its Thing.
func TestAgentLibraryWaitsForApproval(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	for _, c := range []struct{ name, url, id string }{
		{"mqtt", "mqtt://" + h.Main.MQTTAddr.String(), "urn:example:agent-lib-mqtt"},
		{"ws", "ws" + strings.TrimPrefix(h.URL, "http") + "/ws", "urn:example:agent-lib-ws"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			type res struct {
				a   *agent.Agent
				err error
			}
			done := make(chan res, 1)
			var logs hubtest.SyncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			go func() {
				a, err := agent.Connect(ctx, agent.Options{URL: c.url, TD: map[string]any{"id": c.id, "title": "library agent"}, Logger: log})
				done <- res{a, err}
			}()
			waitFor(t, 10*time.Second, "the agent waiting for approval", func() bool {
				return strings.Contains(logs.String(), "approval; waiting")
			})
			select {
			case r := <-done:
				t.Fatalf("Connect returned before the decision: %v", r.err)
			default:
			}
			if l := h.joinList(); len(l.List) != 1 || l.List[0].ID != c.id {
				t.Fatalf("pending: %+v", l)
			}
			h.absent(c.id)
			h.decide(c.id, "approve", http.StatusNoContent)
			var r res
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatal("Connect did not return after the approval")
			}
			if r.err != nil {
				t.Fatalf("Connect: %v", r.err)
			}
			defer r.a.Close()
			waitFor(t, 10*time.Second, "online", func() bool { s, _ := h.presenceOf(c.id); return s == "online" })
		})
	}
}

// Signed registerThings parked under approve are verified at the socket's
// address's cost (security.verifyRate), as every other door's writes are:
// past the burst the next one is refused 429 and nothing more is parked.
func TestParkedWebSocketJoinsCountAgainstTheVerifyRate(t *testing.T) {
	h := startHub(t, func(c *Config) {
		c.Join.Mode = "approve"
		c.Security.VerifyRate = 0.001
		c.Security.VerifyBurst = 2
	})
	ws := h.wsDial("lmosprotocol", nil)
	k := newSigningKey(t)
	created := time.Now().Add(-time.Minute)
	for i := range 3 {
		id := fmt.Sprintf("urn:uuid:6f1d2c3b-0000-4000-8000-0000000000%02d", i)
		var td map[string]any
		if err := json.Unmarshal(signedTD(t, id, "Parked", k, created), &td); err != nil {
			t.Fatal(err)
		}
		r := ws.reply(ws.send(map[string]any{"messageType": "registerThing", "thingId": id, "td": td}, false))
		if i < 2 {
			if r["messageType"] != "acknowledgement" || r["message"] != "pending" {
				t.Fatalf("join %d: %v", i, r)
			}
			continue
		}
		if r["messageType"] != "error" || r["status"] != 429.0 || r["type"] != lmos.ErrorTypeBase+lmos.CodeRateLimit {
			t.Fatalf("join %d past the verification burst: %v", i, r)
		}
	}
	if l := h.joinList(); len(l.List) != 2 {
		t.Fatalf("%d joins pending, want the first 2", len(l.List))
	}
	if n := h.refusals(`lmos_ws_refused_total{reason="security.verifyRate"}`); n != 1 {
		t.Fatalf("%d refusals counted for security.verifyRate, want 1", n)
	}
}

// An admin who registers an id whose join is pending settles it: the
// pending entry is dropped and the agent still waiting on its socket is
// told 409 (the admin's Thing won), as an approval of it would now say.
func TestAdminWriteSettlesAPendingJoin(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	const id = "urn:uuid:6f1d2c3b-0000-4000-8000-0000000000aa"
	ws := h.wsDial("lmosprotocol", nil)
	var td map[string]any
	if err := json.Unmarshal(makeTD(id, "Waiting"), &td); err != nil {
		t.Fatal(err)
	}
	reg := ws.send(map[string]any{"messageType": "registerThing", "thingId": id, "td": td}, false)
	if r := ws.reply(reg); r["message"] != "pending" {
		t.Fatalf("registerThing: %v", r)
	}
	if resp, body := h.do(http.MethodPut, lmos.ThingPath(id), "application/td+json", makeTD(id, "The admin's"), testToken); resp.StatusCode != http.StatusCreated {
		t.Fatalf("admin PUT: %d %s", resp.StatusCode, body)
	}
	r := ws.reply(reg)
	if r["messageType"] != "error" || r["status"] != 409.0 || r["type"] != lmos.ErrorTypeBase+lmos.CodeConflict {
		t.Fatalf("the waiting agent after the admin's write: %v", r)
	}
	if l := h.joinList(); len(l.List) != 0 {
		t.Fatalf("still pending after the admin's write: %+v", l.List)
	}
	if th, err := h.Main.Registry.Get(id); err != nil || th.Summary.Title != "The admin's" {
		t.Fatalf("the admin's Thing: %+v %v", th.Summary, err)
	}
}
