package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// Group channels over WebSocket and HTTP SSE (PROTOCOL §7, issue 15):
// members on every door share one channel through the broker.

// gws is a /ws client that keeps the messages a wait for another one
// passes over: group messages arrive between the answers.
type gws struct {
	*wsClient
	stash []map[string]any
}

func newGWS(w *wsClient) *gws { return &gws{wsClient: w} }

// next returns the first message, kept or new, that keep wants.
func (g *gws) next(keep func(map[string]any) bool) map[string]any {
	g.t.Helper()
	for i, m := range g.stash {
		if keep == nil || keep(m) {
			g.stash = append(g.stash[:i:i], g.stash[i+1:]...)
			return m
		}
	}
	for {
		m := g.wsClient.next(nil)
		if keep == nil || keep(m) {
			return m
		}
		g.stash = append(g.stash, m)
	}
}

// reply is the answer to the request id (not a groupMessage of the
// subscription id).
func (g *gws) reply(id string) map[string]any {
	g.t.Helper()
	return g.next(func(m map[string]any) bool { return m["correlationId"] == id && m["messageType"] != "groupMessage" })
}

// wsMember registers id on a new /ws connection (it acts as that Thing).
func wsMember(t *testing.T, h *testHub, id string) *gws {
	t.Helper()
	w := newGWS(h.wsDial("lmosprotocol", nil))
	mid := w.send(map[string]any{"messageType": "registerThing", "td": wsTD(id)}, false)
	if r := w.reply(mid); r["messageType"] != "acknowledgement" || r["message"] != "registered" {
		t.Fatalf("registerThing %s: %v", id, r)
	}
	return w
}

// boundToken creates a token bound to thing (scope read by default).
func boundToken(t *testing.T, h *testHub, thing string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"name": "member", "thing": thing})
	resp, b := h.do(http.MethodPost, "/api/tokens", "application/json", body, testToken)
	var v struct{ Token, Scope, Thing string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &v) != nil || v.Token == "" || v.Thing != thing || v.Scope != "read" {
		t.Fatalf("POST /api/tokens {thing: %s}: %d %s", thing, resp.StatusCode, b)
	}
	return v.Token
}

// groupReq sends a group message (subscribeGroup, unsubscribeGroup,
// publishGroup) and returns the hub's answer to it.
func groupReq(t *testing.T, w *gws, typ, group, topic string, data any, binary bool) map[string]any {
	t.Helper()
	m := map[string]any{"messageType": typ, "group": group, "topic": topic}
	if data != nil {
		m["data"] = data
	}
	return w.reply(w.send(m, binary))
}

func wantAck(t *testing.T, r map[string]any, what string) {
	t.Helper()
	if r["messageType"] != "acknowledgement" {
		t.Fatalf("%s: %v", what, r)
	}
}

// wantRefused checks an error answer with status (401 or 403).
func wantRefused(t *testing.T, r map[string]any, status int, what string) {
	t.Helper()
	s, _ := r["status"].(float64)
	if st, ok := r["status"].(uint64); ok {
		s = float64(st)
	}
	if r["messageType"] != "error" || int(s) != status || !strings.HasSuffix(fmt.Sprint(r["type"]), map[int]string{401: "unauthorized", 403: "forbidden"}[status]) || r["detail"] == "" {
		t.Fatalf("%s: want error %d, got %v", what, status, r)
	}
}

// groupMessages collects the groupMessages a client gets, by topic.
func groupMessages(t *testing.T, w *gws, n int) []map[string]any {
	t.Helper()
	var out []map[string]any
	for len(out) < n {
		out = append(out, w.next(func(m map[string]any) bool { return m["messageType"] == "groupMessage" }))
	}
	return out
}

// sseMessage is one `event: message` of a group channel stream.
type sseMessage struct {
	Topic       string `json:"topic"`
	Data        any    `json:"data"`
	ContentType string `json:"contentType"`
}

func sseMessages(t *testing.T, s *sseStream, n int) []sseMessage {
	t.Helper()
	var out []sseMessage
	for len(out) < n {
		ev := s.next(5 * time.Second)
		if ev.Type != "message" {
			t.Fatalf("group channel stream: %q %s", ev.Type, ev.Data)
		}
		var m sseMessage
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
			t.Fatalf("group channel event %q: %v", ev.Data, err)
		}
		out = append(out, m)
	}
	return out
}

// number reads a JSON or CBOR number.
func number(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case uint64:
		return int(n)
	case int64:
		return int(n)
	}
	return -1
}

