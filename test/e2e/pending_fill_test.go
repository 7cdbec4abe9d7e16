package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// Issue 24, point 7: the pending list could be filled for good.

// wsDialFrom opens /ws from the loopback address from: another source to
// the hub.
func (h *testHub) wsDialFrom(from string) *wsClient {
	h.t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws", &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		h.t.Fatalf("dial /ws from %s: %v", from, err)
	}
	return h.wsWrap(c)
}

// registerWS sends registerThing for id and returns its messageId and the
// hub's answer.
func registerWS(w *wsClient, id string) (string, map[string]any) {
	w.t.Helper()
	var td map[string]any
	_ = json.Unmarshal(hubtest.BareTD(id, "knock "+id), &td)
	mid := w.send(map[string]any{"messageType": "registerThing", "thingId": id, "td": td}, false)
	return mid, w.reply(mid)
}

// pendingState is GET /api/join with the fields these tests read.
type pendingState struct {
	Pending int `json:"pending"`
	List    []struct {
		ID, Source        string
		Received, Expires time.Time
	} `json:"list"`
}

func (h *testHub) pendingState() pendingState {
	h.t.Helper()
	resp, body := h.do("GET", "/api/join", "", nil, testToken)
	var st pendingState
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
		h.t.Fatalf("GET /api/join: %d %s", resp.StatusCode, body)
	}
	return st
}

func (st pendingState) ids() []string {
	ids := make([]string, len(st.List))
	for i, p := range st.List {
		ids[i] = p.ID
	}
	return ids
}

