package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"time"
)

// testToken is the admin token test hubs are provisioned with.
const testToken = "test-admin-token-0123456789"

// testHub is a hub started in-process exactly as main starts it, on
// 127.0.0.1:0 with its data in a temp dir.
type testHub struct {
	t    *testing.T
	Main *Main
	URL  string
	Dir  string
}

// testConfig is the configuration of every test hub: loopback on free
// ports, no mDNS, no write rate limit, provisioned with testToken.
func testConfig(dir string) Config {
	cfg := DefaultConfig()
	cfg.DataDir = dir
	cfg.Hub.Name = "test-hub"
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.MQTT.Addr = "127.0.0.1:0"
	cfg.MDNS.Enabled = false
	cfg.AdminToken = testToken
	cfg.HTTP.WriteRate = 0
	return cfg
}

// startHub starts a hub; edit changes the configuration first.
func startHub(t *testing.T, edit func(*Config)) *testHub {
	t.Helper()
	return startHubIn(t, t.TempDir(), edit)
}

func startHubIn(t *testing.T, dir string, edit func(*Config)) *testHub {
	t.Helper()
	cfg := testConfig(dir)
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := NewMain(cfg, io.Discard, logger)
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("start hub: %v", err)
	}
	h := &testHub{t: t, Main: m, URL: "http://" + m.HTTPAddr.String(), Dir: dir}
	t.Cleanup(h.Close)
	return h
}

// Close stops the hub; calling it twice is fine.
func (h *testHub) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Main.Close(ctx); err != nil {
		// What still runs is what held the close up.
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		h.t.Errorf("close hub: %v\n%s", err, stacks.String())
	}
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// do sends a request; token "" sends none. It returns the response with its
// body read into the returned bytes.
func (h *testHub) do(method, path, contentType string, body []byte, token string) (*http.Response, []byte) {
	h.t.Helper()
	return h.request(method, path, contentType, "", body, token)
}

// request is do with an Accept header ("" sends none).
func (h *testHub) request(method, path, contentType, accept string, body []byte, token string) (*http.Response, []byte) {
	h.t.Helper()
	hdr := map[string]string{}
	if contentType != "" {
		hdr["Content-Type"] = contentType
	}
	if accept != "" {
		hdr["Accept"] = accept
	}
	if token != "" {
		hdr["Authorization"] = "Bearer " + token
	}
	return h.send(method, path, body, hdr)
}

// send sends method path with body (nil: none) and the headers hdr, and
// returns the response with its body read.
func (h *testHub) send(method, path string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, h.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// put registers a TD under id with the admin token and checks for success.
func (h *testHub) put(id string, td []byte) {
	h.t.Helper()
	resp, body := h.do(http.MethodPut, "/things/"+pathEscape(id), "application/td+json", td, testToken)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusNoContent {
		h.t.Fatalf("PUT %s: %d %s", id, resp.StatusCode, body)
	}
}

// getJSON GETs path, expects want and decodes the body into v.
func (h *testHub) getJSON(path string, want int, v any) *http.Response {
	h.t.Helper()
	resp, body := h.do(http.MethodGet, path, "", nil, "")
	if resp.StatusCode != want {
		h.t.Fatalf("GET %s: status %d, want %d: %s", path, resp.StatusCode, want, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			h.t.Fatalf("GET %s: decode %s: %v", path, body, err)
		}
	}
	return resp
}

// sample reads a TD from the shared test data.
func sample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sharedTestdata(t), "tds", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sharedTestdata finds ../shared/testdata from the repository, or a copy in
// testdata/ inside the repository.
func sharedTestdata(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"../../testdata", "../../../shared/testdata"} {
		if _, err := os.Stat(filepath.Join(p, "tds")); err == nil {
			return p
		}
	}
	t.Fatal("test data not found in testdata/ or ../shared/testdata")
	return ""
}

// makeTD returns a small valid TD with the given id and title.
func makeTD(id, title string) []byte {
	b, _ := json.Marshal(map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Tool",
		"id":                  id,
		"title":               title,
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{"run": map[string]any{
			"forms": []any{map[string]any{"href": "https://tools.example/run", "op": "invokeaction"}},
		}},
	})
	return b
}

func pathEscape(id string) string { return url.PathEscape(id) }

func hubOrigin() hub.Origin { return hub.Origin{Source: hub.SourceHTTP} }
