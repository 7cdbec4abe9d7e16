package mcpcli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/mcpcli"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// relay runs `lmos-hub mcp args…` against h with pipes for stdin and
// stdout; the returned transport is the client's end.
func relay(t *testing.T, h *hubtest.Hub, env map[string]string, args ...string) (*mcp.IOTransport, *syncBuffer, chan int) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := syncBuffer{}
	done := make(chan int, 1)
	go func() {
		code := mcpcli.Run(append([]string{"--hub", h.URL}, args...), inR, outW, &stderr, func(k string) string { return env[k] })
		outW.Close()
		done <- code
	}()
	t.Cleanup(func() { inW.Close() })
	return &mcp.IOTransport{Reader: outR, Writer: inW}, &stderr, done
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestRelayBothRevisions: the official Go client over `lmos-hub mcp`
// lists tools, calls one with progress, hears the list change when an
// agent joins, and reads a TD — at both revisions; when stdin ends the
// relay ends the hub's session and exits 0.
func TestRelayBothRevisions(t *testing.T) {
	h := hubtest.Start(t, nil)
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			changed := make(chan struct{}, 16)
			var progress sync.Map
			cl := mcp.NewClient(&mcp.Implementation{Name: "relay-test", Version: "0"}, &mcp.ClientOptions{
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
					select {
					case changed <- struct{}{}:
					default:
					}
				},
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					progress.Store(r.Params.Progress, r.Params.Message)
				},
			})
			tr, stderr, done := relay(t, h, map[string]string{"LMOS_HUB_TOKEN": hubtest.Token})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cs, err := cl.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("connect: %v (stderr: %s)", err, stderr)
			}
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %s", got)
			}
			// The session's notification stream opens asynchronously:
			// an agent that joins first proves the change arrives.
			id := "urn:relay:" + version
			a := streamAgent(t, h, id, "Relay counter "+version)
			defer a.Close()
			name := "relay_counter_" + strings.ReplaceAll(version, "-", "_") + "__count"
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("no tools/list_changed after %s joined (stderr: %s)", id, stderr)
			}
			list, err := cs.ListTools(ctx, nil)
			found := false
			for _, tl := range list.Tools {
				found = found || tl.Name == name
			}
			if err != nil || !found {
				t.Fatalf("tools/list: %v, %s missing", err, name)
			}
			p := &mcp.CallToolParams{Name: name, Arguments: map[string]any{"n": 3}}
			p.SetProgressToken("relay")
			res, err := cs.CallTool(ctx, p)
			if err != nil || res.IsError {
				t.Fatalf("call: %v %+v", err, res)
			}
			if b, _ := json.Marshal(res.StructuredContent); string(b) != `{"done":3}` {
				t.Errorf("structured: %s", b)
			}
			for i := 1; i <= 3; i++ {
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					if _, ok := progress.Load(float64(i)); ok || time.Now().After(deadline) {
						break
					}
				}
				if _, ok := progress.Load(float64(i)); !ok {
					t.Errorf("progress %d missing", i)
				}
			}
			r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "lmos://things/urn%3Arelay%3A" + version})
			if err != nil || !strings.Contains(r.Contents[0].Text, `"id":"`+id+`"`) {
				t.Fatalf("read TD: %v", err)
			}
			sessions := h.Main.MCP.Sessions()
			cs.Close() // closes stdin
			select {
			case code := <-done:
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
			case <-ctx.Done():
				t.Fatal("the relay did not exit after stdin ended")
			}
			if version == "2025-11-25" && h.Main.MCP.Sessions() != sessions-1 {
				t.Errorf("the relay left its session open: %d before, %d after", sessions, h.Main.MCP.Sessions())
			}
		})
	}
}