func TestGroupChannelWebSocketAndSSEMembersShareOneChannel(t *testing.T) {
	h := startHub(t, nil)
	ctx := context.Background()
	a := wsMember(t, h, "urn:g:a")
	h.put("urn:g:b", makeTD("urn:g:b", "B"))
	tokB := boundToken(t, h, "urn:g:b")
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{"urn:g:a", "urn:g:b"}}); err != nil {
		t.Fatal(err)
	}
	// B over WebSocket with its bound token, in CBOR, on temp/+ only; and
	// B over SSE on everything.
	b := newGWS(wsConsumer(t, h, tokB, false))
	wantAck(t, groupReq(t, a, "subscribeGroup", "kitchen", "#", nil, false), "subscribe A")
	wantAck(t, groupReq(t, b, "subscribeGroup", "kitchen", "temp/+", nil, true), "subscribe B")
	sse := h.openSSEWith("/api/groups/kitchen/channel?topic=%23", tokB)

	const n = 20
	for i := range n {
		wantAck(t, groupReq(t, a, "publishGroup", "kitchen", "temp/living", map[string]any{"n": i}, false), "publish A")
		wantAck(t, groupReq(t, b, "publishGroup", "kitchen", "temp/bed", map[string]any{"n": i}, true), "publish B")
	}
	wantAck(t, groupReq(t, a, "publishGroup", "kitchen", "lights", "off", false), "publish lights")

	// Every member got every message it was owed, in order per publisher,
	// and nothing else: A and the SSE stream 2n+1, B (temp/+) 2n.
	check := func(who string, topics []string, datas []any, cts []string, want int) {
		t.Helper()
		next := map[string]int{}
		if len(topics) != want {
			t.Fatalf("%s got %d messages, want %d", who, len(topics), want)
		}
		for i, topic := range topics {
			switch topic {
			case "temp/living", "temp/bed":
				d, _ := datas[i].(map[string]any)
				if got := number(d["n"]); got != next[topic] {
					t.Fatalf("%s: %s message %d carries %v", who, topic, next[topic], datas[i])
				}
				next[topic]++
				wantCT := map[string]string{"temp/living": "application/json", "temp/bed": "application/cbor"}[topic]
				if cts[i] != wantCT {
					t.Errorf("%s: %s contentType %q, want %q", who, topic, cts[i], wantCT)
				}
			case "lights":
				if datas[i] != "off" {
					t.Fatalf("%s: lights carries %v", who, datas[i])
				}
				next[topic]++
			default:
				t.Fatalf("%s: unexpected topic %q", who, topic)
			}
		}
	}
	split := func(ms []map[string]any) (topics []string, datas []any, cts []string) {
		for _, m := range ms {
			if m["group"] != "kitchen" {
				t.Fatalf("groupMessage of group %v", m["group"])
			}
			topics = append(topics, fmt.Sprint(m["topic"]))
			datas = append(datas, m["data"])
			cts = append(cts, fmt.Sprint(m["contentType"]))
		}
		return
	}
	ta, da, ca := split(groupMessages(t, a, 2*n+1))
	check("A (ws json)", ta, da, ca, 2*n+1)
	tb, db, cb := split(groupMessages(t, b, 2*n))
	check("B (ws cbor)", tb, db, cb, 2*n)
	var ts []string
	var ds []any
	var cs []string
	for _, m := range sseMessages(t, sse, 2*n+1) {
		ts, ds, cs = append(ts, m.Topic), append(ds, m.Data), append(cs, m.ContentType)
	}
	check("B (sse)", ts, ds, cs, 2*n+1)
	// Nothing more is owed: a last marker is the next message everywhere.
	wantAck(t, groupReq(t, a, "publishGroup", "kitchen", "temp/end", true, false), "publish end")
	for who, w := range map[string]*gws{"A": a, "B": b} {
		if m := groupMessages(t, w, 1)[0]; m["topic"] != "temp/end" {
			t.Fatalf("%s got %v before the marker", who, m)
		}
	}
	if m := sseMessages(t, sse, 1)[0]; m.Topic != "temp/end" {
		t.Fatalf("sse got %v before the marker", m)
	}
}

