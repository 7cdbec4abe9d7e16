package mcpcli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRelayAnswersACutStream: when the hub's event stream of a call ends
// before its answer (the hub restarted, a proxy cut it, the server closed
// it), the relay answers the call with a JSON-RPC error at once instead of
// leaving the stdio client waiting for an answer that cannot come.
func TestRelayAnswersACutStream(t *testing.T) {
	h := hubtest.Start(t, nil)
	release := make(chan struct{})
	defer close(release)
	a := streamAgent(t, h, "urn:relay:cut", "Cut counter")
	defer a.Close()
	a.HandleActionStream("count", func(ctx context.Context, _ agent.Input, emit func(any) error) (any, error) {
		if err := emit(map[string]any{"step": 1}); err != nil {
			return nil, err
		}
		select { // the answer comes only after the stream was cut
		case <-release:
		case <-ctx.Done():
		}
		return map[string]any{"done": 1}, nil
	})
	proxy := cutAfterProgress(t, h.URL)
	for _, version := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			progressed := make(chan struct{}, 4)
			cl := mcp.NewClient(&mcp.Implementation{Name: "relay-test", Version: "0"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
					progressed <- struct{}{}
				},
			})
			tr, stderr, _ := relay(t, h, map[string]string{"LMOS_HUB_TOKEN": hubtest.Token}, "--hub", proxy)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cs, err := cl.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("connect: %v (stderr: %s)", err, stderr)
			}
			defer cs.Close()
			for {
				list, err := cs.ListTools(ctx, nil)
				if err != nil {
					t.Fatalf("tools/list: %v", err)
				}
				if strings.Contains(mustJSON(t, list), `"cut_counter__count"`) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			p := &mcp.CallToolParams{Name: "cut_counter__count", Arguments: map[string]any{"n": 1}}
			p.SetProgressToken("cut")
			res, err := cs.CallTool(ctx, p)
			if ctx.Err() != nil {
				t.Fatalf("the call was never answered after its stream was cut (stderr: %s)", stderr)
			}
			if err == nil || !strings.Contains(err.Error(), "ended before the answer") {
				t.Fatalf("call: %v %+v, want an error saying the hub's stream ended before the answer", err, res)
			}
			// The client handles notifications apart from answers.
			select {
			case <-progressed:
			case <-time.After(30 * time.Second):
				t.Error("the progress before the cut did not arrive")
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// cutAfterProgress is a proxy to the hub that ends the event stream of
// every POST right after its first progress notification.
func cutAfterProgress(t *testing.T, hubURL string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, hubURL+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(w)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = io.WriteString(w, line+"\n")
			_ = rc.Flush()
			if r.Method == http.MethodPost && line == "" && progressSeen(r) {
				return // cut: the stream ends without the answer
			}
			if strings.Contains(line, "notifications/progress") {
				r.Header.Set("X-Progress-Seen", "1")
			}
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

func progressSeen(r *http.Request) bool { return r.Header.Get("X-Progress-Seen") != "" }
