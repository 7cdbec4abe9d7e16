package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Group actions (issue 15): "set the living room and the bedroom to 70 °F"
// is one call to a group of thermostat agents from different vendors, one
// over MQTT and one over WebSocket, beside a slow one, a failing one, one
// registered but not connected, one that requires security and a lamp
// without the action. Every door answers exactly one result per member.

// gaMembers are the members of the test group.
const (
	gaAcme      = "urn:ga:acme"      // MQTT agent: completes
	gaGlobex    = "urn:ga:globex"    // WebSocket agent: completes
	gaSlow      = "urn:ga:slow"      // MQTT agent: answers too late
	gaBroken    = "urn:ga:broken"    // WebSocket agent: fails
	gaUnplugged = "urn:ga:unplugged" // registered over HTTP, no agent
	gaVault     = "urn:ga:vault"     // requires security, no agent
	gaLamp      = "urn:ga:lamp"      // has no setTarget
)

type gaEnv struct {
	h     *testHub
	calls map[string]*atomic.Int64 // invocations each agent served
}

// gaTD is an HTTP-registered TD; with action, it has setTarget; secured
// makes it require basic authentication.
func gaTD(id string, action, secured bool) []byte {
	td := map[string]any{
		"@context": "https://www.w3.org/2022/wot/td/v1.1", "id": id, "title": id,
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}, "basic_sc": map[string]any{"scheme": "basic"}},
		"security":            "nosec_sc",
	}
	if secured {
		td["security"] = "basic_sc"
	}
	if action {
		td["actions"] = map[string]any{"setTarget": map[string]any{"forms": []any{map[string]any{
			"href": "mqtt://hub/lmos/v1/things/" + lmos.TopicKey(id) + "/actions/setTarget", "contentType": "application/json"}}}}
	}
	b, _ := json.Marshal(td)
	return b
}