func TestGroupChannelNonMembersRefused(t *testing.T) {
	h := startHub(t, nil)
	ctx := context.Background()
	a := wsMember(t, h, "urn:g:a")
	c := wsMember(t, h, "urn:g:c") // registered, in group "other" only
	h.put("urn:g:b", makeTD("urn:g:b", "B"))
	tokC := boundToken(t, h, "urn:g:c")
	tokGhost := boundToken(t, h, "urn:g:ghost") // bound to a Thing that is not registered
	reg := h.Main.Registry
	if _, err := reg.CreateGroup(ctx, hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{"urn:g:a", "urn:g:b"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CreateGroup(ctx, hub.GroupSpec{ID: "other", Title: "Other", Members: []string{"urn:g:c"}}); err != nil {
		t.Fatal(err)
	}
	wantAck(t, groupReq(t, a, "subscribeGroup", "kitchen", "#", nil, false), "subscribe A")
	before := map[string]int{}
	for _, r := range []string{"unauthorized", "forbidden"} {
		before["ws"+r] = metricValue(t, h, `lmos_ws_refused_total{reason="`+r+`"}`)
		before["http"+r] = metricValue(t, h, `lmos_http_refused_total{reason="`+r+`"}`)
	}

	// WebSocket: a Thing of another group (its socket, its bound token), an
	// admin token, anonymous.
	anon := newGWS(wsConsumer(t, h, "", false))
	admin := newGWS(wsConsumer(t, h, testToken, false))
	cTok := newGWS(wsConsumer(t, h, tokC, false))
	wsCases := []struct {
		who    string
		w      *gws
		status int
	}{{"member of another group", c, 403}, {"its bound token", cTok, 403}, {"admin token", admin, 403}, {"anonymous", anon, 401}}
	for _, tc := range wsCases {
		wantRefused(t, groupReq(t, tc.w, "subscribeGroup", "kitchen", "#", nil, false), tc.status, tc.who+" subscribe")
		wantRefused(t, groupReq(t, tc.w, "publishGroup", "kitchen", "temp", map[string]any{"from": tc.who}, false), tc.status, tc.who+" publish")
		wantRefused(t, groupReq(t, tc.w, "publishGroup", "kitchen", "temp", map[string]any{"from": tc.who}, true), tc.status, tc.who+" publish cbor")
	}
	// A member's identity does not reach another group's channel; an
	// unknown group is no different.
	wantRefused(t, groupReq(t, a, "publishGroup", "other", "x", 1, false), 403, "A on other")
	wantRefused(t, groupReq(t, a, "subscribeGroup", "nosuch", "#", nil, false), 403, "A on an unknown group")
	// Bad topics are refused as invalid, not published.
	for _, topic := range []string{"a/#", "+", "a\x00b", strings.Repeat("x", 1025)} {
		r := groupReq(t, a, "publishGroup", "kitchen", topic, 1, false)
		if r["messageType"] != "error" || number(r["status"]) != 400 {
			t.Fatalf("publish on %q: %v", lmosTrunc(topic), r)
		}
	}
	for _, filter := range []string{"a/#/b", "a+", "#x"} {
		r := groupReq(t, a, "subscribeGroup", "kitchen", filter, nil, false)
		if r["messageType"] != "error" || number(r["status"]) != 400 {
			t.Fatalf("subscribe %q: %v", filter, r)
		}
	}

	// SSE: no token 401, admin 403, another group's member 403, a token
	// bound to a Thing that is no member 403, a bad filter 400.
	sseCases := []struct {
		who, token, path string
		status           int
	}{
		{"anonymous", "", "/api/groups/kitchen/channel", 401},
		{"admin token", testToken, "/api/groups/kitchen/channel", 403},
		{"member of another group", tokC, "/api/groups/kitchen/channel", 403},
		{"token of an unregistered Thing", tokGhost, "/api/groups/kitchen/channel", 403},
		{"unknown group", tokC, "/api/groups/nosuch/channel", 403},
		{"bad filter", tokC, "/api/groups/other/channel?topic=" + url.QueryEscape("a/#/b"), 400},
	}
	for _, tc := range sseCases {
		resp, body := h.do(http.MethodGet, tc.path, "", nil, tc.token)
		var p struct {
			Type   string
			Status int
			Detail string
		}
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal(body, &p) != nil || p.Status != tc.status || p.Detail == "" {
			t.Fatalf("%s: GET %s: %d %q %s", tc.who, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.who)
		}
	}

	// Nothing of it reached the member: its next message is a marker.
	wantAck(t, groupReq(t, a, "publishGroup", "kitchen", "marker", 1, false), "marker")
	if m := groupMessages(t, a, 1)[0]; m["topic"] != "marker" {
		t.Fatalf("a refused publish was delivered: %v", m)
	}
	// Counted on each door.
	for _, c := range []struct {
		door, reason string
		want         int
	}{{"ws", "forbidden", 3*3 + 2}, {"ws", "unauthorized", 3}, {"http", "forbidden", 4}, {"http", "unauthorized", 1}} {
		got := metricValue(t, h, fmt.Sprintf(`lmos_%s_refused_total{reason=%q}`, c.door, c.reason)) - before[c.door+c.reason]
		if got != c.want {
			t.Errorf("lmos_%s_refused_total{reason=%q} counted %d, want %d", c.door, c.reason, got, c.want)
		}
	}
}

func lmosTrunc(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// A member removed while subscribed (WebSocket and SSE) gets no message
// published after the removal was acknowledged, is told, and is refused
// from then on; the others keep the channel. Dissolving the group ends
// everyone's.
func TestGroupChannelRemovalAndDissolutionEndAccessAtOnce(t *testing.T) {
	h := startHub(t, nil)
	ctx := context.Background()
	a := wsMember(t, h, "urn:g:a")
	pub := wsMember(t, h, "urn:g:p")
	h.put("urn:g:b", makeTD("urn:g:b", "B"))
	tokB := boundToken(t, h, "urn:g:b")
	reg := h.Main.Registry
	if _, err := reg.CreateGroup(ctx, hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{"urn:g:a", "urn:g:b", "urn:g:p"}}); err != nil {
		t.Fatal(err)
	}
	b := newGWS(wsConsumer(t, h, tokB, false))
	subA := a.send(map[string]any{"messageType": "subscribeGroup", "group": "kitchen", "topic": "#"}, false)
	wantAck(t, a.reply(subA), "subscribe A")
	subB := b.send(map[string]any{"messageType": "subscribeGroup", "group": "kitchen", "topic": "#"}, true)
	wantAck(t, b.reply(subB), "subscribe B")
	sse := h.openSSEWith("/api/groups/kitchen/channel", tokB)

	// The publisher publishes without waiting for acknowledgements while B
	// is removed; every publish sent after RemoveMember returned must not
	// reach B.
	var removed atomic.Bool
	firstAfter := atomic.Int64{}
	firstAfter.Store(-1)
	const total = 150 // within the connection's message burst (200)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range total {
			if removed.Load() {
				firstAfter.CompareAndSwap(-1, int64(i))
			}
			pub.send(map[string]any{"messageType": "publishGroup", "group": "kitchen", "topic": "seq", "data": i}, false)
			if i == total/4 {
				time.Sleep(20 * time.Millisecond) // let some reach B first
			}
		}
	}()
	// Remove B once it has seen a few messages.
	groupMessages(t, b, 5)
	if _, err := reg.RemoveMember(ctx, "kitchen", "urn:g:b"); err != nil {
		t.Fatal(err)
	}
	removed.Store(true)
	<-sent
	after := int(firstAfter.Load())
	if after < 0 {
		t.Fatal("every publish went out before the removal: the test proves nothing")
	}

	// A gets all of them, in order.
	for i, m := range groupMessages(t, a, total) {
		if number(m["data"]) != i {
			t.Fatalf("A: message %d carries %v", i, m["data"])
		}
	}
	// B (WebSocket): messages before the removal, then the error on its
	// subscription, and nothing published after the removal.
	ended := false
	last := -1
	for !ended {
		m := b.next(nil)
		switch {
		case m["messageType"] == "groupMessage":
			n := number(m["data"])
			if n >= after {
				t.Fatalf("B got message %d, published after its removal was acknowledged (first after: %d)", n, after)
			}
			last = n
		case m["messageType"] == "error" && m["correlationId"] == subB:
			wantRefused(t, m, 403, "B's subscription end")
			ended = true
		}
	}
	t.Logf("B (ws) got up to %d; the first publish after the removal was %d", last, after)
	// B (SSE): the same, then an error event and the end of the stream.
	for {
		ev, ok := <-sse.C
		if !ok {
			t.Fatal("the stream ended without an error event")
		}
		if ev.Type == "error" {
			if !strings.Contains(ev.Data, `"status":403`) {
				t.Fatalf("sse error event %s", ev.Data)
			}
			break
		}
		var m sseMessage
		_ = json.Unmarshal([]byte(ev.Data), &m)
		if number(m.Data) >= after {
			t.Fatalf("sse got message %v, published after the removal was acknowledged", m.Data)
		}
	}
	if _, ok := <-sse.C; ok {
		t.Fatal("the stream went on after its error event")
	}
	// B is refused from now on, on both doors.
	wantRefused(t, groupReq(t, b, "subscribeGroup", "kitchen", "#", nil, true), 403, "B subscribes again")
	wantRefused(t, groupReq(t, b, "publishGroup", "kitchen", "x", 1, true), 403, "B publishes")
	if resp, body := h.do(http.MethodGet, "/api/groups/kitchen/channel", "", nil, tokB); resp.StatusCode != 403 {
		t.Fatalf("B's stream after removal: %d %s", resp.StatusCode, body)
	}

	// Dissolving ends A's subscription too, and refuses its publish.
	if err := reg.DissolveGroup(ctx, "kitchen"); err != nil {
		t.Fatal(err)
	}
	m := a.next(func(m map[string]any) bool { return m["messageType"] == "error" })
	if m["correlationId"] != subA {
		t.Fatalf("A's error after dissolution: %v", m)
	}
	wantRefused(t, m, 403, "A's subscription end")
	wantRefused(t, groupReq(t, a, "publishGroup", "kitchen", "x", 1, false), 403, "A publishes to a dissolved group")
}

