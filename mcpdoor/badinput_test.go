package mcpdoor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// countingAgent connects an agent whose action "do" ({"n": integer} →
// {"twice": 2n}) counts its invocations; block, when not nil, holds each
// invocation until it is closed or the invocation's ctx ends.
func countingAgent(t testing.TB, h *hubtest.Hub, id, title string, block chan struct{}) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	do := map[string]any{
		"input":  map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer", "maximum": 100}}, "required": []any{"n"}, "additionalProperties": false},
		"output": map[string]any{"type": "object", "properties": map[string]any{"twice": map[string]any{"type": "integer"}}},
	}
	connectAgent(t, h, mqttURL(h), agentTD(id, title, map[string]any{"do": do}), func(a *agent.Agent) {
		a.HandleAction("do", func(ctx context.Context, in agent.Input) (any, error) {
			n.Add(1)
			if block != nil {
				select {
				case <-block:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			var v struct{ N int }
			if err := in.Decode(&v); err != nil {
				return nil, err
			}
			return map[string]any{"twice": 2 * v.N}, nil
		})
	})
	return &n
}

// TestBadCallsAreToolErrors: every refusal of a call is an answer the
// model can read — a tool error naming the problem, or the protocol's own
// error for an unknown tool — and reaches no agent.
func TestBadCallsAreToolErrors(t *testing.T) {
	h := startHub(t, nil)
	calls := countingAgent(t, h, "urn:test:count", "Counter", nil)
	leaving := simpleAgent(t, h, "urn:test:leaving", "Leaving agent")
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := connect(t, h, v, "", "")
			c.waitTools(t, "list both", func(m map[string]*mcp.Tool) bool { return m["counter__do"] != nil })
			for _, tc := range []struct {
				what string
				args any
				want string
			}{
				{"over the maximum", map[string]any{"n": 101}, "maximum"},
				{"wrong type", map[string]any{"n": "ten"}, "integer"},
				{"missing member", map[string]any{}, "n"},
				{"unknown member", map[string]any{"n": 1, "m": 2}, "m"},
			} {
				res := c.call(t, "counter__do", tc.args)
				if !res.IsError || !strings.Contains(text(res), tc.want) || !strings.Contains(text(res), `"status":400`) {
					t.Errorf("%s: error=%v %s", tc.what, res.IsError, text(res))
				}
			}
			// Unknown: the protocol's error (-32602).
			_, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "no_such__tool", Arguments: map[string]any{}})
			if err == nil || !strings.Contains(err.Error(), "unknown tool") {
				t.Errorf("unknown tool: %v", err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("refused calls reached the agent %d times", n)
	}
	// A tool whose Thing left: a tool error that says so.
	c := connect(t, h, v2025, "", "")
	c.waitTools(t, "list leaving_agent__do", func(m map[string]*mcp.Tool) bool { return m["leaving_agent__do"] != nil })
	leaving.Close()
	if resp, b := h.Do(http.MethodDelete, "/things/urn:test:leaving", "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", resp.StatusCode, b)
	}
	c.waitTools(t, "drop leaving_agent__do", func(m map[string]*mcp.Tool) bool { return m["leaving_agent__do"] == nil })
	res := c.call(t, "leaving_agent__do", map[string]any{"n": 1})
	if !res.IsError || !strings.Contains(text(res), "left the hub") || !strings.Contains(text(res), "urn:test:leaving") {
		t.Errorf("call of a Thing that left: error=%v %s", res.IsError, text(res))
	}
}

// TestMalformedAndHugeRequests: what is not JSON-RPC, or is larger than
// http.maxBodyBytes, is refused with the protocol's error and opens
// nothing; a bad filter in the URL is refused before the SDK sees it.
func TestMalformedAndHugeRequests(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.HTTP.MaxBodyBytes = 64 << 10 })
	calls := countingAgent(t, h, "urn:test:count", "Counter", nil)
	before := countSessions(t, h)
	v26 := map[string]string{"Mcp-Protocol-Version": v2026}
	huge := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"counter__do","arguments":{"n":1,"pad":%q},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		strings.Repeat("x", 100<<10))
	for _, tc := range []struct {
		what   string
		path   string
		body   string
		hdr    map[string]string
		status int
		code   int
	}{
		{"not JSON", "", "{nope", nil, http.StatusBadRequest, -32700},
		{"not JSON (2026)", "", "{nope", v26, http.StatusBadRequest, -32700},
		{"a JSON array of numbers", "", "[1,2]", nil, http.StatusBadRequest, -32600},
		{"a string", "", `"hi"`, nil, http.StatusBadRequest, -32600},
		{"no method", "", `{"jsonrpc":"2.0","id":1}`, nil, http.StatusBadRequest, -32600},
		{"too large (2026)", "", huge, v26, http.StatusRequestEntityTooLarge, -32600},
		{"listen under a second \"Method\" (2026)", "", `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","Method":"ping","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
			map[string]string{"Mcp-Protocol-Version": v2026, "Mcp-Method": "subscriptions/listen"}, http.StatusBadRequest, -32600},
		{"method twice", "", `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/list"}`, nil, http.StatusBadRequest, -32600},
		{"subscriptions/listen on a session", "", `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}`, nil, http.StatusBadRequest, -32600},
		{"too many types", "/mcp?" + strings.Repeat("type=a&", 17), `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, http.StatusBadRequest, -32602},
		{"unknown filter", "/mcp?colour=red", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, http.StatusBadRequest, -32602},
		{"filter too long", "/mcp?type=" + strings.Repeat("a", 2000), `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, http.StatusBadRequest, -32602},
	} {
		status, body, _ := rawPost(t, h, http.MethodPost, tc.path, tc.body, tc.hdr)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d: %.300s", tc.what, status, tc.status, body)
			continue
		}
		if code, msg := rpcError(t, body); code != tc.code || msg == "" {
			t.Errorf("%s: JSON-RPC error %d %q, want %d", tc.what, code, msg, tc.code)
		}
	}
	// Too large on a session: the SDK's own limit (the same setting).
	status, body, _ := rawPost(t, h, http.MethodPost, "", huge, nil)
	if status != http.StatusRequestEntityTooLarge {
		t.Errorf("too large (session): %d %.200s", status, body)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("refused requests reached the agent %d times", n)
	}
	if after := countSessions(t, h); after != before {
		t.Errorf("refused requests opened %d sessions", after-before)
	}
}

