package federation_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// startHubs starts n hubs as main starts them (loopback, --mdns=false),
// each with its own data directory.
func startHubs(t *testing.T, n int, edit func(*app.Config)) []*hubtest.Hub {
	t.Helper()
	hubs := make([]*hubtest.Hub, n)
	for i := range hubs {
		hubs[i] = hubtest.Start(t, edit)
	}
	return hubs
}

// pair pairs at with peer through at's API (admin token).
func pair(t *testing.T, at, peer *hubtest.Hub) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"url": peer.URL, "did": peer.Main.DID()})
	resp, b := at.Do(http.MethodPost, "/api/peers", lmos.MediaJSON, body, hubtest.Token)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("pair %s with %s: %d %s", at.URL, peer.URL, resp.StatusCode, b)
	}
}

// pairAll pairs every hub with every other, both ways.
func pairAll(t *testing.T, hubs ...*hubtest.Hub) {
	t.Helper()
	for _, a := range hubs {
		for _, b := range hubs {
			if a != b {
				pair(t, a, b)
			}
		}
	}
}

// waitUntil polls cond every 20 ms until it holds, failing the test after
// a generous deadline (a loaded machine is slow, never wrong).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counterTD is an agent with a streamed action, a writable property and
// an event.
func counterTD(id string) map[string]any {
	return map[string]any{"id": id, "title": "counter", "@type": "lmos:Agent",
		"actions":    map[string]any{"count": map[string]any{}},
		"properties": map[string]any{"temp": map[string]any{"type": "number"}, "mode": map[string]any{"type": "string"}},
		"events":     map[string]any{"alarm": map[string]any{}}}
}

// serveCounter connects a counter agent to url and serves it.
func serveCounter(t *testing.T, url, id string) *agent.Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := agent.Connect(ctx, agent.Options{URL: url, TD: counterTD(id), Logger: hubtest.Logger(t)})
	if err != nil {
		t.Fatalf("agent %s on %s: %v", id, url, err)
	}
	t.Cleanup(func() { a.Close() })
	a.HandleActionStream("count", func(ctx context.Context, in agent.Input, emit func(any) error) (any, error) {
		for i := 1; i <= 3; i++ {
			if err := emit(map[string]int{"n": i}); err != nil {
				return nil, err
			}
		}
		return map[string]string{"by": id}, nil
	})
	a.HandleWrite("mode", func(ctx context.Context, v agent.Value) error {
		var s string
		if err := v.Decode(&s); err != nil {
			return err
		}
		return a.SetProperty("mode", s)
	})
	if err := a.SetProperty("temp", 21.5); err != nil {
		t.Fatal(err)
	}
	return a
}

func wsURL(h *hubtest.Hub) string   { return "ws" + strings.TrimPrefix(h.URL, "http") + "/ws" }
func mqttURL(h *hubtest.Hub) string { return "mqtt://" + h.MQTTAddr() }

func compact(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}