// A member on MQTT (mosquitto_sub and mosquitto_pub, MQTT 5 and 3.1.1), a
// WebSocket member and an SSE member share one channel: each gets every
// message the others publish, counted, in order per publisher. MQTT
// membership itself (the ACL) is the broker's: where this tree refuses
// group topics to MQTT members the test says so and skips.
func TestGroupChannelMQTTWebSocketAndSSEMembers(t *testing.T) {
	pubBin := mosquittoTool(t, "mosquitto_pub")
	subBin := mosquittoTool(t, "mosquitto_sub")
	h := startHub(t, nil)
	ctx := context.Background()
	a := wsMember(t, h, "urn:g:a")
	h.put("urn:g:b", makeTD("urn:g:b", "B"))
	tokB := boundToken(t, h, "urn:g:b")
	const mid = "urn:g:m"
	creds := h.mqttDial(nil).join(mid, makeTD(mid, "M"))
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{"urn:g:a", "urn:g:b", mid}}); err != nil {
		t.Fatal(err)
	}
	probe := h.mqttDial(thingConnect(creds))
	sa, err := probe.C.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "lmos/v1/groups/kitchen/#", QoS: 1}}})
	if sa != nil && len(sa.Reasons) == 1 && sa.Reasons[0] >= 0x80 {
		t.Fatalf("the MQTT ACL refuses a member its group channel (SUBACK %#x)", sa.Reasons[0])
	}
	if err != nil {
		t.Fatal(err)
	}
	// Unsubscribed (UNSUBACK) before it leaves, so the probe's
	// subscription is not still counted below when mosquitto_sub's is
	// awaited: a DISCONNECT is handled after the client has moved on.
	if _, err := probe.C.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"lmos/v1/groups/kitchen/#"}}); err != nil {
		t.Fatal(err)
	}
	probe.C.Disconnect(&paho.Disconnect{})

	wantAck(t, groupReq(t, a, "subscribeGroup", "kitchen", "#", nil, false), "subscribe A")
	sse := h.openSSEWith("/api/groups/kitchen/channel", tokB)
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	mosq := func(bin string, args ...string) *exec.Cmd {
		return exec.Command(bin, append([]string{"-h", host, "-p", port, "-u", creds.Username, "-P", creds.Password}, args...)...)
	}
	const nWS, nMQ = 10, 5
	sub := mosq(subBin, "-V", "5", "-i", "m-sub", "-q", "1", "-t", "lmos/v1/groups/kitchen/#", "-C", strconv.Itoa(nWS+2*nMQ), "-W", "10", "-F", "%t|%C|%p")
	var out, errb bytes.Buffer
	sub.Stdout, sub.Stderr = &out, &errb
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Process.Kill() })
	// mosquitto_sub has subscribed once the hub counts its subscription.
	waitFor(t, 5*time.Second, "mosquitto_sub subscribed", func() bool {
		return h.Main.Broker.Subscribers("lmos/v1/groups/kitchen/x") >= 2 // the hub's own and mosquitto_sub's
	})
	for i := range nWS {
		wantAck(t, groupReq(t, a, "publishGroup", "kitchen", "ws", map[string]any{"n": i}, false), "publish A")
	}
	for i := range nMQ {
		for _, v := range []string{"5", "311"} {
			args := []string{"-V", v, "-i", "m-pub", "-q", "1", "-t", "lmos/v1/groups/kitchen/mqtt" + v, "-m", fmt.Sprintf(`{"n":%d}`, i)}
			if v == "5" {
				args = append(args, "-D", "publish", "content-type", "application/json")
			}
			if b, err := mosq(pubBin, args...).CombinedOutput(); err != nil {
				t.Fatalf("mosquitto_pub -V %s: %v\n%s", v, err, b)
			}
		}
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("mosquitto_sub: %v\n%s\n%s", err, out.String(), errb.String())
	}
	// mosquitto_sub (MQTT 5): the WebSocket member's messages with their
	// content type, and the MQTT ones.
	next := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("mosquitto_sub line %q", line)
		}
		topic := strings.TrimPrefix(parts[0], "lmos/v1/groups/kitchen/")
		if want := fmt.Sprintf(`{"n":%d}`, next[topic]); parts[2] != want {
			t.Fatalf("mosquitto_sub: %s carries %s, want %s", topic, parts[2], want)
		}
		if topic == "ws" && parts[1] != "application/json" {
			t.Errorf("a WebSocket member's JSON reaches MQTT as %q", parts[1])
		}
		next[topic]++
	}
	if next["ws"] != nWS || next["mqtt5"] != nMQ || next["mqtt311"] != nMQ {
		t.Fatalf("mosquitto_sub got %v", next)
	}
	// The WebSocket and SSE members get the MQTT member's messages (the
	// 3.1.1 ones without a content type: JSON that parses is JSON).
	wsGot := map[string]int{}
	for _, m := range groupMessages(t, a, nWS+2*nMQ) {
		topic := fmt.Sprint(m["topic"])
		d, _ := m["data"].(map[string]any)
		if number(d["n"]) != wsGot[topic] {
			t.Fatalf("A: %s message %d carries %v", topic, wsGot[topic], m["data"])
		}
		wsGot[topic]++
	}
	sseGot := map[string]int{}
	for _, m := range sseMessages(t, sse, nWS+2*nMQ) {
		d, _ := m.Data.(map[string]any)
		if number(d["n"]) != sseGot[m.Topic] {
			t.Fatalf("SSE: %s message %d carries %v", m.Topic, sseGot[m.Topic], m.Data)
		}
		sseGot[m.Topic]++
	}
	for who, got := range map[string]map[string]int{"A": wsGot, "SSE": sseGot} {
		if got["ws"] != nWS || got["mqtt5"] != nMQ || got["mqtt311"] != nMQ {
			t.Errorf("%s got %v", who, got)
		}
	}
}

