package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// Issue 24, point 6: anonymous patterns that took a 1 GB board down. Each
// test checks the bound that now holds; the memory figures are in
// anon_memory_bench_test.go.

// bigAgents connects n MQTT agents (the agent library) whose action "report"
// answers a JSON string of size bytes, and puts them in group gid.
func bigAgents(t *testing.T, h *testHub, gid string, n, size int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := strings.Repeat("x", size-2)
	var ids []string
	for i := range n {
		id := fmt.Sprintf("urn:big:%02d", i)
		a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + h.Main.MQTTAddr.String(), TD: map[string]any{"id": id, "title": id,
			"@type": "lmos:Agent", "actions": map[string]any{"report": map[string]any{}}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		a.HandleAction("report", func(context.Context, agent.Input) (any, error) { return out, nil })
		ids = append(ids, id)
	}
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: gid, Title: gid, Members: ids}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// The members' outputs all group actions hold are bounded for the hub
// (groups.actionOutputBytes), not only per call: three members answering
// 600 KB each fit one call's 4 MiB but not a hub budget of 1 MiB, so one
// output is passed on and two are dropped with an unavailable problem —
// the members completed, nothing else changes. (The old hub passed all
// three: it had no bound beyond the call's.)
func TestGroupActionHubBudget(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Groups.ActionOutputBytes = 1 << 20 })
	const size = 600 << 10
	bigAgents(t, h, "big", 3, size)
	before, _ := h.Main.Registry.Group("big")
	for _, accept := range []string{"application/json", "text/event-stream"} {
		resp, body := h.request(http.MethodPost, "/api/groups/big/actions/report", "application/json", accept, nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %.300s", accept, resp.StatusCode, body)
		}
		var results []lmos.GroupActionResult
		if accept == "application/json" {
			var ans lmos.GroupActionAnswer
			if err := json.Unmarshal(body, &ans); err != nil {
				t.Fatalf("%v: %.300s", err, body)
			}
			results = ans.Results
		} else {
			for ev := range strings.SplitSeq(string(body), "\n\n") {
				if _, data, ok := strings.Cut(ev, "event: result\ndata: "); ok {
					var r lmos.GroupActionResult
					if err := json.Unmarshal([]byte(data), &r); err != nil {
						t.Fatal(err)
					}
					results = append(results, r)
				}
			}
		}
		kept, dropped := 0, 0
		for _, r := range results {
			switch {
			case r.Status != lmos.GroupResultCompleted:
				t.Errorf("%s: %s %s", accept, r.Member, r.Status)
			case len(r.Output) == size && r.Error == nil:
				kept++
			case len(r.Output) == 0 && r.Error != nil && r.Error.Status == http.StatusServiceUnavailable &&
				strings.HasSuffix(r.Error.Type, "#unavailable") && strings.Contains(r.Error.Detail, "groups.actionOutputBytes"):
				dropped++
			default:
				t.Errorf("%s: %s: %d bytes, error %+v", accept, r.Member, len(r.Output), r.Error)
			}
		}
		// The SSE door passes each output on before the next is admitted
		// (at most one held at a time), but three answers may arrive
		// before the first is written: at least one is kept.
		want := 1
		if accept == "application/json" && (kept != want || dropped != 2) {
			t.Errorf("json: kept %d, dropped %d outputs; want 1 within 1 MiB and 2 dropped", kept, dropped)
		}
		if accept == "text/event-stream" && (kept < want || kept+dropped != 3) {
			t.Errorf("sse: kept %d, dropped %d outputs; want at least 1 kept and 3 in all", kept, dropped)
		}
	}
	if held := h.Main.GroupActions.Held(); held != 0 {
		t.Errorf("the hub holds %d bytes of outputs after the calls", held)
	}
	if after, _ := h.Main.Registry.Group("big"); !after.Modified.Equal(before.Modified) || len(after.Members) != len(before.Members) {
		t.Errorf("the group changed: %+v -> %+v", before, after)
	}
}

