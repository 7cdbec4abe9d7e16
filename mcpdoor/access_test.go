package mcpdoor_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestScopeDecidesTools: the hub's one policy decides which tools exist for
// a client and what they may do, at both revisions: anonymous (none) sees
// nothing, read sees the door's own tools but may invoke nothing, operate
// sees and calls the Things' tools; a revoked token loses them at once.
func TestScopeDecidesTools(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.Access.Anonymous = hub.AnonymousNone })
	simpleAgent(t, h, "urn:test:a", "Doubler")
	read, _ := createToken(t, h, "read")
	operate, operateID := createToken(t, h, "operate")
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			// Anonymous under access.anonymous none: refused before it
			// holds a session or a stream, as every door refuses it.
			hdr := map[string]string{"Mcp-Protocol-Version": v}
			body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
			if v == v2026 {
				body = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
				hdr["Mcp-Method"] = "tools/list"
			}
			before := countSessions(t, h)
			for _, method := range []string{http.MethodPost, http.MethodGet} {
				status, got, rh := rawPost(t, h, method, "", body, hdr)
				if status != http.StatusUnauthorized || !strings.HasPrefix(rh.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("anonymous %s: %d %q %s", method, status, rh.Get("WWW-Authenticate"), got)
					continue
				}
				if code, msg := rpcError(t, got); code != -32000 || !strings.Contains(msg, "bearer token is required") {
					t.Errorf("anonymous %s: %d %q", method, code, msg)
				}
			}
			if after := countSessions(t, h); after != before {
				t.Errorf("a refused anonymous client opened %d sessions", after-before)
			}
			r := connect(t, h, v, "", read)
			tools := r.tools(t)
			if tools["find_tools"] == nil || tools["call_tool"] == nil || tools["doubler__do"] != nil {
				t.Errorf("read token lists %v, want find_tools and call_tool only", names(tools))
			}
			res := r.call(t, "doubler__do", map[string]any{"n": 2})
			if !res.IsError || !strings.Contains(text(res), "needs scope operate") {
				t.Errorf("read token call: error=%v %s", res.IsError, text(res))
			}
			// Refused before anything of the Thing is looked at: a
			// guessed action, bad input, all the same answer.
			for _, args := range []map[string]any{
				{"thing": "urn:test:a", "action": "guess"},
				{"thing": "urn:test:a", "action": "do", "input": map[string]any{"n": "x"}},
			} {
				res := r.call(t, "call_tool", args)
				if !res.IsError || !strings.Contains(text(res), "needs scope operate") {
					t.Errorf("read token call_tool %v: error=%v %s", args, res.IsError, text(res))
				}
			}
			if res := r.call(t, "doubler__do", map[string]any{"n": "x"}); !res.IsError || !strings.Contains(text(res), "needs scope operate") {
				t.Errorf("read token, bad input: error=%v %s", res.IsError, text(res))
			}
			o := connect(t, h, v, "", operate)
			o.waitTools(t, "list doubler__do", func(m map[string]*mcp.Tool) bool { return m["doubler__do"] != nil })
			if res := o.call(t, "doubler__do", map[string]any{"n": 2}); res.IsError || mustJSON(res.StructuredContent) != `{"twice":4}` {
				t.Errorf("operate call: error=%v %s", res.IsError, text(res))
			}
		})
	}
	// A revoked token is refused on its next request, session or not.
	o := connect(t, h, v2025, "", operate)
	resp, b := h.Do(http.MethodDelete, "/api/tokens/"+operateID, "", nil, hubtest.Token)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", resp.StatusCode, b)
	}
	_, err := o.CallTool(context.Background(), &mcp.CallToolParams{Name: "doubler__do", Arguments: map[string]any{"n": 1}})
	if err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("call with a revoked token: %v", err)
	}
}