// TestNodeWSGroupChannel: a member nobody here wrote (npm ws + cbor-x on
// /ws with a token bound to it, Node's fetch reading the SSE channel)
// publishes in JSON and CBOR frames and gets every message on both, each
// with the content type it was published with.
func TestNodeWSGroupChannel(t *testing.T) {
	script := hubtest.InteropScript(t, "ws-group.mjs", "ws")
	h := startHub(t, nil)
	h.put("urn:g:node", makeTD("urn:g:node", "Node member"))
	tok := boundToken(t, h, "urn:g:node")
	if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "porch", Title: "Porch", Members: []string{"urn:g:node"}}); err != nil {
		t.Fatal(err)
	}
	const n = 10
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws", h.URL, tok, "porch", strconv.Itoa(n))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var got struct{ WS, SSE [][2]any }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node output %q: %v", out, err)
	}
	for who, msgs := range map[string][][2]any{"ws": got.WS, "sse": got.SSE} {
		if len(msgs) != n {
			t.Fatalf("%s got %d messages, want %d: %v", who, len(msgs), n, msgs)
		}
		for i, m := range msgs {
			want := "application/json"
			if i%2 == 1 {
				want = "application/cbor"
			}
			if number(m[0]) != i || m[1] != want {
				t.Errorf("%s message %d: %v, want [%d %s]", who, i, m, i, want)
			}
		}
	}
}