func startGroupActionHub(t *testing.T, edit func(*Config)) *gaEnv {
	t.Helper()
	h := startHub(t, func(c *Config) {
		// The per-member timeout is the proxy's: short, so the slow
		// member times out quickly.
		c.HTTP.ProxyTimeout = Duration(time.Second)
		if edit != nil {
			edit(c)
		}
	})
	env := &gaEnv{h: h, calls: map[string]*atomic.Int64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	release := make(chan struct{}) // ends the slow handler
	wsURL := "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"
	mqttURL := "mqtt://" + h.Main.MQTTAddr.String()
	start := func(url, id string, handle func(context.Context, agent.Input) (any, error)) {
		a, err := agent.Connect(ctx, agent.Options{URL: url, TD: map[string]any{"id": id, "title": id, "@type": "lmos:Agent",
			"actions": map[string]any{"setTarget": map[string]any{}}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		n := &atomic.Int64{}
		env.calls[id] = n
		a.HandleAction("setTarget", func(ctx context.Context, in agent.Input) (any, error) {
			n.Add(1)
			return handle(ctx, in)
		})
	}
	type target struct {
		Fahrenheit float64 `json:"fahrenheit"`
	}
	start(mqttURL, gaAcme, func(_ context.Context, in agent.Input) (any, error) {
		var v target
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		return map[string]any{"vendor": "acme", "fahrenheit": v.Fahrenheit}, nil
	})
	start(wsURL, gaGlobex, func(_ context.Context, in agent.Input) (any, error) {
		var v target
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		return map[string]any{"vendor": "globex", "celsius": (v.Fahrenheit - 32) * 5 / 9}, nil
	})
	start(mqttURL, gaSlow, func(ctx context.Context, _ agent.Input) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return map[string]any{"late": true}, nil
	})
	t.Cleanup(func() { close(release) }) // runs before the agents close
	start(wsURL, gaBroken, func(context.Context, agent.Input) (any, error) {
		return nil, agent.NewProblem(http.StatusInternalServerError, "the valve is stuck")
	})
	h.put(gaUnplugged, gaTD(gaUnplugged, true, false))
	h.put(gaVault, gaTD(gaVault, true, true))
	h.put(gaLamp, gaTD(gaLamp, false, false))
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "home", Title: "Home",
		Members: []string{gaAcme, gaGlobex, gaSlow, gaBroken, gaUnplugged, gaVault, gaLamp}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "lamps", Title: "Lamps", Members: []string{gaLamp}}); err != nil {
		t.Fatal(err)
	}
	return env
}

// invocations are the calls each agent served so far.
func (env *gaEnv) invocations() map[string]int64 {
	out := map[string]int64{}
	for id, n := range env.calls {
		out[id] = n.Load()
	}
	return out
}

// wantGroupResults checks one result per member with the status (and,
// for problems, the HTTP status) each was owed, and the vendors' outputs.
func wantGroupResults(t *testing.T, door string, results []lmos.GroupActionResult, anonymous bool) {
	t.Helper()
	want := map[string]string{
		gaAcme: "completed", gaGlobex: "completed", gaSlow: "timedOut", gaBroken: "failed",
		gaUnplugged: "offline", gaVault: "offline", gaLamp: "skipped",
	}
	wantProblem := map[string]int{gaSlow: 504, gaBroken: 502, gaUnplugged: 503, gaVault: 503}
	if anonymous {
		// A member that requires security refuses an anonymous consumer:
		// that member's result, not the call's.
		want[gaVault], wantProblem[gaVault] = "failed", 401
	}
	got := map[string]lmos.GroupActionResult{}
	for _, r := range results {
		if _, dup := got[r.Member]; dup {
			t.Errorf("%s: two results for %s", door, r.Member)
		}
		got[r.Member] = r
	}
	if len(got) != len(want) || len(results) != len(want) {
		t.Errorf("%s: %d results for %d members: %+v", door, len(results), len(want), results)
	}
	for id, status := range want {
		r, ok := got[id]
		if !ok {
			t.Errorf("%s: no result for %s", door, id)
			continue
		}
		if r.Status != status {
			t.Errorf("%s: %s is %s, want %s (%+v)", door, id, r.Status, status, r.Error)
		}
		if st := wantProblem[id]; st != 0 && (r.Error == nil || r.Error.Status != st || r.Error.Type == "") {
			t.Errorf("%s: %s problem %+v, want status %d", door, id, r.Error, st)
		}
		if (status == "completed" || status == "skipped") && r.Error != nil {
			t.Errorf("%s: %s has a problem %+v", door, id, r.Error)
		}
	}
	if r := got[gaBroken]; r.Error != nil && r.Error.Detail != "the valve is stuck" {
		t.Errorf("%s: the failing member's problem %+v lost its detail", door, r.Error)
	}
	var acme struct {
		Vendor     string
		Fahrenheit float64
	}
	var globex struct {
		Vendor  string
		Celsius float64
	}
	if err := json.Unmarshal(got[gaAcme].Output, &acme); err != nil || acme.Vendor != "acme" || acme.Fahrenheit != 70 {
		t.Errorf("%s: acme output %s", door, got[gaAcme].Output)
	}
	if err := json.Unmarshal(got[gaGlobex].Output, &globex); err != nil || globex.Vendor != "globex" || globex.Celsius < 21.1 || globex.Celsius > 21.2 {
		t.Errorf("%s: globex output %s", door, got[gaGlobex].Output)
	}
}

// wantOneCallEach checks that one group action invoked each agent once.
func (env *gaEnv) wantOneCallEach(t *testing.T, door string, before map[string]int64) {
	t.Helper()
	after := env.invocations()
	for id := range before {
		if after[id]-before[id] != 1 {
			t.Errorf("%s: agent %s served %d invocations, want 1", door, id, after[id]-before[id])
		}
	}
}

const gaInput = `{"fahrenheit":70}`

func TestGroupActionHTTP(t *testing.T) {
	env := startGroupActionHub(t, nil)
	h := env.h
	path := "/api/groups/home/actions/setTarget"

	t.Run("json", func(t *testing.T) {
		before := env.invocations()
		resp, body := h.request(http.MethodPost, path, "application/json", "application/json", []byte(gaInput), "")
		if resp.StatusCode != http.StatusOK || lmos.MediaType(resp.Header.Get("Content-Type")) != "application/json" {
			t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		var ans lmos.GroupActionAnswer
		if err := json.Unmarshal(body, &ans); err != nil || ans.Group != "home" || ans.Action != "setTarget" {
			t.Fatalf("answer %s (%v)", body, err)
		}
		wantGroupResults(t, "http", ans.Results, true)
		for i := 1; i < len(ans.Results); i++ {
			if ans.Results[i-1].Member >= ans.Results[i].Member {
				t.Errorf("results not in member order: %s", body)
			}
		}
		env.wantOneCallEach(t, "http", before)
	})

	t.Run("admin", func(t *testing.T) {
		// With a token the secured member is invoked (and is offline).
		resp, body := h.request(http.MethodPost, path, "application/json", "application/json", []byte(gaInput), testToken)
		var ans lmos.GroupActionAnswer
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &ans) != nil {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		wantGroupResults(t, "http admin", ans.Results, false)
	})

	t.Run("sse", func(t *testing.T) {
		before := env.invocations()
		req, _ := http.NewRequest(http.MethodPost, h.URL+path, strings.NewReader(gaInput))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || lmos.MediaType(resp.Header.Get("Content-Type")) != "text/event-stream" {
			t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var results []lmos.GroupActionResult
		var done *lmos.GroupActionSummary
		var firstAt time.Duration
		sc := bufio.NewScanner(resp.Body)
		event, data := "", ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data += strings.TrimPrefix(line, "data: ")
			case strings.HasPrefix(line, "retry: "):
			case line == "" && event != "":
				switch event {
				case "result":
					var r lmos.GroupActionResult
					if err := json.Unmarshal([]byte(data), &r); err != nil {
						t.Fatalf("result event %q: %v", data, err)
					}
					if done != nil {
						t.Errorf("a result after done: %s", data)
					}
					if len(results) == 0 {
						firstAt = time.Since(start)
					}
					results = append(results, r)
				case "done":
					done = &lmos.GroupActionSummary{}
					if err := json.Unmarshal([]byte(data), done); err != nil {
						t.Fatalf("done event %q: %v", data, err)
					}
				default:
					t.Errorf("unexpected event %q: %s", event, data)
				}
				event, data = "", ""
			case line == "":
			default:
				t.Errorf("unexpected line %q", line)
			}
		}
		wantGroupResults(t, "sse", results, true)
		want := lmos.GroupActionSummary{Group: "home", Action: "setTarget", Members: 7, Completed: 2, Failed: 2, TimedOut: 1, Offline: 1, Skipped: 1}
		if done == nil || *done != want {
			t.Errorf("done %+v, want %+v", done, want)
		}
		// Partial results stream: the fast members come before the slow
		// one's timeout (1 s) ends the call.
		if firstAt >= time.Second {
			t.Errorf("the first result came after %s, with the slow member's timeout", firstAt)
		}
		if results[len(results)-1].Member != gaSlow {
			t.Errorf("the slow member's result is not the last: %+v", results)
		}
		env.wantOneCallEach(t, "sse", before)
	})
}

// wsGroupAction sends invokeGroupAction (JSON text or CBOR binary) and
// collects its groupActionResults up to the acknowledgement; any other
// message fails the test.
func wsGroupAction(t *testing.T, w *wsClient, binary bool) []lmos.GroupActionResult {
	t.Helper()
	id := w.send(map[string]any{"messageType": "invokeGroupAction", "group": "home", "action": "setTarget",
		"input": map[string]any{"fahrenheit": 70}}, binary)
	var results []lmos.GroupActionResult
	for {
		m := w.next(func(m map[string]any) bool { return true })
		if m["correlationId"] != id {
			t.Fatalf("a message for another request: %v", m)
		}
		if m["messageType"] == "acknowledgement" {
			return results
		}
		if m["messageType"] != "groupActionResult" || m["group"] != "home" || m["action"] != "setTarget" {
			t.Fatalf("unexpected message %v", m)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var r lmos.GroupActionResult
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Error != nil && r.Error.Instance != "/ws" {
			t.Errorf("problem instance %q", r.Error.Instance)
		}
		results = append(results, r)
	}
}

func TestGroupActionWebSocket(t *testing.T) {
	env := startGroupActionHub(t, nil)
	before := env.invocations()
	w := env.h.wsDial("lmosprotocol", nil)
	results := wsGroupAction(t, w, false)
	wantGroupResults(t, "ws", results, true)
	env.wantOneCallEach(t, "ws", before)
	// In CBOR frames, the outputs are CBOR.
	before = env.invocations()
	wantGroupResults(t, "ws cbor", wsGroupAction(t, w, true), true)
	env.wantOneCallEach(t, "ws cbor", before)
	before = env.invocations()
	// A refusal of the whole call is one error message.
	for _, c := range []struct {
		msg    map[string]any
		status float64
	}{
		{map[string]any{"messageType": "invokeGroupAction", "group": "nowhere", "action": "setTarget"}, 404},
		{map[string]any{"messageType": "invokeGroupAction", "group": "lamps", "action": "setTarget"}, 404},
		{map[string]any{"messageType": "invokeGroupAction", "action": "setTarget"}, 400},
	} {
		r := w.reply(w.send(c.msg, false))
		if r["messageType"] != "error" || r["status"] != c.status {
			t.Errorf("%v: %v, want error %v", c.msg, r, c.status)
		}
	}
	if after := env.invocations(); !reflect.DeepEqual(after, before) {
		t.Errorf("a refused call invoked a member: %v → %v", before, after)
	}
}

// pahoGroupAction asks for a group action as an MQTT 5 requester with
// Python paho-mqtt 1.6.1 and prints each message on its Response Topic as
// a JSON line; any protocol error (a refused subscription, a disconnect
// with rc != 0) exits non-zero.
const pahoGroupAction = `
import json, sys, paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
host, port, topic, payload = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cid = "ga-requester"
inbox = "lmos/v1/clients/%s/ga" % cid
state = {"done": False, "err": None}
def on_connect(c, u, flags, rc, props=None):
    if rc != 0:
        state["err"] = "connack %s" % rc; c.disconnect(); return
    c.subscribe(inbox, qos=1)
def on_subscribe(c, u, mid, rcs, props=None):
    if any(r.value >= 0x80 for r in rcs):
        state["err"] = "suback %s" % rcs; c.disconnect(); return
    p = Properties(PacketTypes.PUBLISH)
    p.ResponseTopic = inbox
    p.CorrelationData = b"\x01\x02"
    p.ContentType = "application/json"
    c.publish(topic, payload, qos=1, properties=p)
def on_message(c, u, msg):
    props = msg.properties
    user = dict(getattr(props, "UserProperty", []) or [])
    print(json.dumps({"corr": getattr(props, "CorrelationData", b"").hex(), "ct": getattr(props, "ContentType", ""),
                      "status": user.get("lmos-status"), "member": user.get("lmos-member"),
                      "memberStatus": user.get("lmos-member-status"), "payload": msg.payload.decode()}), flush=True)
    if user.get("lmos-status") in ("completed", "failed"):
        state["done"] = True; c.disconnect()
def on_disconnect(c, u, rc, props=None):
    if rc != 0 and not state["done"]:
        state["err"] = "disconnected rc=%s" % rc
c = mqtt.Client(client_id=cid, protocol=mqtt.MQTTv5)
c.on_connect, c.on_subscribe, c.on_message, c.on_disconnect = on_connect, on_subscribe, on_message, on_disconnect
c.connect(host, port)
c.loop_forever()
if state["err"] or not state["done"]:
    sys.stderr.write("paho: %s\n" % (state["err"] or "no final message")); sys.exit(1)
`

// gaMQTTMessage is one line pahoGroupAction printed.
type gaMQTTMessage struct {
	Corr, Ct, Status, Member, MemberStatus, Payload string
}

func runPahoGroupAction(t *testing.T, h *testHub, topic, payload string) []gaMQTTMessage {
	t.Helper()
	out, _ := runPaho(t, h, 20*time.Second, pahoGroupAction, topic, payload)
	var msgs []gaMQTTMessage
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var m gaMQTTMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("paho printed %q", line)
		}
		if m.Corr != "0102" || m.Ct != "application/json" {
			t.Errorf("message without the request's correlation data or JSON content type: %+v", m)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func TestGroupActionMQTT(t *testing.T) {
	env := startGroupActionHub(t, nil)
	// The request is the hub's: no subscriber of lmos/v1/hub/# sees it.
	watcher := env.h.mqttDial(nil)
	watcher.sub("lmos/v1/hub/#")
	before := env.invocations()
	msgs := runPahoGroupAction(t, env.h, lmos.GroupActionTopic("home", "setTarget"), gaInput)
	if len(msgs) == 0 {
		t.Fatal("no messages")
	}
	var results []lmos.GroupActionResult
	for _, m := range msgs[:len(msgs)-1] {
		var r lmos.GroupActionResult
		if err := json.Unmarshal([]byte(m.Payload), &r); err != nil {
			t.Fatalf("member message %+v: %v", m, err)
		}
		if m.Status != "running" || m.Member != r.Member || m.MemberStatus != r.Status {
			t.Errorf("member message properties %+v for result %+v", m, r)
		}
		results = append(results, r)
	}
	wantGroupResults(t, "mqtt", results, true)
	last := msgs[len(msgs)-1]
	var sum lmos.GroupActionSummary
	if last.Status != "completed" || last.Member != "" || json.Unmarshal([]byte(last.Payload), &sum) != nil ||
		sum != (lmos.GroupActionSummary{Group: "home", Action: "setTarget", Members: 7, Completed: 2, Failed: 2, TimedOut: 1, Offline: 1, Skipped: 1}) {
		t.Errorf("final message %+v", last)
	}
	env.wantOneCallEach(t, "mqtt", before)
	watcher.None(lmos.GroupActionTopic("home", "setTarget"), 200*time.Millisecond)
	before = env.invocations()

	// A call refused as a whole is one failed message with its problem.
	for _, c := range []struct {
		topic, payload string
		status         int
	}{
		{lmos.GroupActionTopic("nowhere", "setTarget"), gaInput, 404},
		{lmos.GroupActionTopic("lamps", "setTarget"), gaInput, 404},
		{lmos.GroupActionTopic("home", "setTarget"), `{"fahrenheit":`, 400},
	} {
		msgs := runPahoGroupAction(t, env.h, c.topic, c.payload)
		var p lmos.Problem
		if len(msgs) != 1 || msgs[0].Status != "failed" || json.Unmarshal([]byte(msgs[0].Payload), &p) != nil || p.Status != c.status {
			t.Errorf("%s %s: %+v, want one failed %d", c.topic, c.payload, msgs, c.status)
		}
	}
	if after := env.invocations(); !reflect.DeepEqual(after, before) {
		t.Errorf("a refused call invoked a member: %v → %v", before, after)
	}

	// MQTT 3.1.1 cannot ask for results: the call runs fire-and-forget
	// (mosquitto_pub, which fails on any protocol error).
	pub, _ := requireMosquitto(t)
	if out, err := env.h.mosq(pub, "-V", "311", "-q", "1", "-t", lmos.GroupActionTopic("home", "setTarget"), "-m", gaInput); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for env.calls[gaAcme].Load() == before[gaAcme] && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := env.calls[gaAcme].Load() - before[gaAcme]; got != 1 {
		t.Errorf("the 3.1.1 group action invoked acme %d times, want 1", got)
	}
}

// A consumer without the operate right is refused on every door (401
// anonymous under access.anonymous read, 403 for a read token) with its
// problem, counted, and no member is invoked; an unknown group is 404, a
// group none of whose members has the action 404, bad input 400.
func TestGroupActionRefusals(t *testing.T) {
	env := startGroupActionHub(t, func(c *Config) { c.Access.Anonymous = "read" })
	h := env.h
	before := env.invocations()
	readToken, _ := createToken(t, h, "read", "")
	path := "/api/groups/home/actions/setTarget"
	for _, c := range []struct {
		name, path, token, body string
		status                  int
		reason                  string
	}{
		{"anonymous", path, "", gaInput, 401, "unauthorized"},
		{"read token", path, readToken, gaInput, 403, "forbidden"},
		{"unknown group", "/api/groups/nowhere/actions/setTarget", testToken, gaInput, 404, "not-found"},
		{"no member has it", "/api/groups/lamps/actions/setTarget", testToken, gaInput, 404, "not-found"},
		{"unknown action", "/api/groups/home/actions/explode", testToken, gaInput, 404, "not-found"},
		{"bad input", path, testToken, `{"fahrenheit":`, 400, "invalid"},
	} {
		counter := fmt.Sprintf(`lmos_http_refused_total{reason=%q}`, c.reason)
		n := h.refusals(counter)
		resp, body := h.request(http.MethodPost, c.path, "application/json", "application/json", []byte(c.body), c.token)
		var p lmos.Problem
		if resp.StatusCode != c.status || lmos.MediaType(resp.Header.Get("Content-Type")) != lmos.MediaProblem ||
			json.Unmarshal(body, &p) != nil || p.Status != c.status || p.Type != lmos.ErrorTypeBase+c.reason || p.Instance != c.path {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		}
		if got := h.refusals(counter); got != n+1 {
			t.Errorf("%s: %s went from %d to %d", c.name, counter, n, got)
		}
	}
	// WebSocket: anonymous and read-token consumers.
	for _, c := range []struct {
		token  string
		status float64
	}{{"", 401}, {readToken, 403}} {
		w := wsConsumer(t, h, c.token, false)
		r := w.reply(w.send(map[string]any{"messageType": "invokeGroupAction", "group": "home", "action": "setTarget",
			"input": map[string]any{"fahrenheit": 70}}, false))
		if r["messageType"] != "error" || r["status"] != c.status {
			t.Errorf("ws %q: %v", c.token, r)
		}
	}
	// MQTT: an anonymous QoS 1 request gets PUBACK 0x87 and nothing on its
	// Response Topic.
	mc := h.mqttDial(nil)
	n := h.refusals(`lmos_mqtt_refused_total{reason="unauthorized"}`)
	pr, err := mc.Pub(lmos.GroupActionTopic("home", "setTarget"), []byte(gaInput), 1, false, "application/json")
	if pr == nil || pr.ReasonCode != 0x87 {
		t.Errorf("mqtt anonymous group action: PUBACK %+v (%v), want 0x87", pr, err)
	}
	if got := h.refusals(`lmos_mqtt_refused_total{reason="unauthorized"}`); got != n+1 {
		t.Errorf("lmos_mqtt_refused_total{reason=\"unauthorized\"} went from %d to %d", n, got)
	}
	if after := env.invocations(); !reflect.DeepEqual(after, before) {
		t.Errorf("refused calls invoked members: %v → %v", before, after)
	}
}