// The reproduction, over WebSocket registerThing from 17 loopback
// addresses (coder/websocket): 16 of them fill the pending list (the 17th
// registration of each is refused join.pendingPerSource), after which a
// device's registration from another address was refused 507
// join.pending — and still after a restart. Now it takes the place of the
// oldest stranger's entry: that socket is told 507 on its registration's
// correlationId; the device's entry survives the flood going on and a
// restart; and the admin clears the rest in bulk.
func TestPendingListFilledByStrangersGivesWay(t *testing.T) {
	dir := t.TempDir()
	edit := func(c *Config) { c.Join.Mode = "approve" }
	h := startHubIn(t, dir, edit)

	first := map[string]struct {
		w   *wsClient
		mid string
	}{}
	for s := 2; s <= 17; s++ {
		from := fmt.Sprintf("127.0.0.%d", s)
		w := h.wsDialFrom(from)
		for i := range 17 {
			id := fmt.Sprintf("urn:knock:%d-%d", s, i)
			mid, m := registerWS(w, id)
			if i == 16 {
				expectWSError(t, m, http.StatusInsufficientStorage, lmos.CodeFull, "as many as one source may")
				continue
			}
			if m["messageType"] != "acknowledgement" || m["message"] != lmos.JoinPending {
				t.Fatalf("registration %s from %s: %v", id, from, m)
			}
			if i == 0 {
				first[from] = struct {
					w   *wsClient
					mid string
				}{w, mid}
			}
		}
	}
	if st := h.pendingState(); st.Pending != 256 {
		t.Fatalf("pending %d, want the list full (256)", st.Pending)
	}

	device := h.wsDialFrom("127.0.0.100")
	const lamp = "urn:device:lamp"
	if _, m := registerWS(device, lamp); m["messageType"] != "acknowledgement" || m["message"] != lmos.JoinPending {
		t.Fatalf("the device's registration on a list full of strangers: %v", m)
	}
	// The oldest entry of a source holding the most gave way: the first
	// registration from 127.0.0.2. Its socket hears why, on that
	// registration's correlationId.
	evicted := first["127.0.0.2"]
	expectWSError(t, evicted.w.reply(evicted.mid), http.StatusInsufficientStorage, lmos.CodeFull, "gave way to a newer one")
	st := h.pendingState()
	if st.Pending != 256 || slices.Contains(st.ids(), "urn:knock:2-0") || !slices.Contains(st.ids(), lamp) {
		t.Fatalf("after the device's join: %d pending, lamp listed %v", st.Pending, slices.Contains(st.ids(), lamp))
	}
	for _, p := range st.List {
		if !p.Expires.Equal(p.Received.Add(24 * time.Hour)) {
			t.Fatalf("%s expires %s, received %s: want 24 h later", p.ID, p.Expires, p.Received)
		}
	}

	// The flood goes on from its own addresses: each of its joins takes
	// the place of one of its own, never the device's.
	for s := 2; s <= 17; s++ {
		w := h.wsDialFrom(fmt.Sprintf("127.0.0.%d", s))
		for i := range 2 {
			id := fmt.Sprintf("urn:knock:again-%d-%d", s, i)
			_, m := registerWS(w, id)
			if m["messageType"] != "acknowledgement" && (m["messageType"] != "error" || m["status"] != float64(507)) {
				t.Fatalf("flood registration %s: %v", id, m)
			}
		}
	}
	if st := h.pendingState(); st.Pending != 256 || !slices.Contains(st.ids(), lamp) {
		t.Fatalf("after more of the flood: %d pending, lamp listed %v", st.Pending, slices.Contains(st.ids(), lamp))
	}
	var status struct{ Things int }
	h.getJSON("/api/status", http.StatusOK, &status)
	if status.Things != 0 {
		t.Fatalf("%d Things registered while pending", status.Things)
	}

	// A restart keeps the list as it was.
	before := h.pendingState().ids()
	h.Close()
	h = startHubIn(t, dir, edit)
	if after := h.pendingState().ids(); !slices.Equal(after, before) {
		t.Fatalf("after a restart: %d entries, %d before", len(after), len(before))
	}

	// Bulk denial: refusals first, each with its problem and nothing
	// changed; then the strangers by address, then all.
	opTok, _ := createToken(t, h, "operate", "")
	for _, c := range []struct {
		body, ct, token string
		status          int
		code, detail    string
	}{
		{`{"all": true}`, lmos.MediaJSON, "", 401, lmos.CodeUnauthorized, "token"},
		{`{"all": true}`, lmos.MediaJSON, opTok, 403, lmos.CodeForbidden, ""},
		{`{"all": true}`, lmos.MediaJSON, "not-a-token-0123456789", 401, lmos.CodeUnauthorized, ""},
		{`{}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "names no entries"},
		{`{"all": true, "source": "127.0.0.3"}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "filter"},
		{`{"olderThan": "soon"}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "olderThan"},
		{`{"olderThan": "-1h"}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "filter"},
		{`{"source": "the-flood"}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "filter"},
		{`{"everything": true}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "body must be"},
		{`[1]`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "body must be"},
		// Data after the object, and a prefix naming no source (it would
		// select nothing), were taken as a filter.
		{`{"source": "127.0.0.5"} {"all": true}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "body must be"},
		{`{"all": true}]`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "body must be"},
		{`{"source": "127.0.0.0/8"}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "filter"},
		{`{"olderThan": "9999999999h"}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "olderThan"},
		{`{"olderThan": "NaN"}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "olderThan"},
		{`{"olderThan": 3600}`, lmos.MediaJSON, testToken, 400, lmos.CodeInvalid, "body must be"},
		{`{"all": true` + strings.Repeat(" ", 256<<10) + `}`, lmos.MediaJSON, testToken, 413, lmos.CodeTooLarge, ""},
		{`all`, "text/plain", testToken, 415, lmos.CodeUnsupported, ""},
	} {
		resp, body := h.do("POST", "/api/join/pending/deny", c.ct, []byte(c.body), c.token)
		var p lmos.Problem
		if resp.StatusCode != c.status || json.Unmarshal(body, &p) != nil || p.Type != lmos.ErrorTypeBase+c.code || !strings.Contains(p.Detail, c.detail) {
			t.Fatalf("deny %s: %d %s, want %d %s %q", c.body, resp.StatusCode, body, c.status, c.code, c.detail)
		}
		if after := h.pendingState().ids(); !slices.Equal(after, before) {
			t.Fatalf("the refused denial %s changed the list", c.body)
		}
	}
	deny := func(body string) (denied []string, pending int) {
		t.Helper()
		resp, b := h.do("POST", "/api/join/pending/deny", lmos.MediaJSON, []byte(body), testToken)
		var res struct {
			Denied  []string
			Pending int
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &res) != nil || res.Denied == nil {
			t.Fatalf("deny %s: %d %s", body, resp.StatusCode, b)
		}
		return res.Denied, res.Pending
	}
	var from5 []string
	for _, p := range h.pendingState().List {
		if p.Source == "127.0.0.5" {
			from5 = append(from5, p.ID)
		}
	}
	denied, left := deny(`{"source": "127.0.0.5"}`)
	if len(from5) == 0 || !slices.Equal(denied, from5) || left != 256-len(from5) {
		t.Fatalf("deny by source: %v, %d left; listed from it: %v", denied, left, from5)
	}
	if denied, _ := deny(`{"source": "192.0.2.7"}`); len(denied) != 0 {
		t.Fatalf("a source with nothing pending: %v", denied)
	}
	denied, left = deny(`{"all": true}`)
	if len(denied) != 256-len(from5) || left != 0 || !slices.Contains(denied, lamp) || len(h.pendingState().List) != 0 {
		t.Fatalf("deny all: %d denied, %d left", len(denied), left)
	}
}

