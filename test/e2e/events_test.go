package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

type sseEvent struct {
	Type string
	ID   uint64
	Data string
}

// sseStream reads server-sent events from path until the test ends or the
// stream is closed.
type sseStream struct {
	t      *testing.T
	C      chan sseEvent
	cancel context.CancelFunc
	resp   *http.Response
}

func (h *testHub) openSSE(path, lastEventID string) *sseStream {
	h.t.Helper()
	header := http.Header{}
	if lastEventID != "" {
		header.Set("Last-Event-ID", lastEventID)
	}
	return h.openSSEHeader(path, header)
}

// openSSEWith is openSSE with a bearer token.
func (h *testHub) openSSEWith(path, token string) *sseStream {
	h.t.Helper()
	return h.openSSEHeader(path, http.Header{"Authorization": {"Bearer " + token}})
}

// openSSEHeader opens the event stream at path with the request header.
func (h *testHub) openSSEHeader(path string, header http.Header) *sseStream {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.URL+path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		h.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		h.t.Fatalf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sseStream{t: h.t, C: make(chan sseEvent, 100), cancel: cancel, resp: resp}
	go func() {
		defer close(s.C)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Type != "" {
					s.C <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.Type = line[7:]
			case strings.HasPrefix(line, "id: "):
				ev.ID, _ = strconv.ParseUint(line[4:], 10, 64)
			case strings.HasPrefix(line, "data: "):
				ev.Data = line[6:]
			}
		}
	}()
	h.t.Cleanup(s.Close)
	return s
}

func (s *sseStream) Close() { s.cancel(); s.resp.Body.Close() }

// next waits for the next event, failing the test after d.
func (s *sseStream) next(d time.Duration) sseEvent {
	s.t.Helper()
	select {
	case ev, ok := <-s.C:
		if !ok {
			s.t.Fatal("event stream ended")
		}
		return ev
	case <-time.After(d):
		s.t.Fatalf("no event within %s", d)
	}
	return sseEvent{}
}

func dataID(t *testing.T, ev sseEvent) string {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
		t.Fatalf("event data %q: %v", ev.Data, err)
	}
	id, _ := d["id"].(string)
	return id
}

func TestSSEReplayAfterReconnect(t *testing.T) {
	h := startHub(t, nil)
	s := h.openSSE("/events", "")
	h.put("urn:example:a", makeTD("urn:example:a", "a"))
	first := s.next(5 * time.Second)
	if first.Type != "thing_created" || dataID(t, first) != "urn:example:a" || first.ID == 0 {
		t.Fatalf("first event = %+v", first)
	}
	s.Close()

	// While disconnected: update, create, delete.
	h.put("urn:example:a", makeTD("urn:example:a", "a2"))
	h.put("urn:example:b", makeTD("urn:example:b", "b"))
	if resp, _ := h.do(http.MethodDelete, "/things/urn:example:a", "", nil, testToken); resp.StatusCode != 204 {
		t.Fatal("delete failed")
	}

	s2 := h.openSSE("/events", strconv.FormatUint(first.ID, 10))
	want := []struct{ typ, id string }{{"thing_updated", "urn:example:a"}, {"thing_created", "urn:example:b"}, {"thing_deleted", "urn:example:a"}}
	for i, w := range want {
		ev := s2.next(5 * time.Second)
		if ev.Type != w.typ || dataID(t, ev) != w.id || ev.ID != first.ID+uint64(i)+1 {
			t.Errorf("replayed %d = %+v, want %s %s seq %d", i, ev, w.typ, w.id, first.ID+uint64(i)+1)
		}
	}
	// Live events follow the replay without a gap.
	h.put("urn:example:c", makeTD("urn:example:c", "c"))
	if ev := s2.next(5 * time.Second); ev.Type != "thing_created" || ev.ID != first.ID+4 {
		t.Errorf("live after replay = %+v", ev)
	}

	// A typed stream only carries its type; a replay from 0 holds the whole log.
	s3 := h.openSSE("/events/thing_deleted", "0")
	if ev := s3.next(5 * time.Second); ev.Type != "thing_deleted" || dataID(t, ev) != "urn:example:a" {
		t.Errorf("typed replay = %+v", ev)
	}

	// The replay survives a restart: the log is in the store.
	h.Close()
	h2 := startHubIn(t, h.Dir, nil)
	s4 := h2.openSSE("/events", strconv.FormatUint(first.ID+2, 10))
	if ev := s4.next(5 * time.Second); ev.Type != "thing_deleted" || ev.ID != first.ID+3 {
		t.Errorf("replay after restart = %+v", ev)
	}
}

