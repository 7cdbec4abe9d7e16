package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// BenchmarkGroupAction20 measures a group action over 20 MQTT agents
// (the agent library, in-process) through POST /api/groups/{gid}/actions
// /{name} (JSON answer, every member completed), against a single
// invocation of one of them through POST /proxy/{id}/actions/{name}, in
// the same run and alternately: p50/p99 of the whole call
// (docs/PERFORMANCE.md "Issue 15 — group actions").
func BenchmarkGroupAction20(b *testing.B) {
	h := hubtest.Start(b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 20
	var ids []string
	for i := range n {
		id := fmt.Sprintf("urn:bench:thermostat-%02d", i)
		a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + h.MQTTAddr(), Logger: hubtest.Logger(b),
			TD: map[string]any{"id": id, "title": id, "@type": "lmos:Agent", "actions": map[string]any{"setTarget": map[string]any{}}}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close() })
		a.HandleAction("setTarget", func(_ context.Context, in agent.Input) (any, error) {
			var v struct{ Fahrenheit float64 }
			if err := in.Decode(&v); err != nil {
				return nil, err
			}
			return map[string]any{"fahrenheit": v.Fahrenheit}, nil
		})
		ids = append(ids, id)
	}
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "house", Title: "House", Members: ids}); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	input := []byte(`{"fahrenheit":70}`)
	call := func(path string, check func([]byte) error) time.Duration {
		start := time.Now()
		resp, err := client.Post(h.URL+path, "application/json", bytes.NewReader(input))
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if err := check(body); err != nil {
			b.Fatalf("%s: %v: %s", path, err, body)
		}
		return d
	}
	group := func(body []byte) error {
		var ans lmos.GroupActionAnswer
		if err := json.Unmarshal(body, &ans); err != nil {
			return err
		}
		if len(ans.Results) != n {
			return fmt.Errorf("%d results", len(ans.Results))
		}
		for _, r := range ans.Results {
			if r.Status != lmos.GroupResultCompleted {
				return fmt.Errorf("member %s %s", r.Member, r.Status)
			}
		}
		return nil
	}
	single := func(body []byte) error {
		if !bytes.Contains(body, []byte(`"fahrenheit":70`)) {
			return fmt.Errorf("output")
		}
		return nil
	}
	// Warm up both paths (connections, routes).
	for range 5 {
		call("/api/groups/house/actions/setTarget", group)
		call("/proxy/"+url.PathEscape(ids[0])+"/actions/setTarget", single)
	}
	var groupLat, singleLat []time.Duration
	b.ResetTimer()
	for b.Loop() {
		groupLat = append(groupLat, call("/api/groups/house/actions/setTarget", group))
		singleLat = append(singleLat, call("/proxy/"+url.PathEscape(ids[0])+"/actions/setTarget", single))
	}
	b.StopTimer()
	pct := func(l []time.Duration, p float64) float64 {
		slices.Sort(l)
		return float64(l[int(float64(len(l)-1)*p)]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(groupLat, 0.5), "group20-p50-ms")
	b.ReportMetric(pct(groupLat, 0.99), "group20-p99-ms")
	b.ReportMetric(pct(singleLat, 0.5), "single-p50-ms")
	b.ReportMetric(pct(singleLat, 0.99), "single-p99-ms")
}