// A bound token revoked while its WebSocket subscription and SSE stream
// are open ends both at the next message (401), which is not delivered.
func TestGroupChannelRevokedTokenEndsSubscriptions(t *testing.T) {
	h := startHub(t, nil)
	a := wsMember(t, h, "urn:g:a")
	h.put("urn:g:b", makeTD("urn:g:b", "B"))
	body, _ := json.Marshal(map[string]string{"name": "b", "thing": "urn:g:b"})
	resp, b := h.do(http.MethodPost, "/api/tokens", "application/json", body, testToken)
	var tok struct{ Token, ID string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &tok) != nil {
		t.Fatalf("POST /api/tokens: %d %s", resp.StatusCode, b)
	}
	if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{"urn:g:a", "urn:g:b"}}); err != nil {
		t.Fatal(err)
	}
	wb := newGWS(wsConsumer(t, h, tok.Token, false))
	sub := wb.send(map[string]any{"messageType": "subscribeGroup", "group": "kitchen", "topic": "#"}, false)
	wantAck(t, wb.reply(sub), "subscribe B")
	sse := h.openSSEWith("/api/groups/kitchen/channel", tok.Token)
	wantAck(t, groupReq(t, a, "publishGroup", "kitchen", "before", 1, false), "publish before")
	if m := groupMessages(t, wb, 1)[0]; m["topic"] != "before" {
		t.Fatalf("B got %v", m)
	}
	if m := sseMessages(t, sse, 1)[0]; m.Topic != "before" {
		t.Fatalf("sse got %v", m)
	}
	if resp, b := h.do(http.MethodDelete, "/api/tokens/"+tok.ID, "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", resp.StatusCode, b)
	}
	wantAck(t, groupReq(t, a, "publishGroup", "kitchen", "after", 2, false), "publish after")
	m := wb.next(func(m map[string]any) bool { return m["correlationId"] == sub })
	if m["messageType"] == "groupMessage" {
		t.Fatalf("B got %v after its token was revoked", m)
	}
	wantRefused(t, m, 401, "B's subscription with a revoked token")
	ev := sse.next(5 * time.Second)
	if ev.Type != "error" || !strings.Contains(ev.Data, `"status":401`) {
		t.Fatalf("sse after the revocation: %q %s", ev.Type, ev.Data)
	}
	if _, ok := <-sse.C; ok {
		t.Fatal("the stream went on after its error event")
	}
	// The revoked token opens nothing any more.
	wantRefused(t, groupReq(t, wb, "subscribeGroup", "kitchen", "#", nil, false), 401, "B subscribes with a revoked token")
	if resp, body := h.do(http.MethodGet, "/api/groups/kitchen/channel", "", nil, tok.Token); resp.StatusCode != 401 {
		t.Fatalf("a stream with a revoked token: %d %s", resp.StatusCode, body)
	}
}