func TestSSEDiff(t *testing.T) {
	h := startHub(t, nil)
	s := h.openSSE("/events?diff=true", "")
	td := sample(t, "thermostat-agent.json")
	h.put(thermostatID, td)
	ev := s.next(5 * time.Second)
	var created map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &created); err != nil || created["title"] != "Living room thermostat agent" || created["actions"] == nil {
		t.Errorf("created with diff = %s", ev.Data)
	}
	resp, _ := h.do(http.MethodPatch, "/things/"+pathEscape(thermostatID), "application/merge-patch+json", []byte(`{"title":"T2","description":null}`), testToken)
	if resp.StatusCode != 204 {
		t.Fatalf("PATCH %d", resp.StatusCode)
	}
	ev = s.next(5 * time.Second)
	var patch map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &patch); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "thing_updated" || patch["id"] != thermostatID || patch["title"] != "T2" ||
		len(patch) != 3 {
		t.Errorf("updated with diff = %s", ev.Data)
	}
	if v, ok := patch["description"]; !ok || v != nil {
		t.Errorf("removed member not null in patch: %s", ev.Data)
	}
}

func TestTTLExpiry(t *testing.T) {
	h := startHub(t, nil)
	s := h.openSSE("/events/thing_deleted", "")
	td := strings.Replace(string(makeTD("urn:example:ttl", "short-lived")), `"title"`, `"registration":{"ttl":1},"title"`, 1)
	keep := strings.Replace(string(makeTD("urn:example:keep", "refreshed")), `"title"`, `"registration":{"ttl":1},"title"`, 1)
	h.put("urn:example:ttl", []byte(td))
	h.put("urn:example:keep", []byte(keep))

	var got map[string]any
	h.getJSON("/things/urn:example:ttl", 200, &got)
	reg := got["registration"].(map[string]any)
	expires, err := time.Parse(time.RFC3339, reg["expires"].(string))
	if err != nil || reg["ttl"] != float64(1) {
		t.Fatalf("registration = %v", reg)
	}
	// Keep one alive with empty patches, which refresh expires from ttl.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				req, _ := http.NewRequest(http.MethodPatch, h.URL+"/things/urn:example:keep", strings.NewReader(`{}`))
				req.Header.Set("Content-Type", "application/merge-patch+json")
				req.Header.Set("Authorization", "Bearer "+testToken)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}
	}()

	// Poll until it is gone; reads must drop it within 1 s of expires.
	var goneAt time.Time
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, _ := h.do(http.MethodGet, "/things/urn:example:ttl", "", nil, ""); resp.StatusCode == 404 {
			goneAt = time.Now()
			break
		}
	}
	if goneAt.IsZero() {
		t.Fatal("expired Thing still readable after 5 s")
	}
	if late := goneAt.Sub(expires); late > time.Second {
		t.Errorf("gone %s after expires, want ≤ 1 s", late)
	}
	ev := s.next(3 * time.Second)
	if dataID(t, ev) != "urn:example:ttl" {
		t.Errorf("deleted event = %+v", ev)
	}
	var list []map[string]any
	h.getJSON("/things", 200, &list)
	var titles []any
	h.getJSON("/search/jsonpath?query=$[*].title", 200, &titles)
	close(stop)
	<-done
	if len(list) != 1 || list[0]["id"] != "urn:example:keep" || len(titles) != 1 {
		t.Errorf("after expiry: list %v, titles %v (the refreshed Thing must remain)", list, titles)
	}
	// Purged from storage too, not only hidden.
	if _, err := h.Main.DB.ThingRaw("urn:example:ttl"); err == nil {
		t.Error("expired Thing still in the store")
	}
}