// TestSecuredThingNeedsAToken: a Thing whose TD requires security is
// neither listed nor callable for anonymous clients, even with anonymous
// operate; an operate token sees it.
func TestSecuredThingNeedsAToken(t *testing.T) {
	h := startHub(t, nil)
	td := agentTD("urn:test:locked", "Door lock", map[string]any{"unlock": map[string]any{"description": "Unlocks.",
		"forms": []any{map[string]any{"href": "mqtt://hub.local/lmos/v1/things/urn:test:locked/actions/unlock"}}}})
	td["securityDefinitions"] = map[string]any{"bearer_sc": map[string]any{"scheme": "bearer"}}
	td["security"] = "bearer_sc"
	h.Put("urn:test:locked", []byte(mustJSON(td)))
	operate, _ := createToken(t, h, "operate")
	o := connect(t, h, v2026, "", operate)
	o.waitTools(t, "list door_lock__unlock", func(m map[string]*mcp.Tool) bool { return m["door_lock__unlock"] != nil })
	anon := connect(t, h, v2026, "", "")
	if tools := anon.tools(t); tools["door_lock__unlock"] != nil || tools["find_tools"] == nil {
		t.Errorf("anonymous lists %v", names(tools))
	}
	res := anon.call(t, "door_lock__unlock", map[string]any{})
	if !res.IsError || !strings.Contains(text(res), "requires security") {
		t.Errorf("anonymous call of a secured Thing: error=%v %s", res.IsError, text(res))
	}
}

// TestForeignOriginRefused: a request from another site's page is refused
// with 403 and a JSON-RPC error, token or not (DNS rebinding, CSRF), and
// opens no session; the hub's own origin and http.allowedOrigins pass.
func TestForeignOriginRefused(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.HTTP.AllowedOrigins = []string{"http://console.example"} })
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
	sessions := func() int { return countSessions(t, h) }
	before := sessions()
	for _, tc := range []struct {
		what string
		hdr  map[string]string
	}{
		{"foreign", map[string]string{"Origin": "http://evil.example"}},
		{"foreign with a token", map[string]string{"Origin": "http://evil.example", "Authorization": "Bearer " + hubtest.Token}},
		{"foreign, same host name other port", map[string]string{"Origin": "http://127.0.0.1:1"}},
		{"null", map[string]string{"Origin": "null"}},
	} {
		for _, method := range []string{http.MethodPost, http.MethodGet} {
			status, body, _ := rawPost(t, h, method, "", init, tc.hdr)
			if status != http.StatusForbidden {
				t.Errorf("%s %s: %d %s", tc.what, method, status, body)
				continue
			}
			if code, msg := rpcError(t, body); code != -32000 || !strings.Contains(msg, "refuses requests from the page at") {
				t.Errorf("%s: %d %q", tc.what, code, msg)
			}
		}
	}
	if after := sessions(); after != before {
		t.Errorf("refused requests opened %d sessions", after-before)
	}
	for _, origin := range []string{h.URL, "http://console.example"} {
		status, body, hdr := rawPost(t, h, http.MethodPost, "", init, map[string]string{"Origin": origin})
		if status != http.StatusOK || hdr.Get("Mcp-Session-Id") == "" {
			t.Errorf("origin %s: %d %.200s", origin, status, body)
		}
	}
}

// countSessions counts the door's sessions through the hub's Main.
func countSessions(t testing.TB, h *hubtest.Hub) int {
	t.Helper()
	return h.Main.MCP.Sessions()
}

// TestDoorOff: mcp.enabled false serves no /mcp, and bad settings are
// refused before the hub starts.
func TestDoorOff(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.MCP.Enabled = false })
	status, body, _ := rawPost(t, h, http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil)
	if status != http.StatusNotFound || h.Main.MCP != nil {
		t.Errorf("door off: %d %s", status, body)
	}
	cfg := app.DefaultConfig()
	cfg.MCP.MaxTools, cfg.MCP.SessionTimeout = 0, 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "mcp.maxTools: must be at least 1 (got 0)") || !strings.Contains(err.Error(), "mcp.sessionTimeout") {
		t.Errorf("bad settings: %v", err)
	}
}