// TestSlowAgentTimesOut: an agent that never answers costs a call
// http.proxyTimeout, then a tool error — never a hung request.
func TestSlowAgentTimesOut(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.HTTP.ProxyTimeout = app.Duration(300 * time.Millisecond) })
	block := make(chan struct{})
	defer close(block)
	calls := countingAgent(t, h, "urn:test:slow", "Slow", block)
	for _, v := range versions {
		c := connect(t, h, v, "", "")
		c.waitTools(t, "list slow__do", func(m map[string]*mcp.Tool) bool { return m["slow__do"] != nil })
		res := c.call(t, "slow__do", map[string]any{"n": 1})
		if !res.IsError || !strings.Contains(text(res), "no final result in time") {
			t.Errorf("%s: slow agent: error=%v %s", v, res.IsError, text(res))
		}
	}
	if calls.Load() != 2 {
		t.Errorf("the agent was invoked %d times, want 2", calls.Load())
	}
}

// TestTooManyCallsAndListeners: mcp.maxCalls and mcp.maxListeners bound
// what anonymous clients hold at once, with a clear error, and a slot is
// free again once its call or stream ends.
func TestTooManyCallsAndListeners(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.MCP.MaxCalls = 1; c.MCP.MaxListeners = 1; c.MCP.MaxSessions = 2 })
	block := make(chan struct{})
	calls := countingAgent(t, h, "urn:test:busy", "Busy", block)
	c := connect(t, h, v2026, "", "")
	c.waitTools(t, "list busy__do", func(m map[string]*mcp.Tool) bool { return m["busy__do"] != nil })
	first := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "busy__do", Arguments: map[string]any{"n": 3}})
		first <- res
	}()
	for calls.Load() == 0 { // the first call holds the slot once the agent has it
		time.Sleep(5 * time.Millisecond)
	}
	res := c.call(t, "busy__do", map[string]any{"n": 4})
	if !res.IsError || !strings.Contains(text(res), "mcp.maxCalls: 1") {
		t.Errorf("second call: error=%v %s", res.IsError, text(res))
	}
	close(block)
	if res := <-first; res == nil || res.IsError || mustJSON(res.StructuredContent) != `{"twice":6}` {
		t.Fatalf("first call: %+v", res)
	}
	if res := c.call(t, "busy__do", map[string]any{"n": 5}); res.IsError {
		t.Errorf("a call after the slot freed: %s", text(res))
	}
	_, metrics := h.Do(http.MethodGet, "/metrics", "", nil, "")
	for _, want := range []string{`lmos_mcp_calls_total{outcome="busy"} 1`, `lmos_mcp_calls_total{outcome="ok"} 2`, "lmos_mcp_tools 1"} {
		if !strings.Contains(string(metrics), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Listeners: a session's GET stream takes the one place.
	s := connect(t, h, v2025, "", "") // opens its GET stream
	id := s.ID()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body, _ := rawPost(t, h, http.MethodGet, "", "", map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": v2025, "Accept": "text/event-stream"})
		if status == http.StatusServiceUnavailable {
			if code, msg := rpcError(t, body); code != -32000 || !strings.Contains(msg, "mcp.maxListeners: 1") {
				t.Errorf("second stream: %d %q", code, msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a second stream was never refused: %d %.200s", status, body)
		}
		time.Sleep(20 * time.Millisecond) // the client's own stream is not open yet
	}
	// Sessions: a second and a third initialize; the third is refused.
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	status, body, _ := rawPost(t, h, http.MethodPost, "", init, nil)
	if status != http.StatusOK {
		t.Fatalf("second session: %d %.200s", status, body)
	}
	status, body, _ = rawPost(t, h, http.MethodPost, "", init, nil)
	if status != http.StatusServiceUnavailable {
		t.Fatalf("third session: %d %.200s", status, body)
	}
	if code, msg := rpcError(t, body); code != -32000 || !strings.Contains(msg, "mcp.maxSessions: 2") {
		t.Errorf("third session: %d %q", code, msg)
	}
	if n := countSessions(t, h); n != 2 {
		t.Errorf("%d sessions, want 2", n)
	}
}

// TestConcurrentInitializesKeepTheCap: initializes that arrive at once
// open no more sessions than mcp.maxSessions; the others are refused.
func TestConcurrentInitializesKeepTheCap(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.MCP.MaxSessions = 3 })
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	statuses := make(chan int, 12)
	for range 12 {
		go func() { // not rawPost: t.Fatal belongs to the test's goroutine
			req, _ := http.NewRequest(http.MethodPost, h.URL+"/mcp", strings.NewReader(init))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	ok, refused := 0, 0
	for range 12 {
		switch <-statuses {
		case http.StatusOK:
			ok++
		case http.StatusServiceUnavailable:
			refused++
		}
	}
	if ok != 3 || refused != 9 || countSessions(t, h) != 3 {
		t.Errorf("%d opened, %d refused, %d sessions; want 3, 9, 3", ok, refused, countSessions(t, h))
	}
}