// TestSSEDiffReplay: the event log keeps no TD copies, so a replayed
// creation carries the Thing as it is now, or only its id once deleted.
func TestSSEDiffReplay(t *testing.T) {
	h := startHub(t, nil)
	h.put("urn:example:kept", makeTD("urn:example:kept", "first title"))
	h.put("urn:example:kept", makeTD("urn:example:kept", "second title"))
	h.put("urn:example:gone", makeTD("urn:example:gone", "gone"))
	if resp, _ := h.do(http.MethodDelete, "/things/urn:example:gone", "", nil, testToken); resp.StatusCode != 204 {
		t.Fatal("delete failed")
	}
	s := h.openSSE("/events/thing_created?diff=true", "0")
	ev := s.next(5 * time.Second)
	var td map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &td); err != nil || td["id"] != "urn:example:kept" || td["title"] != "second title" || td["security"] == nil {
		t.Errorf("replayed creation of a kept Thing = %s", ev.Data)
	}
	ev = s.next(5 * time.Second)
	if ev.Data != `{"id":"urn:example:gone"}` {
		t.Errorf("replayed creation of a deleted Thing = %s", ev.Data)
	}
}

// TestSSEDirectoryStreamSkipsPresence: presence changes are hub events,
// not W3C WoT Discovery ones.
func TestSSEDirectoryStreamSkipsPresence(t *testing.T) {
	h := startHub(t, nil)
	s := h.openSSE("/events", "")
	h.put("urn:example:p", makeTD("urn:example:p", "p"))
	if err := h.Main.Registry.SetPresence(t.Context(), "urn:example:p", "online", "mqtt"); err != nil {
		t.Fatal(err)
	}
	h.put("urn:example:q", makeTD("urn:example:q", "q"))
	for _, want := range []string{"urn:example:p", "urn:example:q"} {
		if ev := s.next(5 * time.Second); ev.Type != "thing_created" || dataID(t, ev) != want {
			t.Errorf("event = %+v, want creation of %s", ev, want)
		}
	}
	var got map[string]any
	h.getJSON("/things/urn:example:p", 200, &got)
	if p := got["lmos:presence"].(map[string]any); p["status"] != "online" || p["via"] != "mqtt" {
		t.Errorf("lmos:presence = %v", p)
	}
}

// TestEventStreamsPerClientAreBounded: a client holding
// http.maxStreamsPerClient streams gets 429 for the next one, on the
// directory feed and the proxy alike, until it closes one.
func TestEventStreamsPerClientAreBounded(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.MaxStreamsPerClient = 2 })
	h.startAgent(agentID)
	first := h.openSSE("/events", "")
	h.openSSE("/events/thing_created", "")
	for _, path := range []string{"/events", "/proxy/" + pathEscape(agentID) + "/events/alarm"} {
		resp, body := h.request("GET", path, "", "text/event-stream", nil, "")
		expectProblem(t, resp, body, 429, "already holds 2 open event streams")
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: 429 without Retry-After", path)
		}
	}
	if _, body := h.request("GET", "/metrics", "", "", nil, ""); !strings.Contains(string(body), "\nlmos_sse_refused_total 2\n") {
		t.Errorf("metrics without lmos_sse_refused_total 2:\n%.2000s", body)
	}
	first.Close()
	waitFor(t, 2*time.Second, "a slot freed by closing a stream", func() bool {
		resp, _ := h.request("HEAD", "/events", "", "text/event-stream", nil, "")
		return resp.StatusCode == 200
	})
}

// A connection to the HTTP port that never sends a request (an HTTP
// client's spare dial, a port scan) does not hold up closing the hub:
// http.Server.Shutdown alone waits 5 s for it, the whole close budget.
func TestCloseWithSilentHTTPConnection(t *testing.T) {
	h := startHub(t, nil)
	conn, err := net.Dial("tcp", h.Main.HTTPAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h.do(http.MethodGet, "/healthz", "", nil, "") // the silent connection is accepted meanwhile
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := h.Main.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}
