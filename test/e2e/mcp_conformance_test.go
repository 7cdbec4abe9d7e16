package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP conformance suite (npm @modelcontextprotocol/conformance, pinned
// in test/interop/package.json) drives a real hub's /mcp as an MCP client
// of revision 2025-11-25, which the door serves with sessions. Most of its
// server scenarios call the fixture tools, resources and prompts of the
// suite's own "everything server" (test_simple_text, test://static-text,
// test_simple_prompt...), which no hub has: those are listed, each with the
// reason read from the scenario's checks, in
// test/interop/mcp-conformance-baseline.yml. Every other scenario must pass,
// and a listed one that passes fails the test too, so the list stays true.

const (
	conformanceModule   = "@modelcontextprotocol/conformance"
	conformanceBaseline = "mcp-conformance-baseline.yml"
)

// TestMCPConformanceSuite runs every server scenario of the suite against
// a hub with an agent (tools) and a registered Thing (resources) and
// compares the outcome with the baseline.
func TestMCPConformanceSuite(t *testing.T) {
	register := hubtest.InteropScript(t, "conformance-compat/register.mjs", conformanceModule)
	interop := filepath.Dir(filepath.Dir(register))
	cli := filepath.Join(interop, "node_modules", conformanceModule, "dist", "index.js")
	baseline := filepath.Join(interop, conformanceBaseline)
	expected := readConformanceBaseline(t, baseline)

	h := hubtest.Start(t, nil)
	startConformanceAgent(t, h)
	h.Put("urn:uuid:0d9a6a53-5f43-4c4e-9a55-8f2f6c1b7a01", hubtest.Sample(t, "thermostat-agent.json"))
	// The door follows the directory on its own: the suite starts once
	// it lists every Thing's tools.
	hubTools := []string{"echo_agent__add", "echo_agent__echo", "living_room_thermostat_agent__setTarget"}
	waitMCPTools(t, h, hubTools)

	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The Node of Debian bookworm (18) and Node 20 need the preload: see
	// test/interop/conformance-compat/register.mjs.
	cmd := exec.CommandContext(ctx, "node", "--import", register, cli, "server", "--suite", "all",
		"--url", h.URL+"/mcp", "--expected-failures", baseline, "-o", out)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	runErr := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the suite did not finish: %v\n%s", ctx.Err(), logs.String())
	}

	results := readConformanceResults(t, out)
	if len(results) == 0 {
		t.Fatalf("the suite reported no scenario (%v):\n%s", runErr, logs.String())
	}
	unexpected, stale := compareConformance(t, results, expected)
	// The scenarios that pass saw the hub's tools and resources.
	if seen := conformanceListed(t, out, "tools-list", "tools"); !subset(hubTools, seen) {
		t.Errorf("the suite's tools/list saw %v, want the hub's tools %v among them", seen, hubTools)
	}
	hubResources := []string{"lmos://things/urn%3Atest%3Aconformance%3Aecho", "lmos://things/urn%3Auuid%3A0d9a6a53-5f43-4c4e-9a55-8f2f6c1b7a01"}
	if seen := conformanceListed(t, out, "resources-list", "resources"); !subset(hubResources, seen) {
		t.Errorf("the suite's resources/list saw %v, want the hub's TDs %v among them", seen, hubResources)
	}
	for _, name := range expected {
		if !slices.ContainsFunc(results, func(r conformanceResult) bool { return r.scenario == name }) {
			t.Errorf("the baseline lists %q, which the suite did not run", name)
		}
	}
	if len(unexpected) > 0 || len(stale) > 0 {
		t.Errorf("unexpected failures %v; baseline entries that now pass %v (remove them from %s)\n%s",
			unexpected, stale, conformanceBaseline, logs.String())
	}
	// The suite's own verdict on the baseline must agree with the table.
	if (runErr == nil) != (len(unexpected) == 0 && len(stale) == 0) {
		t.Errorf("the suite's exit (%v) disagrees with its results:\n%s", runErr, logs.String())
	}
}

// compareConformance logs each scenario's result and returns the failures
// the baseline does not list and the listed scenarios that passed.
func compareConformance(t *testing.T, results []conformanceResult, expected []string) (unexpected, stale []string) {
	t.Helper()
	for _, r := range results {
		listed := slices.Contains(expected, r.scenario)
		verdict := "pass"
		if r.failed {
			verdict = "FAIL"
		}
		note := ""
		switch {
		case r.failed && listed:
			note = " (expected: in the baseline)"
		case r.failed:
			note = " (UNEXPECTED)"
			unexpected = append(unexpected, r.scenario)
		case listed:
			note = " (STALE: passes but the baseline lists it)"
			stale = append(stale, r.scenario)
		}
		t.Logf("%-32s %s%s %s", r.scenario, verdict, note, r.summary)
	}
	return unexpected, stale
}

