package mcpdoor_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// scenarioAgent is an agent that comes and goes with its state kept, so
// it comes back as the same Thing; it counts the invocations it served.
type scenarioAgent struct {
	t        *testing.T
	h        *hubtest.Hub
	url, id  string
	title    string
	state    string
	a        *agent.Agent
	served   atomic.Int64
	reachOut string // a Thing this agent invokes from its own action ("" none)
}

func (s *scenarioAgent) connect() {
	s.t.Helper()
	do := map[string]any{
		"description": "Adds one to n.",
		"input":       map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []any{"n"}},
		"output":      map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}, "by": map[string]any{"type": "string"}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := agent.Connect(ctx, agent.Options{URL: s.url, TD: agentTD(s.id, s.title, map[string]any{"do": do}), StateDir: s.state, Logger: hubtest.Logger(s.t)})
	if err != nil {
		s.t.Fatalf("%s: %v", s.id, err)
	}
	a.HandleAction("do", func(ctx context.Context, in agent.Input) (any, error) {
		var v struct{ N int }
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		s.served.Add(1)
		if s.reachOut != "" { // agents call agents, across doors
			out, err := a.Invoke(ctx, s.reachOut, "do", map[string]any{"n": v.N})
			if err != nil {
				return nil, err
			}
			var got struct{ N int }
			if err := out.Decode(&got); err != nil {
				return nil, err
			}
			v.N = got.N
		}
		return map[string]any{"n": v.N + 1, "by": s.id}, nil
	})
	s.a = a
}

func (s *scenarioAgent) close() { s.a.Close() }

// TestScenarioCallsThroughJoinsLeavesAndReconnects interleaves, over
// several rounds, MCP calls at both revisions, the HTTP proxy, an agent
// calling another across MQTT and WebSocket, agents going offline and
// coming back as the same Thing, and newcomers joining and leaving;
// every call's result is checked and every invocation counted.
func TestScenarioCallsThroughJoinsLeavesAndReconnects(t *testing.T) {
	h := startHub(t, nil)
	ws := &scenarioAgent{t: t, h: h, url: wsURL(h), id: "urn:scn:ws", title: "WS adder", state: t.TempDir()}
	mq := &scenarioAgent{t: t, h: h, url: mqttURL(h), id: "urn:scn:mqtt", title: "MQTT adder", state: t.TempDir(), reachOut: "urn:scn:ws"}
	ws.connect()
	mq.connect()
	defer ws.close()
	defer mq.close()
	c26, c25 := connect(t, h, v2026, "", ""), connect(t, h, v2025, "", "")
	clients := []*client{c26, c25}
	for _, c := range clients {
		c.waitTools(t, "list both adders", func(m map[string]*mcp.Tool) bool { return m["ws_adder__do"] != nil && m["mqtt_adder__do"] != nil })
	}
	var wantWS, wantMQ int64
	callOK := func(c *client, tool string, n, want int, by string) {
		t.Helper()
		res := c.call(t, tool, map[string]any{"n": n})
		if res.IsError || mustJSON(res.StructuredContent) != fmt.Sprintf(`{"by":%q,"n":%d}`, by, want) {
			t.Fatalf("%s(%d): error=%v %s", tool, n, res.IsError, text(res))
		}
	}
	for round := range 4 {
		for _, c := range clients {
			callOK(c, "ws_adder__do", round, round+1, "urn:scn:ws")
			wantWS++
			// MQTT adder calls the WebSocket adder first: +2 in all.
			callOK(c, "mqtt_adder__do", round, round+2, "urn:scn:mqtt")
			wantMQ++
			wantWS++
		}
		// The HTTP proxy, between MCP calls.
		resp, b := h.Do(http.MethodPost, "/proxy/urn:scn:ws/actions/do", "application/json", fmt.Appendf(nil, `{"n":%d}`, round), "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), fmt.Sprintf(`"n":%d`, round+1)) {
			t.Fatalf("proxy: %d %s", resp.StatusCode, b)
		}
		wantWS++
		// The WebSocket agent goes away: calls that need it fail with a
		// tool error, its tool stays listed (the Thing is offline).
		ws.close()
		for _, c := range clients {
			waitOffline(t, c, "ws_adder__do")
			res := c.call(t, "mqtt_adder__do", map[string]any{"n": 1})
			if !res.IsError || !strings.Contains(text(res), "urn:scn:ws") {
				t.Fatalf("round %d: a call through an offline agent: error=%v %s", round, res.IsError, text(res))
			}
			wantMQ++ // the MQTT adder served it and failed reaching out
		}
		// A newcomer joins and leaves while the other is away.
		id := fmt.Sprintf("urn:scn:new-%d", round)
		name := fmt.Sprintf("newcomer_%d__do", round)
		n := simpleAgent(t, h, id, fmt.Sprintf("Newcomer %d", round))
		for _, c := range clients {
			c.waitTools(t, "list "+name, func(m map[string]*mcp.Tool) bool { return m[name] != nil })
			if res := c.call(t, name, map[string]any{"n": round}); res.IsError || mustJSON(res.StructuredContent) != fmt.Sprintf(`{"twice":%d}`, 2*round) {
				t.Fatalf("%s: %s", name, text(res))
			}
		}
		n.Close()
		if resp, b := h.Do(http.MethodDelete, "/things/"+id, "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("delete %s: %d %s", id, resp.StatusCode, b)
		}
		// The WebSocket agent comes back as the same Thing.
		ws.connect()
		for _, c := range clients {
			c.waitTools(t, "drop "+name, func(m map[string]*mcp.Tool) bool { return m[name] == nil && m["ws_adder__do"] != nil })
		}
	}
	if got := ws.served.Load(); got != wantWS {
		t.Errorf("the WebSocket agent served %d invocations, want %d", got, wantWS)
	}
	if got := mq.served.Load(); got != wantMQ {
		t.Errorf("the MQTT agent served %d invocations, want %d", got, wantMQ)
	}
}

// waitOffline calls tool until the hub answers that its Thing is offline
// (the hub learns of a closed connection asynchronously).
func waitOffline(t testing.TB, c *client, tool string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res := c.call(t, tool, map[string]any{"n": 0})
		if res.IsError && strings.Contains(text(res), "offline") {
			return
		}
		if !res.IsError {
			t.Fatalf("%s answered while its agent was closed: %s", tool, text(res))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never offline: %s", tool, text(res))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