// A connection opened with a token that is bound to no Thing (an operate
// token, as an agent on a hub without anonymous access uses) speaks on
// group channels for the Things it registered: here a member.
func TestGroupChannelTokenConnectionSpeaksForItsThing(t *testing.T) {
	h := startHub(t, nil)
	op, _ := createToken(t, h, "operate", "")
	w := newGWS(wsConsumer(t, h, op, false))
	mid := w.send(map[string]any{"messageType": "registerThing", "td": wsTD("urn:g:agent")}, false)
	if r := w.reply(mid); r["messageType"] != "acknowledgement" {
		t.Fatalf("registerThing: %v", r)
	}
	wantRefused(t, groupReq(t, w, "subscribeGroup", "kitchen", "#", nil, false), 403, "before it is a member")
	if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{"urn:g:agent"}}); err != nil {
		t.Fatal(err)
	}
	wantAck(t, groupReq(t, w, "subscribeGroup", "kitchen", "#", nil, false), "subscribe")
	wantAck(t, groupReq(t, w, "publishGroup", "kitchen", "x", 1, false), "publish")
	if m := groupMessages(t, w, 1)[0]; m["topic"] != "x" {
		t.Fatalf("got %v", m)
	}
}

// POST /api/tokens {thing} with a bad id is refused (400 at /thing) and
// stores no token; a bound token lists its Thing.
func TestBoundTokenAPI(t *testing.T) {
	h := startHub(t, nil)
	list := func(v any) {
		t.Helper()
		resp, b := h.do(http.MethodGet, "/api/tokens", "", nil, testToken)
		if resp.StatusCode != 200 || json.Unmarshal(b, v) != nil {
			t.Fatalf("GET /api/tokens: %d %s", resp.StatusCode, b)
		}
	}
	count := func() int {
		t.Helper()
		var all []map[string]any
		list(&all)
		return len(all)
	}
	before := count()
	body, _ := json.Marshal(map[string]string{"name": "x", "thing": "not an id"})
	resp, b := h.do(http.MethodPost, "/api/tokens", "application/json", body, testToken)
	var p struct {
		Status           int
		ValidationErrors []struct{ Field string }
	}
	if resp.StatusCode != 400 || json.Unmarshal(b, &p) != nil || p.Status != 400 || len(p.ValidationErrors) != 1 || p.ValidationErrors[0].Field != "/thing" {
		t.Fatalf("POST /api/tokens with a bad thing: %d %s", resp.StatusCode, b)
	}
	if n := count(); n != before {
		t.Fatalf("a refused token was stored: %d tokens, had %d", n, before)
	}
	boundToken(t, h, "urn:g:lamp")
	var all []struct{ Thing, Scope string }
	list(&all)
	found := false
	for _, tk := range all {
		found = found || tk.Thing == "urn:g:lamp" && tk.Scope == "read"
	}
	if !found {
		t.Fatalf("the bound token is not listed with its Thing: %+v", all)
	}
}

