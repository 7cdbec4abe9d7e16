package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// The official MCP TypeScript SDK client (test/interop/mcp-client.mjs)
// against a hub started as main starts it, over Streamable HTTP and over
// stdio through the real lmos-hub binary (`lmos-hub mcp`): tools of an
// MQTT agent and a WebSocket agent, progress of streamed actions, tool
// errors of failing agents and of input the schema refuses, a list change
// when an agent joins, and a TD read as a resource. Every error the client
// reports fails the test (scriptProc.check).

// TestMCPTypeScriptClientHTTP runs the scenario over Streamable HTTP.
func TestMCPTypeScriptClientHTTP(t *testing.T) {
	hubtest.InteropScript(t, "mcp-client.mjs", "@modelcontextprotocol/sdk")
	h := startHub(t, nil)
	s := startMCPScenario(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := &tsClient{scriptProc: startScript(t, ctx, "MCP TypeScript client (Streamable HTTP)", "mcp-client.mjs", "http", h.URL+"/mcp", testToken)}
	// The transport reports each GET stream the hub opened.
	s.run(c, func() { c.waitListening() }, true)
}

// TestMCPTypeScriptClientStdio runs the scenario over stdio, the SDK's
// StdioClientTransport running the real `lmos-hub mcp`.
func TestMCPTypeScriptClientStdio(t *testing.T) {
	hubtest.InteropScript(t, "mcp-client.mjs", "@modelcontextprotocol/sdk")
	bin := buildTool(t, lmosHubPkg, "lmos-hub")
	h := startHub(t, nil)
	s := startMCPScenario(t, h)
	// The relay opens its GET stream on its own: a pass-through proxy in
	// front of the hub tells when the hub answered it.
	w := watchStreams(t, h.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := &tsClient{scriptProc: startScript(t, ctx, "MCP TypeScript client (stdio, lmos-hub mcp)", "mcp-client.mjs", "stdio", bin, w.url, testToken)}
	s.run(c, w.wait, false)
}

// Thing ids with characters a resource URI must percent-encode.
const (
	tsThermoID = "urn:test:home/thermostat"
	tsEchoID   = "urn:test:echo#1"
	tsLightID  = "urn:test:home/kitchen-light"
)

// mcpScenario is the hub and the agents the client meets.
type mcpScenario struct {
	t *testing.T
	h *testHub
	// calls counts the invocations that reached each agent action.
	calls map[string]*atomic.Int64
	// acks tells a stepped count that the client got its last partial.
	acks chan struct{}
}

// tsTD is an agent's TD with the given actions.
var tsTD = tdgen.AgentTD

func obj(props map[string]any, required ...any) map[string]any {
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// countAction is a streamed action: count {n, tag, step} emits n partial
// results {tag, i} and completes with {tag, n, agent}; with step, it emits
// each partial only once the client got the one before (mcpScenario.acks).
var countAction = map[string]any{
	"description": "Counts to n, reporting each step.",
	"input": obj(map[string]any{"n": map[string]any{"type": "integer", "minimum": 0, "maximum": 50},
		"tag": map[string]any{"type": "string"}, "step": map[string]any{"type": "boolean"}}, "n", "tag"),
	"output": obj(map[string]any{"tag": map[string]any{"type": "string"}, "n": map[string]any{"type": "integer"},
		"agent": map[string]any{"type": "string"}}, "tag", "n", "agent"),
}

// startMCPScenario connects a thermostat over MQTT and an echo agent over
// WebSocket and waits until the MCP door lists their tools.
func startMCPScenario(t *testing.T, h *testHub) *mcpScenario {
	s := &mcpScenario{t: t, h: h, calls: map[string]*atomic.Int64{}, acks: make(chan struct{}, 64)}
	for _, k := range []string{"setTarget", "thermo.count", "ignite", "echo", "echo.count", "refuse", "toggle"} {
		s.calls[k] = new(atomic.Int64)
	}
	thermo := tsTD(tsThermoID, "Living room thermostat", map[string]any{
		"setTarget": map[string]any{"description": "Set the target temperature",
			"input":  obj(map[string]any{"celsius": map[string]any{"type": "number", "minimum": 5, "maximum": 30}}, "celsius"),
			"output": obj(map[string]any{"accepted": map[string]any{"type": "boolean"}}, "accepted")},
		"count":  countAction,
		"ignite": map[string]any{"description": "Light the boiler", "output": obj(map[string]any{"lit": map[string]any{"type": "boolean"}})},
	})
	s.agent(mqttAgentURL(h), thermo, "thermo", map[string]agent.StreamHandler{
		"setTarget": func(_ context.Context, in agent.Input, _ func(any) error) (any, error) {
			var v struct{ Celsius float64 }
			if err := in.Decode(&v); err != nil {
				return nil, err
			}
			return map[string]any{"accepted": v.Celsius < 25}, nil
		},
		"ignite": func(context.Context, agent.Input, func(any) error) (any, error) {
			return nil, agent.NewProblem(http.StatusConflict, "the boiler is locked out after three failed starts")
		},
	})
	echo := tsTD(tsEchoID, "Echo agent", map[string]any{
		"echo":  map[string]any{"description": "Echo a word in capitals", "input": map[string]any{"type": "string", "maxLength": 64}, "output": map[string]any{"type": "string"}},
		"count": countAction,
		"refuse": map[string]any{"description": "Always refuses",
			"input": obj(map[string]any{"why": map[string]any{"type": "string"}})},
	})
	s.agent(wsAgentURL(h), echo, "echo", map[string]agent.StreamHandler{
		"echo": func(_ context.Context, in agent.Input, _ func(any) error) (any, error) {
			var v string
			if err := in.Decode(&v); err != nil {
				return nil, err
			}
			return strings.ToUpper(v), nil
		},
		"refuse": func(context.Context, agent.Input, func(any) error) (any, error) {
			return nil, agent.NewProblem(http.StatusServiceUnavailable, "the echo chamber is closed for cleaning")
		},
	})
	s.waitDoor()
	return s
}

func mqttAgentURL(h *testHub) string { return "mqtt://" + h.Main.MQTTAddr.String() }
func wsAgentURL(h *testHub) string {
	return "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"
}

// agent connects an agent serving handlers (and count, streamed) and
// counts each invocation under key prefix.
func (s *mcpScenario) agent(url string, td map[string]any, prefix string, handlers map[string]agent.StreamHandler) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := agent.Connect(ctx, agent.Options{URL: url, TD: td, Logger: hubtest.Logger(s.t), OnCredentials: func(agent.Credentials) {}})
	if err != nil {
		s.t.Fatalf("agent %s over %s: %v", td["id"], url, err)
	}
	s.t.Cleanup(func() { _ = a.Close() })
	id := td["id"].(string)
	handlers["count"] = func(ctx context.Context, in agent.Input, emit func(any) error) (any, error) {
		var v struct {
			N    int
			Tag  string
			Step bool
		}
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		for i := range v.N {
			if err := emit(map[string]any{"tag": v.Tag, "i": i}); err != nil {
				return nil, err
			}
			if v.Step {
				select {
				case <-s.acks:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		return map[string]any{"tag": v.Tag, "n": v.N, "agent": id}, nil
	}
	for name, h := range handlers {
		key := name
		if s.calls[key] == nil || name == "count" {
			key = prefix + "." + name
		}
		n := s.calls[key]
		a.HandleActionStream(name, func(ctx context.Context, in agent.Input, emit func(any) error) (any, error) {
			n.Add(1)
			return h(ctx, in, emit)
		})
	}
}

// waitDoor waits until the MCP door's tools reflect the directory as it
// is now.
func (s *mcpScenario) waitDoor() {
	s.t.Helper()
	rev := s.h.Main.Registry.Revision()
	deadline := time.Now().Add(60 * time.Second)
	for s.h.Main.MCP.Synced() < rev {
		if time.Now().After(deadline) {
			s.t.Fatalf("the MCP door never caught up with registry revision %d (at %d)", rev, s.h.Main.MCP.Synced())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tsClient is the script with what it heard besides its answers.
type tsClient struct {
	*scriptProc
	changes, listening int
	// resChanges counts notifications/resources/list_changed, others the
	// rest of the notifications the client had no handler for.
	resChanges int
	others     []map[string]any
	// onProgressed hears the client's onprogress calls (nil: nobody).
	onProgressed func(m map[string]any)
}

// keep counts the events among reports and keeps the report kind.
func (c *tsClient) keep(kind string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		switch {
		case m["listChanged"] != nil:
			c.changes++
			if m["listChanged"] != float64(c.changes) {
				c.t.Errorf("list change %v reported as the %d-th seen", m["listChanged"], c.changes)
			}
		case m["listening"] != nil:
			c.listening++
		case m["progressed"] != nil:
			if c.onProgressed != nil {
				c.onProgressed(m)
			}
			return kind == "progressed"
		case m["notification"] == "notifications/resources/list_changed":
			c.resChanges++
			return kind == "resources/list_changed"
		case m["notification"] != nil:
			c.others = append(c.others, m)
		case m["failed"] != nil:
			return kind != "" // the command's {"error"} says why
		default:
			if m[kind] == nil {
				c.t.Errorf("%s: unexpected report %v", c.name, m)
			}
			return m[kind] != nil
		}
		return m[kind] != nil
	}
}

// ask runs a command and returns its report (a member named kind).
func (c *tsClient) ask(kind string, cmd map[string]any) map[string]any {
	c.t.Helper()
	c.do(90*time.Second, cmd)
	return c.report(kind, 10*time.Second)
}

// report waits up to d for the report of the command running, failing the
// test if the command failed.
func (c *tsClient) report(kind string, d time.Duration) map[string]any {
	c.t.Helper()
	m := c.next(d, c.keep(kind))
	if m["failed"] != nil {
		c.check()
		c.t.Fatalf("%s: %v failed", c.name, m["failed"])
	}
	return m
}

// absorb counts the events reported so far.
func (c *tsClient) absorb() {
	for _, m := range c.drain() {
		c.keep("")(m)
	}
}

// waitListening waits until the HTTP transport's GET stream is open.
func (c *tsClient) waitListening() {
	c.t.Helper()
	c.absorb()
	if c.listening == 0 {
		c.next(60*time.Second, c.keep("listening"))
	}
}

// tsTool is what the scenario reads of a listed tool.
type tsTool struct {
	Name         string         `json:"name"`
	Title        string         `json:"title"`
	Description  string         `json:"description"`
	InputSchema  map[string]any `json:"inputSchema"`
	OutputSchema map[string]any `json:"outputSchema"`
}

func (c *tsClient) tools() map[string]tsTool {
	c.t.Helper()
	var list []tsTool
	remarshal(c.t, c.ask("tools", map[string]any{"cmd": "list"})["tools"], &list)
	out := map[string]tsTool{}
	for _, tl := range list {
		if _, dup := out[tl.Name]; dup {
			c.t.Errorf("tool %q listed twice", tl.Name)
		}
		out[tl.Name] = tl
	}
	return out
}

// tsResult is a call's report.
type tsResult struct {
	Result struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent map[string]any `json:"structuredContent"`
		IsError           bool           `json:"isError"`
	} `json:"result"`
	Progress []struct {
		Progress float64  `json:"progress"`
		Total    *float64 `json:"total"`
		Message  string   `json:"message"`
	} `json:"progress"`
}

func (c *tsClient) call(name string, args any) tsResult {
	c.t.Helper()
	var r tsResult
	remarshal(c.t, c.ask("call", map[string]any{"cmd": "call", "name": name, "arguments": args}), &r)
	return r
}

// callStepped calls a tool and, each time the client's onprogress got a
// notification of it, acks the agent's next partial.
func (c *tsClient) callStepped(name string, args any, ack chan<- struct{}) tsResult {
	c.t.Helper()
	c.onProgressed = func(m map[string]any) {
		if m["tool"] == name {
			ack <- struct{}{}
		}
	}
	defer func() { c.onProgressed = nil }()
	c.send(map[string]any{"cmd": "call", "name": name, "arguments": args})
	m := c.report("call", 90*time.Second)
	select {
	case ok := <-c.oks:
		if ok != "call" {
			c.t.Fatalf("%s: ok %q for a call", c.name, ok)
		}
	case <-time.After(10 * time.Second):
		c.t.Fatalf("%s: no ok after the call's report", c.name)
	}
	c.check()
	var r tsResult
	remarshal(c.t, m, &r)
	return r
}

func remarshal(t *testing.T, v, out any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("report %s: %v", b, err)
	}
}

// run plays the scenario with client c; listening returns once c's
// notification stream is open; freeRunning adds streamed calls whose
// agent does not wait for the client (checkProgress).
func (s *mcpScenario) run(c *tsClient, listening func(), freeRunning bool) {
	t := s.t
	s.checkTools(c)
	s.checkCalls(c)
	s.checkProgress(c, freeRunning)
	s.checkFailures(c)
	s.checkResource(c)
	s.checkJoin(c, listening)
	c.absorb()
	for _, m := range c.others {
		t.Errorf("unexpected notification %v", m)
	}
	t.Logf("heard %d tools/list_changed and %d resources/list_changed", c.changes, c.resChanges)
	c.exit()
}

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// checkTools: tools/list holds every action's tool, with schemas from the
// TDs (a string input and output wrapped in an object).
func (s *mcpScenario) checkTools(c *tsClient) {
	t := s.t
	tools := c.tools()
	want := []string{"find_tools", "call_tool", "living_room_thermostat__setTarget", "living_room_thermostat__count",
		"living_room_thermostat__ignite", "echo_agent__echo", "echo_agent__count", "echo_agent__refuse"}
	if len(tools) != len(want) {
		t.Errorf("listed %d tools, want %d: %v", len(tools), len(want), keys(tools))
	}
	for _, name := range want {
		tl, ok := tools[name]
		if !ok {
			t.Fatalf("tool %s not listed; listed: %v", name, keys(tools))
		}
		if !toolName.MatchString(tl.Name) || tl.Description == "" || tl.InputSchema["type"] != "object" {
			t.Errorf("tool %s: description %q, inputSchema %v", name, tl.Description, tl.InputSchema)
		}
	}
	set := tools["living_room_thermostat__setTarget"]
	celsius, _ := set.InputSchema["properties"].(map[string]any)["celsius"].(map[string]any)
	if celsius["maximum"] != 30.0 || celsius["minimum"] != 5.0 || !reflect.DeepEqual(set.InputSchema["required"], []any{"celsius"}) {
		t.Errorf("setTarget inputSchema %v", set.InputSchema)
	}
	if set.OutputSchema["type"] != "object" || set.OutputSchema["properties"] == nil {
		t.Errorf("setTarget outputSchema %v", set.OutputSchema)
	}
	echo := tools["echo_agent__echo"]
	in, _ := echo.InputSchema["properties"].(map[string]any)["input"].(map[string]any)
	out, _ := echo.OutputSchema["properties"].(map[string]any)["result"].(map[string]any)
	if in["type"] != "string" || in["maxLength"] != 64.0 || out["type"] != "string" {
		t.Errorf("echo: inputSchema %v, outputSchema %v (want a string wrapped as input and result)", echo.InputSchema, echo.OutputSchema)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkCalls: a call reaches the MQTT agent and the WebSocket agent; the
// output comes back as structured content and as text.
func (s *mcpScenario) checkCalls(c *tsClient) {
	t := s.t
	r := c.call("living_room_thermostat__setTarget", map[string]any{"celsius": 21})
	if r.Result.IsError || !reflect.DeepEqual(r.Result.StructuredContent, map[string]any{"accepted": true}) ||
		len(r.Result.Content) != 1 || r.Result.Content[0].Type != "text" || r.Result.Content[0].Text != `{"accepted":true}` {
		t.Errorf("setTarget over MQTT: %+v", r.Result)
	}
	r = c.call("echo_agent__echo", map[string]any{"input": "hello"})
	if r.Result.IsError || !reflect.DeepEqual(r.Result.StructuredContent, map[string]any{"result": "HELLO"}) ||
		len(r.Result.Content) != 1 || r.Result.Content[0].Text != `"HELLO"` {
		t.Errorf("echo over WebSocket: %+v", r.Result)
	}
	if len(r.Progress) != 0 {
		t.Errorf("echo sent progress %v", r.Progress)
	}
	s.invoked("setTarget", 1)
	s.invoked("echo", 1)
}

// invoked checks how often an agent's action ran.
func (s *mcpScenario) invoked(key string, want int64) {
	s.t.Helper()
	if n := s.calls[key].Load(); n != want {
		s.t.Errorf("%s ran %d times, want %d", key, n, want)
	}
}

// checkProgress: every partial result of a streamed action reaches
// onprogress, in order, before the final result. The agent emits each
// partial once the client got the one before, so none can arrive in one
// read with the result: the SDK client (1.32) handles a response at once
// but a notification a microtask later, and drops progress that comes
// after its result with "unknown token" (typescript-sdk issue 2580). Over
// Streamable HTTP, where it reads one event at a time, the partials also
// run free (freeRunning).
func (s *mcpScenario) checkProgress(c *tsClient, freeRunning bool) {
	const n = 7
	for _, tc := range []struct{ tool, id, key string }{
		{"living_room_thermostat__count", tsThermoID, "thermo.count"},
		{"echo_agent__count", tsEchoID, "echo.count"},
	} {
		tag := "stepped-" + tc.key
		r := c.callStepped(tc.tool, map[string]any{"n": n, "tag": tag, "step": true}, s.acks)
		s.checkCount(tc.tool, tc.id, tag, n, r)
		calls := int64(1)
		if freeRunning {
			tag = "free-" + tc.key
			s.checkCount(tc.tool, tc.id, tag, n, c.call(tc.tool, map[string]any{"n": n, "tag": tag}))
			calls++
		}
		s.invoked(tc.key, calls)
	}
}

// checkCount checks the result and the progress of a count call.
func (s *mcpScenario) checkCount(tool, id, tag string, n int, r tsResult) {
	t := s.t
	t.Helper()
	want := map[string]any{"tag": tag, "n": float64(n), "agent": id}
	if r.Result.IsError || !reflect.DeepEqual(r.Result.StructuredContent, want) {
		t.Errorf("%s: %+v, want structured %v", tool, r.Result, want)
	}
	if len(r.Progress) != n {
		t.Errorf("%s: %d progress notifications, want %d: %+v", tool, len(r.Progress), n, r.Progress)
	}
	for i, p := range r.Progress {
		var got map[string]any
		if err := json.Unmarshal([]byte(p.Message), &got); err != nil || p.Progress != float64(i+1) ||
			!reflect.DeepEqual(got, map[string]any{"tag": tag, "i": float64(i)}) {
			t.Errorf("%s: progress %d is %+v, want progress %d with partial result {tag %s, i %d}", tool, i, p, i+1, tag, i)
		}
	}
}

// checkFailures: an agent's problem and input the schema refuses are tool
// errors (isError) the model can read; refused input never reaches the
// agent.
func (s *mcpScenario) checkFailures(c *tsClient) {
	t := s.t
	// The agent's problem keeps its type, title and detail; its status is
	// 502, as over the HTTP proxy (PROTOCOL §10: a Thing's failure).
	for _, tc := range []struct {
		tool, kind, title, detail string
		args                      any
	}{
		{"living_room_thermostat__ignite", "conflict", "Conflict", "the boiler is locked out after three failed starts", map[string]any{}},
		{"echo_agent__refuse", "unavailable", "Service Unavailable", "the echo chamber is closed for cleaning", map[string]any{"why": "test"}},
	} {
		r := c.call(tc.tool, tc.args)
		p := problemOf(t, r)
		if p == nil {
			continue
		}
		if !r.Result.IsError || r.Result.StructuredContent != nil || !strings.Contains(r.Result.Content[0].Text, tc.detail) ||
			p["status"] != float64(http.StatusBadGateway) || p["detail"] != tc.detail || p["title"] != tc.title ||
			p["type"] != "https://eclipse.dev/lmos/protocol/v1/errors#"+tc.kind {
			t.Errorf("%s: %+v, want a tool error with the agent's problem (%s, %q)", tc.tool, r.Result, tc.kind, tc.detail)
		}
	}
	s.invoked("ignite", 1)
	s.invoked("refuse", 1)
	before := map[string]int64{}
	for k, n := range s.calls {
		before[k] = n.Load()
	}
	for _, tc := range []struct {
		tool string
		args any
		says []string
	}{
		{"living_room_thermostat__setTarget", map[string]any{"celsius": 99}, []string{"maximum", "30"}},
		{"living_room_thermostat__setTarget", map[string]any{"celsius": "warm"}, []string{"celsius"}},
		{"living_room_thermostat__setTarget", map[string]any{}, []string{"celsius"}},
		{"echo_agent__echo", map[string]any{"input": strings.Repeat("x", 65)}, []string{"64"}},
		{"echo_agent__echo", map[string]any{"input": 42}, []string{"string"}},
		{"echo_agent__count", map[string]any{"n": 51, "tag": "x"}, []string{"maximum", "50"}},
	} {
		r := c.call(tc.tool, tc.args)
		p := problemOf(t, r)
		if p == nil {
			continue
		}
		if !r.Result.IsError || r.Result.StructuredContent != nil || p["status"] != float64(http.StatusBadRequest) {
			t.Errorf("%s %v: %+v, want a tool error with a 400 problem", tc.tool, tc.args, r.Result)
			continue
		}
		// The message, and the problem's field errors, tell the model
		// what to correct.
		said := r.Result.Content[0].Text + "\n" + r.Result.Content[1].Text
		for _, w := range tc.says {
			if !strings.Contains(said, w) {
				t.Errorf("%s %v: the error does not say %q: %s", tc.tool, tc.args, w, said)
			}
		}
	}
	for k, n := range before {
		s.invoked(k, n)
	}
	// A tool nobody has is a protocol error, the one error the client
	// must throw here.
	var thrown struct {
		Thrown struct {
			Name, Message string
			Code          float64
		}
	}
	remarshal(t, c.ask("call", map[string]any{"cmd": "call", "name": "no_such__tool", "arguments": map[string]any{}, "expectError": true}), &thrown)
	if e := thrown.Thrown; e.Name != "McpError" || e.Code != -32602 || !strings.Contains(e.Message, "no_such__tool") {
		t.Errorf("unknown tool: thrown %+v, want McpError -32602 naming the tool", e)
	}
}

// problemOf is the problem a tool error carries as its second text.
func problemOf(t *testing.T, r tsResult) map[string]any {
	t.Helper()
	if len(r.Result.Content) != 2 {
		t.Errorf("tool error with %d contents, want the message and the problem: %+v", len(r.Result.Content), r.Result)
		return nil
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(r.Result.Content[1].Text), &p); err != nil {
		t.Errorf("the second content of a tool error is not a problem: %q", r.Result.Content[1].Text)
		return nil
	}
	return p
}

// checkResource: a Thing's TD is the resource lmos://things/{id}, the
// same document the directory serves.
func (s *mcpScenario) checkResource(c *tsClient) {
	t := s.t
	// RFC 6570 simple expansion: all but unreserved characters encoded.
	uri := "lmos://things/" + strings.ReplaceAll(url.QueryEscape(tsThermoID), "+", "%20")
	if want := "lmos://things/urn%3Atest%3Ahome%2Fthermostat"; uri != want {
		t.Fatalf("test: uri %s, want %s", uri, want)
	}
	var listed []struct{ URI, MimeType string }
	remarshal(t, c.ask("resources", map[string]any{"cmd": "resources"})["resources"], &listed)
	found := false
	for _, r := range listed {
		found = found || r.URI == uri
	}
	if !found {
		t.Errorf("resources/list lacks %s: %v", uri, listed)
	}
	var contents []struct {
		URI      string `json:"uri"`
		MimeType string `json:"mimeType"`
		Text     string `json:"text"`
	}
	remarshal(t, c.ask("read", map[string]any{"cmd": "read", "uri": uri})["contents"], &contents)
	if len(contents) != 1 || contents[0].URI != uri || contents[0].MimeType != "application/td+json" {
		t.Fatalf("read %s: %+v", uri, contents)
	}
	var got, want map[string]any
	if err := json.Unmarshal([]byte(contents[0].Text), &got); err != nil {
		t.Fatalf("read %s: not JSON: %v", uri, err)
	}
	resp, body := s.h.do("GET", "/things/"+pathEscape(tsThermoID), "", nil, testToken)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &want) != nil {
		t.Fatalf("GET the TD: %d %s", resp.StatusCode, body)
	}
	// registration.retrieved is when each was read (TD Discovery).
	for _, td := range []map[string]any{got, want} {
		if reg, ok := td["registration"].(map[string]any); ok {
			delete(reg, "retrieved")
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resource %s is not the directory's TD:\n got %s\nwant %s", uri, contents[0].Text, body)
	}
	if got["id"] != tsThermoID || got["title"] != "Living room thermostat" {
		t.Errorf("resource %s: id %v title %v", uri, got["id"], got["title"])
	}
}

// checkJoin: an agent joining is announced (notifications/tools/
// list_changed and resources/list_changed) to the client, whose next
// tools/list has its tool and resources/list its TD.
func (s *mcpScenario) checkJoin(c *tsClient, listening func()) {
	t := s.t
	c.absorb()
	if c.changes != 0 || c.resChanges != 0 {
		t.Errorf("%d tool and %d resource list changes before any Thing joined or left", c.changes, c.resChanges)
	}
	listening()
	light := tsTD(tsLightID, "Kitchen light", map[string]any{
		"toggle": map[string]any{"description": "Toggle the light", "output": obj(map[string]any{"on": map[string]any{"type": "boolean"}}, "on")},
	})
	s.agent(mqttAgentURL(s.h), light, "light", map[string]agent.StreamHandler{
		"toggle": func(context.Context, agent.Input, func(any) error) (any, error) {
			return map[string]any{"on": true}, nil
		},
	})
	// Each list change is announced at least once: the SDK server batches
	// the changes of 10 ms into one notification, and a sync may take two.
	if c.changes == 0 {
		c.next(60*time.Second, c.keep("listChanged"))
	}
	if c.resChanges == 0 {
		c.next(60*time.Second, c.keep("resources/list_changed"))
	}
	var listed []struct{ URI string }
	remarshal(t, c.ask("resources", map[string]any{"cmd": "resources"})["resources"], &listed)
	lightURI := "lmos://things/urn%3Atest%3Ahome%2Fkitchen-light"
	if !slices.ContainsFunc(listed, func(r struct{ URI string }) bool { return r.URI == lightURI }) {
		t.Errorf("after the list change, resources/list lacks %s: %v", lightURI, listed)
	}
	tools := c.tools()
	if _, ok := tools["kitchen_light__toggle"]; !ok {
		t.Fatalf("after the list change, tools/list lacks kitchen_light__toggle: %v", keys(tools))
	}
	r := c.call("kitchen_light__toggle", map[string]any{})
	if r.Result.IsError || !reflect.DeepEqual(r.Result.StructuredContent, map[string]any{"on": true}) {
		t.Errorf("toggle: %+v", r.Result)
	}
	s.invoked("toggle", 1)
}

// streamWatch is a pass-through proxy to the hub that tells when the hub
// answered a GET (a session's notification stream) with 200.
type streamWatch struct {
	t      *testing.T
	url    string
	opened chan struct{}
}

func watchStreams(t *testing.T, hubURL string) *streamWatch {
	target, err := url.Parse(hubURL)
	if err != nil {
		t.Fatal(err)
	}
	w := &streamWatch{t: t, opened: make(chan struct{}, 64)}
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
				select {
				case w.opened <- struct{}{}:
				default:
				}
			}
			return nil
		},
	}
	// The proxy reads each request's body before it forwards it: the hub
	// answers a POST with an event stream as soon as it has the body, and
	// net/http closes the body of a request whose answer has begun, which
	// made the proxy's copy of the body fail and drop the connection to
	// the hub mid-stream now and then.
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections() // a notification stream left open
		srv.Close()
	})
	w.url = srv.URL
	return w
}

func (w *streamWatch) wait() {
	w.t.Helper()
	select {
	case <-w.opened:
	case <-time.After(60 * time.Second):
		w.t.Fatal("lmos-hub mcp never opened its notification stream")
	}
}
