package mcpdoor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Versions the tests speak: the current revision (stateless) and the one
// before it (sessions).
const (
	v2026 = "2026-07-28"
	v2025 = "2025-11-25"
)

var versions = []string{v2026, v2025}

// startHub starts a hub as main does.
func startHub(t testing.TB, edit func(*app.Config)) *hubtest.Hub {
	t.Helper()
	return hubtest.Start(t, edit)
}

// agentTD is the TD of an agent with the given actions.
var agentTD = tdgen.AgentTD

// connectAgent connects an agent over url (mqtt:// or ws://) and waits
// until the hub has its Thing.
func connectAgent(t testing.TB, h *hubtest.Hub, url string, td map[string]any, setup func(a *agent.Agent)) *agent.Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var a *agent.Agent
	var err error
	a, err = agent.Connect(ctx, agent.Options{URL: url, TD: td, Logger: hubtest.Logger(t), OnCredentials: func(agent.Credentials) {}})
	if err != nil {
		t.Fatalf("agent %s: %v", url, err)
	}
	if setup != nil {
		setup(a)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func mqttURL(h *hubtest.Hub) string { return "mqtt://" + h.MQTTAddr() }
func wsURL(h *hubtest.Hub) string   { return "ws" + strings.TrimPrefix(h.URL, "http") + "/ws" }

// bearer adds a token to every request.
type bearer struct {
	token string
	hdr   map[string]string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	for k, v := range b.hdr {
		r.Header.Set(k, v)
	}
	return b.base.RoundTrip(r)
}

// client is an MCP client session of the official Go SDK with what it heard.
type client struct {
	*mcp.ClientSession
	mu      sync.Mutex
	changed chan struct{}
	// resChanged hears notifications/resources/list_changed.
	resChanged chan struct{}
	progress   []*mcp.ProgressNotificationParams
}

// connect opens a session with the hub's /mcp (path may add a query) at
// version, with token ("" none).
func connect(t testing.TB, h *hubtest.Hub, version, path, token string) *client {
	t.Helper()
	c := &client{changed: make(chan struct{}, 64), resChanged: make(chan struct{}, 64)}
	cl := mcp.NewClient(&mcp.Implementation{Name: "lmos-test", Version: "0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case c.changed <- struct{}{}:
			default:
			}
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			select {
			case c.resChanged <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, r.Params)
			c.mu.Unlock()
		},
	})
	if path == "" {
		path = "/mcp"
	}
	tr := &mcp.StreamableClientTransport{Endpoint: h.URL + path, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{token: token, base: http.DefaultTransport}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect %s: %v", version, err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}
	c.ClientSession = cs
	t.Cleanup(func() { cs.Close() })
	return c
}

func (c *client) tools(t testing.TB) map[string]*mcp.Tool {
	t.Helper()
	res, err := c.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	out := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		if out[tl.Name] != nil {
			t.Fatalf("tool %q listed twice", tl.Name)
		}
		out[tl.Name] = tl
	}
	return out
}

// waitTool polls tools/list until cond holds for the listed tools (the
// door follows the directory asynchronously); a deadline only fails a
// broken test.
func (c *client) waitTools(t testing.TB, what string, cond func(map[string]*mcp.Tool) bool) map[string]*mcp.Tool {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tools := c.tools(t)
		if cond(tools) {
			return tools
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools never %s; listed: %v", what, names(tools))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func names(m map[string]*mcp.Tool) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}

// call calls a tool with a progress token.
func (c *client) call(t testing.TB, name string, args any) *mcp.CallToolResult {
	t.Helper()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	p.SetProgressToken("tok-" + name)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return res
}

// text joins a result's text contents.
func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return string(b)
}

// createToken makes a token of scope through POST /api/tokens.
func createToken(t testing.TB, h *hubtest.Hub, scope string) (secret, id string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"name": scope, "scope": scope})
	resp, b := h.Do(http.MethodPost, "/api/tokens", "application/json", body, hubtest.Token)
	var v struct{ Token, ID string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &v) != nil || v.Token == "" {
		t.Fatalf("POST /api/tokens %s: %d %s", scope, resp.StatusCode, b)
	}
	return v.Token, v.ID
}

// rawPost posts body to /mcp with hdr and returns the status and body.
func rawPost(t testing.TB, h *hubtest.Hub, method, path, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	if path == "" {
		path = "/mcp"
	}
	req, err := http.NewRequest(method, h.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil || b.Len() > 1<<20 {
			break
		}
	}
	return resp.StatusCode, b.String(), resp.Header
}

// rpcError decodes a JSON-RPC error answer.
func rpcError(t testing.TB, body string) (int, string) {
	t.Helper()
	var v struct {
		Error *struct {
			Code    int
			Message string
		}
	}
	body = strings.TrimSpace(body)
	if i := strings.Index(body, "data: "); strings.HasPrefix(body, "event:") && i >= 0 {
		body = strings.TrimSpace(body[i+len("data: "):])
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error == nil {
		t.Fatalf("not a JSON-RPC error: %q", body)
	}
	return v.Error.Code, v.Error.Message
}

// simpleAgent connects an agent over MQTT with one action "do" taking
// {"n": integer} and answering {"twice": 2n}.
func simpleAgent(t testing.TB, h *hubtest.Hub, id, title string) *agent.Agent {
	t.Helper()
	do := map[string]any{
		"description": "Doubles n.",
		"input":       map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []any{"n"}},
		"output":      map[string]any{"type": "object", "properties": map[string]any{"twice": map[string]any{"type": "integer"}}},
	}
	return connectAgent(t, h, mqttURL(h), agentTD(id, title, map[string]any{"do": do}), func(a *agent.Agent) {
		a.HandleAction("do", func(_ context.Context, in agent.Input) (any, error) {
			var v struct{ N int }
			if err := in.Decode(&v); err != nil {
				return nil, err
			}
			return map[string]any{"twice": 2 * v.N}, nil
		})
	})
}

// thingCount is how many Things the hub has.
func thingCount(t testing.TB, h *hubtest.Hub) int {
	t.Helper()
	resp, b := h.Do(http.MethodGet, "/things?format=array", "", nil, hubtest.Token)
	var all []any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &all) != nil {
		t.Fatalf("GET /things: %d %.200s", resp.StatusCode, b)
	}
	return len(all)
}