// A waiting agent whose join outlives join.pendingTTL is told 504: over
// WebSocket on its registration's correlationId, over MQTT as a rejected
// td/result on its connection; an entry whose agent is gone expires too,
// and one parked before the hub went down expires while it is down. The hub's clock is moved, not waited on.
func TestPendingJoinExpiresForWaitingAgent(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	start := func() *testHub {
		m := hubtest.NewMain(t, dir, func(c *Config) { c.Join.Mode = "approve"; c.Join.PendingTTL = Duration(time.Hour) })
		m.Now = clock
		return runHub(t, m)
	}
	h := start()
	agent := h.wsDialFrom("127.0.0.20")
	mid, m := registerWS(agent, "urn:ttl:waiting")
	if m["message"] != lmos.JoinPending {
		t.Fatalf("registration: %v", m)
	}
	gone := h.wsDialFrom("127.0.0.21")
	if _, m := registerWS(gone, "urn:ttl:gone"); m["message"] != lmos.JoinPending {
		t.Fatalf("registration: %v", m)
	}
	_ = gone.c.Close(websocket.StatusNormalClosure, "")
	// An MQTT agent waits on its connection too (paho.golang).
	const mqttID = "urn:ttl:mqtt"
	mq, _, err := mqttclient.DialFrom(t, "127.0.0.23", h.MQTTAddr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	var res lmos.JoinResult
	if p := mq.Join(lmos.TopicKey(mqttID), hubtest.BareTD(mqttID, "mqtt knock"), ""); json.Unmarshal(p, &res) != nil || res.Status != lmos.JoinPending {
		t.Fatalf("MQTT join: %s", p)
	}
	if st := h.pendingState(); st.Pending != 3 || !st.List[0].Expires.Equal(st.List[0].Received.Add(time.Hour)) {
		t.Fatalf("pending: %+v", st)
	}

	now.Add(int64(59 * time.Minute))
	if st := h.pendingState(); st.Pending != 3 {
		t.Fatalf("before the TTL: %d pending", st.Pending)
	}
	// The waiting agent re-sends a minute later: its entry (and time)
	// is replaced, the other's is not.
	now.Add(int64(time.Minute) / 2)
	mid, m = registerWS(agent, "urn:ttl:waiting")
	if m["message"] != lmos.JoinPending {
		t.Fatalf("registration again: %v", m)
	}
	now.Add(int64(time.Minute) / 2)
	if ids := h.pendingState().ids(); !slices.Equal(ids, []string{"urn:ttl:waiting"}) {
		t.Fatalf("at the first's TTL: %v", ids)
	}
	p := mq.Next(lmos.ThingsPrefix + lmos.TopicKey(mqttID) + "/td/result").Payload
	if err := json.Unmarshal(p, &res); err != nil || res.Status != lmos.JoinRejected || res.Problem == nil ||
		res.Problem.Status != http.StatusGatewayTimeout || res.Problem.Type != lmos.ErrorTypeBase+lmos.CodeTimeout || !strings.Contains(res.Problem.Detail, "expired") {
		t.Fatalf("the MQTT agent's result after expiry: %s", p)
	}
	h.absent(mqttID)
	now.Add(int64(time.Hour))
	if st := h.pendingState(); st.Pending != 0 {
		t.Fatalf("after the TTL: %d pending", st.Pending)
	}
	expectWSError(t, agent.reply(mid), http.StatusGatewayTimeout, lmos.CodeTimeout, "expired")
	h.absent("urn:ttl:waiting")
	resp, body := h.do("POST", "/api/join/pending/"+pathEscape("urn:ttl:waiting")+"/approve", "", nil, testToken)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("approving an expired join: %d %s", resp.StatusCode, body)
	}

	// Parked, then the hub is down past the TTL: gone after the restart.
	late := h.wsDialFrom("127.0.0.22")
	if _, m := registerWS(late, "urn:ttl:late"); m["message"] != lmos.JoinPending {
		t.Fatalf("registration: %v", m)
	}
	h.Close()
	now.Add(int64(2 * time.Hour))
	h = start()
	if st := h.pendingState(); st.Pending != 0 {
		t.Fatalf("after a restart past the TTL: %+v", st)
	}
	_, metrics := h.do("GET", "/metrics", "", nil, "")
	if !strings.Contains(string(metrics), "lmos_join_pending 0") {
		t.Fatal("metrics count expired joins")
	}
}