// TestRelayAnswersWhatTheHubRefuses: a refusal the hub answers with an
// HTTP error reaches the client as a JSON-RPC error for its request; a
// hub that is not there is an error for each request, not a hang; a line
// that is not JSON is a parse error.
func TestRelayAnswersWhatTheHubRefuses(t *testing.T) {
	h := hubtest.Start(t, nil)
	lines := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`,
		`not json`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
	}, "\n") + "\n"
	var out, stderr syncBuffer
	code := mcpcli.Run([]string{"--hub", h.URL, "--token", "wrong-token"}, strings.NewReader(lines), &out, &stderr, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.b.String())
	}
	got := out.b.String()
	for _, want := range []string{`"id":1`, `401 Unauthorized`, `"code":-32700`, `"id":2`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	// A batch is relayed as one: its answer, or the hub's refusal of it,
	// comes back, never the relay's "not JSON".
	out.b.Reset()
	batch := lines[:strings.Index(lines, "\n")+1] + `[{"jsonrpc":"2.0","id":5,"method":"ping"}]` + "\n"
	if code := mcpcli.Run([]string{"--hub", h.URL, "--token", hubtest.Token}, strings.NewReader(batch), &out, &stderr, nil); code != 0 ||
		strings.Contains(out.b.String(), "-32700") || !strings.Contains(out.b.String(), `"id":5`) || strings.Count(out.b.String(), "\n") != 2 {
		t.Errorf("batch: exit %d:\n%s", code, out.b.String())
	}
	// No hub: each request is answered with an error.
	out.b.Reset()
	code = mcpcli.Run([]string{"--hub", "http://127.0.0.1:1", "--timeout", "2s"}, strings.NewReader(lines), &out, &stderr, nil)
	if code != 0 || strings.Count(out.b.String(), "cannot reach the hub") != 2 {
		t.Errorf("no hub: exit %d:\n%s", code, out.b.String())
	}
	// Usage errors.
	if code := mcpcli.Run([]string{"extra"}, strings.NewReader(""), &out, &stderr, nil); code != 2 {
		t.Errorf("an argument: exit %d", code)
	}
	_ = http.StatusOK
}

// streamAgent connects an agent over MQTT whose action "count" streams
// one partial result per step to n.
func streamAgent(t *testing.T, h *hubtest.Hub, id, title string) *agent.Agent {
	t.Helper()
	td := map[string]any{
		"@context":            "https://www.w3.org/2022/wot/td/v1.1",
		"id":                  id,
		"title":               title,
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{"count": map[string]any{
			"input":  map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}},
			"output": map[string]any{"type": "object", "properties": map[string]any{"done": map[string]any{"type": "integer"}}},
		}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + h.MQTTAddr(), TD: td, Logger: hubtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
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
	return a
}

// TestRelayOpensASessionTheHubForgot: when the hub forgets the session
// (here it sits idle past mcp.sessionTimeout; a restart does the same),
// the relay opens a new one with the client's own initialize, unseen by
// the client, and the client's calls and notifications go on.
func TestRelayOpensASessionTheHubForgot(t *testing.T) {
	h := hubtest.Start(t, func(c *app.Config) { c.MCP.SessionTimeout = app.Duration(time.Second) })
	changed := make(chan struct{}, 16)
	cl := mcp.NewClient(&mcp.Implementation{Name: "relay-test", Version: "0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	tr, stderr, _ := relay(t, h, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// Idle: the hub closes the session, the relay opens another.
	for !strings.Contains(stderr.String(), "a new one is open") {
		select {
		case <-ctx.Done():
			t.Fatalf("the relay never opened a new session: %s", stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	a := streamAgent(t, h, "urn:relay:later", "Later")
	defer a.Close()
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatalf("no tools/list_changed in the new session: %s", stderr.String())
	}
	p := &mcp.CallToolParams{Name: "later__count", Arguments: map[string]any{"n": 1}}
	if res, err := cs.CallTool(ctx, p); err != nil || res.IsError {
		t.Fatalf("a call in the new session: %v %+v", err, res)
	}
}