// startConformanceAgent connects an MQTT agent with two actions, so the
// door lists tools besides find_tools and call_tool.
func startConformanceAgent(t *testing.T, h *hubtest.Hub) {
	t.Helper()
	td := map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Agent",
		"id":                  "urn:test:conformance:echo",
		"title":               "Echo agent",
		"description":         "Repeats what it is told.",
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{
			"echo": map[string]any{"description": "Repeat a text", "input": map[string]any{"type": "string"}, "output": map[string]any{"type": "string"}},
			"add": map[string]any{"description": "Add two numbers",
				"input":  map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "number"}, "b": map[string]any{"type": "number"}}, "required": []any{"a", "b"}},
				"output": map[string]any{"type": "number"}},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + h.MQTTAddr(), TD: td, Logger: hubtest.Logger(t), OnCredentials: func(agent.Credentials) {}})
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	a.HandleAction("echo", func(_ context.Context, in agent.Input) (any, error) {
		var s string
		err := in.Decode(&s)
		return s, err
	})
	a.HandleAction("add", func(_ context.Context, in agent.Input) (any, error) {
		var v struct{ A, B float64 }
		err := in.Decode(&v)
		return v.A + v.B, err
	})
}

// waitMCPTools polls the hub's tools/list, as a Go SDK client, until it
// lists every tool of want; the deadline only fails a broken test.
func waitMCPTools(t *testing.T, h *hubtest.Hub, want []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := mcp.NewClient(&mcp.Implementation{Name: "lmos-e2e", Version: "0"}, nil)
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.URL + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	defer cs.Close()
	for {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		var got []string
		for _, tl := range res.Tools {
			got = append(got, tl.Name)
		}
		if subset(want, got) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the door never listed %v; it lists %v", want, got)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func subset(want, got []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// conformanceListed is what the suite's scenario (tools-list,
// resources-list) saw listed: the names or URIs in its check's details
// under key.
func conformanceListed(t *testing.T, dir, scenario, key string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "server-"+scenario+"-*", "checks.json"))
	if len(files) != 1 {
		t.Fatalf("want one result of %s, found %v", scenario, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var checks []struct {
		Details map[string]json.RawMessage
	}
	var listed []string
	if err := json.Unmarshal(b, &checks); err != nil || len(checks) == 0 {
		t.Fatalf("%s: %v %s", files[0], err, b)
	}
	if err := json.Unmarshal(checks[0].Details[key], &listed); err != nil {
		t.Fatalf("%s: details.%s: %v %s", files[0], key, err, b)
	}
	return listed
}

// readConformanceBaseline reads the scenario names under "server:" of the
// suite's expected-failures file: a YAML list, each "- name" right below
// the comment lines that say why it fails.
func readConformanceBaseline(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	item := regexp.MustCompile(`^\s+-\s+([a-z0-9-]+)\s*$`)
	var names []string
	why := false
	for i, line := range strings.Split(string(b), "\n") {
		m := item.FindStringSubmatch(line)
		switch {
		case m != nil && !why:
			t.Errorf("%s:%d: %s is listed without a comment above it saying why", path, i+1, m[1])
		case m == nil && strings.TrimSpace(line) != "" && !strings.HasPrefix(strings.TrimSpace(line), "#") && line != "server:":
			t.Errorf("%s:%d: not a scenario of the list: %q", path, i+1, line)
		}
		if m != nil {
			names = append(names, m[1])
		}
		why = strings.HasPrefix(strings.TrimSpace(line), "#")
	}
	return names
}

type conformanceResult struct {
	scenario string
	failed   bool
	summary  string // the failing checks and their messages, or the count of passing ones
}

// readConformanceResults reads the checks.json the suite wrote for each
// scenario (directory server-<scenario>-<timestamp>). A scenario fails on
// any FAILURE or WARNING, as the suite counts it against a baseline.
func readConformanceResults(t *testing.T, dir string) []conformanceResult {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "server-*", "checks.json"))
	if err != nil {
		t.Fatal(err)
	}
	stamp := regexp.MustCompile(`^server-(.+)-\d{4}-\d\d-\d\dT[0-9-]+Z$`)
	var out []conformanceResult
	for _, f := range files {
		m := stamp.FindStringSubmatch(filepath.Base(filepath.Dir(f)))
		if m == nil {
			t.Fatalf("unexpected result directory %s", f)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var checks []struct {
			ID, Status, ErrorMessage string
		}
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		r := conformanceResult{scenario: m[1]}
		var bad []string
		passed := 0
		for _, c := range checks {
			switch c.Status {
			case "FAILURE", "WARNING":
				bad = append(bad, fmt.Sprintf("%s %s: %s", c.Status, c.ID, c.ErrorMessage))
			case "SUCCESS":
				passed++
			}
		}
		r.failed = len(bad) > 0
		r.summary = fmt.Sprintf("(%d checks passed)", passed)
		if r.failed {
			r.summary = strings.Join(bad, "; ")
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].scenario < out[j].scenario })
	return out
}