// Event streams that are never read (issue 24): each held every frame it
// had not sent, encoded for itself, until a frame had waited 30 s; 1,024
// of them and 8 updates of 250 KB took 625 MB. Now a stream holds at most
// http.maxStreamQueueBytes (1 MiB) of frames not yet written and is cut
// off beyond it, counted in lmos_sse_dropped_total, whatever the write
// timeout (10 min here, so only that bound can cut them: the old hub kept
// them open). A client that reads gets every update, its diff whole.
func TestEventStreamsNotReadCutOff(t *testing.T) {
	m := hubtest.NewMain(t, t.TempDir(), nil)
	m.SSEWriteTimeout = 10 * time.Minute
	h := runHub(t, m)
	id := "urn:ex:big-feed"
	big := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 200<<10) }
	td := func(i int) []byte {
		return fmt.Appendf(nil, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":"big","description":%q,"securityDefinitions":{"n":{"scheme":"nosec"}},"security":"n"}`, id, big(i))
	}
	h.put(id, td(0))

	fast := h.openSSE("/api/events?diff=true", "")
	type update struct{ desc string }
	got := make(chan update, 200)
	go func() {
		defer close(got)
		for ev := range fast.C {
			var v struct {
				ID    string
				Patch struct{ Description string }
			}
			if ev.Type == "thing_updated" && json.Unmarshal([]byte(ev.Data), &v) == nil && v.ID == id {
				got <- update{v.Patch.Description}
			}
		}
	}()
	slow := []net.Conn{h.slowSSE("/api/events?diff=true"), h.slowSSE("/api/events?diff=true"), h.slowSSE("/events?diff=true")}
	before := h.metric("lmos_sse_dropped_total")
	puts := 0
	for i := 1; i <= 100 && h.metric("lmos_sse_dropped_total")-before < float64(len(slow)); i++ {
		h.put(id, td(i))
		puts++
	}
	if d := h.metric("lmos_sse_dropped_total") - before; d != float64(len(slow)) {
		t.Fatalf("after %d updates of 200 KiB, lmos_sse_dropped_total moved by %v; want %d (the streams that do not read)", puts, d, len(slow))
	}
	for i, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("slow stream %d: not closed by the hub: %v", i, err)
		}
	}
	for i := 1; i <= puts; i++ {
		select {
		case u, ok := <-got:
			if !ok {
				t.Fatalf("the reading stream ended after %d of %d updates", i-1, puts)
			}
			if u.desc != big(i) {
				t.Fatalf("update %d: the diff carries %d bytes of %q", i, len(u.desc), u.desc[:min(8, len(u.desc))])
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the reading stream got %d of %d updates", i-1, puts)
		}
	}
	if d := h.metric("lmos_sse_dropped_total") - before; d != float64(len(slow)) {
		t.Errorf("lmos_sse_dropped_total moved by %v in all, want %d: the reading client was cut too", d, len(slow))
	}
}

// GET /api/groups (issue 24) was encoded anew for every anonymous request
// (5.4 MB for 64 groups of 1,024 members) and counted against nothing. Now
// it pages with limit/offset and a Link to the next page (without them:
// the whole array, as before), its encoding is kept until a group changes
// (lmos_http_group_list_encoded_total), and it counts against the
// client's request rate (http.writeRate): beyond it 429.
func TestGroupListPagedSharedLimited(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.WriteRate, c.HTTP.WriteBurst = 0.0001, 8 }) // 2 PUTs, 6 listings
	ctx := context.Background()
	for _, id := range []string{"urn:gl:1", "urn:gl:2"} {
		h.put(id, makeTD(id, id))
	}
	for _, gid := range []string{"a", "b", "c"} {
		if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: gid, Title: gid, Members: []string{"urn:gl:1"}}); err != nil {
			t.Fatal(err)
		}
	}
	encoded := func() float64 { return h.metric("lmos_http_group_list_encoded_total") }
	before := encoded()
	list := func(path string) (ids []string, link string) {
		t.Helper()
		resp, body := h.request(http.MethodGet, path, "", "", nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		var gs []struct {
			ID      string
			Members []string
		}
		if err := json.Unmarshal(body, &gs); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
		for _, g := range gs {
			ids = append(ids, g.ID+":"+strings.Join(g.Members, ","))
		}
		return ids, resp.Header.Get("Link")
	}
	ids, link := list("/api/groups?limit=2") // 1
	if strings.Join(ids, " ") != "a:urn:gl:1 b:urn:gl:1" || link != `</api/groups?offset=2&limit=2>; rel="next"` {
		t.Fatalf("first page %v, Link %q", ids, link)
	}
	ids, link = list("/api/groups?offset=2&limit=2") // 2
	if strings.Join(ids, " ") != "c:urn:gl:1" || link != "" {
		t.Fatalf("last page %v, Link %q", ids, link)
	}
	ids, _ = list("/api/groups") // 3
	if strings.Join(ids, " ") != "a:urn:gl:1 b:urn:gl:1 c:urn:gl:1" {
		t.Fatalf("whole list %v", ids)
	}
	if n := encoded() - before; n != 1 {
		t.Errorf("the list was encoded %v times for three requests, want once", n)
	}
	if _, err := h.Main.Registry.AddMember(ctx, "b", "urn:gl:2"); err != nil {
		t.Fatal(err)
	}
	ids, _ = list("/api/groups") // 4
	if strings.Join(ids, " ") != "a:urn:gl:1 b:urn:gl:1,urn:gl:2 c:urn:gl:1" {
		t.Fatalf("after a change: %v", ids)
	}
	list("/api/groups")         // 5
	list("/api/groups?limit=1") // 6
	if n := encoded() - before; n != 2 {
		t.Errorf("the list was encoded %v times, want twice (once more after the change)", n)
	}
	refused := metricValue(t, h, `lmos_http_refused_total{reason="rate-limited"}`)
	resp, body := h.request(http.MethodGet, "/api/groups", "", "", nil, "")
	var p lmos.Problem
	if resp.StatusCode != http.StatusTooManyRequests || json.Unmarshal(body, &p) != nil || p.Status != http.StatusTooManyRequests ||
		!strings.HasSuffix(p.Type, "#rate-limited") || resp.Header.Get("Retry-After") == "" ||
		!strings.HasPrefix(p.Detail, "too many requests from this client (group listings count against its write rate); retry in ") {
		t.Fatalf("the 7th listing: %d %s", resp.StatusCode, body)
	}
	if got := metricValue(t, h, `lmos_http_refused_total{reason="rate-limited"}`); got != refused+1 {
		t.Errorf("refusals (rate-limited) %d -> %d", refused, got)
	}
	if g, _ := h.Main.Registry.Group("b"); len(g.Members) != 2 {
		t.Errorf("group b: %+v", g)
	}
}
