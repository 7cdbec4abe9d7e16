package mcpdoor_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// waitChanged waits for a tools/list_changed notification.
func (c *client) waitChanged(t testing.TB, what string) {
	t.Helper()
	select {
	case <-c.changed:
	case <-time.After(60 * time.Second):
		t.Fatalf("no tools/list_changed after %s", what)
	}
}

// waitResourcesChanged waits for notifications/resources/list_changed.
func (c *client) waitResourcesChanged(t testing.TB, what string) {
	t.Helper()
	select {
	case <-c.resChanged:
	case <-time.After(60 * time.Second):
		t.Fatalf("no resources/list_changed after %s", what)
	}
}

// drainChanged forgets the notifications heard so far.
func (c *client) drainChanged() {
	for {
		select {
		case <-c.changed:
		case <-c.resChanged:
		default:
			return
		}
	}
}

// TestListChangesAsAgentsComeAndGo: a client of either revision hears
// tools/list_changed and resources/list_changed when an agent joins and
// when it leaves, and the list then shows the change.
func TestListChangesAsAgentsComeAndGo(t *testing.T) {
	h := startHub(t, nil)
	clients := map[string]*client{}
	for _, v := range versions {
		clients[v] = connect(t, h, v, "", "")
	}
	// The 2025 client hears changes on its GET stream, the 2026 one on its
	// subscriptions/listen request: both open once connected; a first agent
	// proves they are.
	first := simpleAgent(t, h, "urn:test:first", "First")
	for v, c := range clients {
		c.waitTools(t, v+": list first__do", func(m map[string]*mcp.Tool) bool { return m["first__do"] != nil })
	}
	for round := range 3 {
		for _, c := range clients {
			c.drainChanged()
		}
		id := fmt.Sprintf("urn:test:joiner-%d", round)
		a := simpleAgent(t, h, id, fmt.Sprintf("Joiner %d", round))
		name := fmt.Sprintf("joiner_%d__do", round)
		for v, c := range clients {
			c.waitChanged(t, v+": "+id+" joined")
			c.waitResourcesChanged(t, v+": "+id+" joined")
			c.waitTools(t, v+": list "+name, func(m map[string]*mcp.Tool) bool { return m[name] != nil })
			if res := c.call(t, name, map[string]any{"n": round}); res.IsError {
				t.Fatalf("%s: %s: %s", v, name, text(res))
			}
		}
		for _, c := range clients {
			c.drainChanged()
		}
		a.Close()
		if resp, b := h.Do(http.MethodDelete, "/things/"+id, "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("delete %s: %d %s", id, resp.StatusCode, b)
		}
		for v, c := range clients {
			c.waitChanged(t, v+": "+id+" left")
			c.waitResourcesChanged(t, v+": "+id+" left")
			c.waitTools(t, v+": drop "+name, func(m map[string]*mcp.Tool) bool { return m[name] == nil && m["first__do"] != nil })
		}
	}
	first.Close()
}

// TestStreamedActionProgressAndFailures: the partial results of a streamed
// action arrive as progress notifications, in order, before the final
// result; a failing agent's problem comes back as a tool error.
func TestStreamedActionProgressAndFailures(t *testing.T) {
	h := startHub(t, nil)
	count := map[string]any{
		"description": "Counts to n, one partial result per step.",
		"input":       map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}},
		"output":      map[string]any{"type": "object", "properties": map[string]any{"done": map[string]any{"type": "integer"}}},
	}
	fail := map[string]any{"description": "Always fails."}
	for _, door := range []string{"mqtt", "ws"} {
		url := mqttURL(h)
		if door == "ws" {
			url = wsURL(h)
		}
		id := "urn:test:counter-" + door
		connectAgent(t, h, url, agentTD(id, "Counter "+door, map[string]any{"count": count, "fail": fail}), func(a *agent.Agent) {
			a.HandleActionStream("count", func(_ context.Context, in agent.Input, emit func(any) error) (any, error) {
				var v struct{ N int }
				if err := in.Decode(&v); err != nil {
					return nil, err
				}
				for i := 1; i <= v.N; i++ {
					if err := emit(map[string]any{"step": i}); err != nil {
						return nil, err
					}
				}
				return map[string]any{"done": v.N}, nil
			})
			a.HandleAction("fail", func(context.Context, agent.Input) (any, error) {
				return nil, agent.NewProblem(http.StatusConflict, "the valve is stuck")
			})
		})
	}
	for _, v := range versions {
		for _, door := range []string{"mqtt", "ws"} {
			c := connect(t, h, v, "", "")
			name := "counter_" + door + "__count"
			c.waitTools(t, "list "+name, func(m map[string]*mcp.Tool) bool { return m[name] != nil })
			res := c.call(t, name, map[string]any{"n": 5})
			if res.IsError || mustJSON(res.StructuredContent) != `{"done":5}` {
				t.Fatalf("%s %s: error=%v %s", v, name, res.IsError, text(res))
			}
			want := `1:{"step":1} 2:{"step":2} 3:{"step":3} 4:{"step":4} 5:{"step":5}`
			// Notifications are handled apart from the result: wait for them.
			got := c.waitProgress(t, 5)
			if got != want {
				t.Errorf("%s %s progress: %s, want %s", v, door, got, want)
			}
			res = c.call(t, "counter_"+door+"__fail", map[string]any{})
			if !res.IsError || !strings.Contains(text(res), "the valve is stuck") || !strings.Contains(text(res), "errors#conflict") {
				t.Errorf("%s %s failing agent: error=%v %s", v, door, res.IsError, text(res))
			}
		}
	}
}

// waitProgress waits until n progress notifications arrived and returns
// them as "progress:message" words.
func (c *client) waitProgress(t testing.TB, n int) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		var got []string
		for _, p := range c.progress {
			got = append(got, fmt.Sprintf("%v:%s", p.Progress, p.Message))
		}
		c.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return strings.Join(got, " ")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