// An unsigned WebSocket member whose socket closed can be re-registered
// by anyone (issue 14 lets it, for the directory): that socket is not the
// member on group channels and gets no membership credential, in any join
// mode (an agent coming back is admitted even under closed). A signed
// member coming back with a fresh proof by its key is the member again.
func TestGroupChannelUnsignedTakeoverIsNoMember(t *testing.T) {
	h := startHub(t, nil)
	ctx := context.Background()
	k := newSigningKey(t)
	signed := func(id string, created time.Time) []byte {
		raw, _ := json.Marshal(wsTD(id))
		doc, err := proof.Sign(raw, k, created)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	a := wsMember(t, h, "urn:g:a") // unsigned
	s := newGWS(h.wsDial("lmosprotocol", nil))
	if r := wsRegister(t, s.wsClient, "urn:g:s", signed("urn:g:s", time.Now().Add(-time.Second))); r["messageType"] != "acknowledgement" {
		t.Fatalf("signed registerThing: %v", r)
	}
	b := wsMember(t, h, "urn:g:b")
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{"urn:g:a", "urn:g:b", "urn:g:s"}}); err != nil {
		t.Fatal(err)
	}
	wantAck(t, groupReq(t, b, "subscribeGroup", "kitchen", "#", nil, false), "subscribe B")
	for _, w := range []*gws{a, s} {
		_ = w.c.Close(websocket.StatusNormalClosure, "")
	}
	for _, id := range []string{"urn:g:a", "urn:g:s"} {
		waitFor(t, 5*time.Second, id+" offline", func() bool { st, _ := h.Presence(id); return st == "offline" })
	}
	before := metricValue(t, h, `lmos_ws_refused_total{reason="unauthorized"}`)

	evil := wsMember(t, h, "urn:g:a") // accepted: an unsigned Thing proves nothing
	wantRefused(t, groupReq(t, evil, "subscribeGroup", "kitchen", "#", nil, false), 401, "the taken-over Thing's subscribe")
	wantRefused(t, groupReq(t, evil, "publishGroup", "kitchen", "x", "from evil", false), 401, "the taken-over Thing's publish")
	if got := metricValue(t, h, `lmos_ws_refused_total{reason="unauthorized"}`) - before; got != 2 {
		t.Errorf("lmos_ws_refused_total{reason=unauthorized} counted %d, want 2", got)
	}
	// The signed member back on a new socket with a fresh proof is the
	// member: it subscribes, and its credential came after its ack.
	back := newGWS(h.wsDial("lmosprotocol", nil))
	if r := wsRegister(t, back.wsClient, "urn:g:s", signed("urn:g:s", time.Now())); r["messageType"] != "acknowledgement" {
		t.Fatalf("signed member back: %v", r)
	}
	wantAck(t, groupReq(t, back, "subscribeGroup", "kitchen", "#", nil, false), "the signed member back")
	if c := back.next(func(m map[string]any) bool { return m["messageType"] == "groupCredential" }); c["group"] != "kitchen" || c["credential"] == nil {
		t.Fatalf("the signed member back got %v", c)
	}
	// B's publish reaches B and the signed member, never the taken-over
	// socket, which got no credential either (sent right after the
	// registration's ack, so before the refusals' answers).
	wantAck(t, groupReq(t, b, "publishGroup", "kitchen", "marker", 1, false), "marker")
	if m := groupMessages(t, b, 1)[0]; m["topic"] != "marker" {
		t.Fatalf("B got %v, want only its marker (nothing from the refused publish)", m)
	}
	if m := groupMessages(t, back, 1)[0]; m["topic"] != "marker" {
		t.Fatalf("the signed member got %v", m)
	}
	// One more answer from the hub after the marker went out: whatever
	// it had queued for the taken-over socket came before it.
	wantRefused(t, groupReq(t, evil, "subscribeGroup", "kitchen", "marker", nil, false), 401, "again")
	for _, m := range evil.stash {
		if m["messageType"] == "groupMessage" || m["messageType"] == "groupCredential" {
			t.Errorf("the taken-over socket got %v", m)
		}
	}
}
