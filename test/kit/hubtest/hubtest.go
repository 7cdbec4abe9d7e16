// Package hubtest runs the hub for tests exactly as main runs it
// (app's Main on a temp data dir, 127.0.0.1:0 listeners, mDNS off
// unless asked), with the HTTP helpers every package's tests need. The MQTT
// test client is in test/kit/hubtest/mqttclient, apart, so the mqtt
// adapter's own tests can use it without importing the app that imports
// them.
package hubtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// Token is the admin token test hubs are provisioned with.
const Token = "test-admin-token-0123456789"

// Hub is a hub started in-process exactly as main starts it.
type Hub struct {
	tb   testing.TB
	Main *app.Main
	// URL is the HTTP base URL, http://127.0.0.1:port (with tls.only,
	// HTTPSURL).
	URL string
	// HTTPSURL is the HTTPS base URL when TLS is on.
	HTTPSURL string
	// Dir is the data directory.
	Dir string
}

// Config is the configuration of every test hub on the data directory dir:
// loopback on free ports, no mDNS, no write rate limit, provisioned with
// Token.
func Config(dir string) app.Config {
	cfg := app.DefaultConfig()
	cfg.DataDir = dir
	cfg.Hub.Name = "test-hub"
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.MQTT.Addr = "127.0.0.1:0"
	cfg.TLS.HTTPSAddr = "127.0.0.1:0"
	cfg.TLS.MQTTSAddr = "127.0.0.1:0"
	cfg.MDNS.Enabled = false
	cfg.AdminToken = Token
	cfg.HTTP.WriteRate = 0
	return cfg
}

// Start starts a hub on a temp data directory; edit (nil: none) changes the
// configuration first. The hub stops when the test ends.
func Start(tb testing.TB, edit func(*app.Config)) *Hub {
	tb.Helper()
	return StartIn(tb, tb.TempDir(), edit)
}

// StartIn is Start on the data directory dir (a restart keeps its data).
func StartIn(tb testing.TB, dir string, edit func(*app.Config)) *Hub {
	tb.Helper()
	return Run(tb, NewMain(tb, dir, edit))
}

// NewMain returns the Main Start would run, for a test that changes it
// first (its Stdout, its test overrides such as SSEHeartbeat); Run runs it.
func NewMain(tb testing.TB, dir string, edit func(*app.Config)) *app.Main {
	tb.Helper()
	cfg := Config(dir)
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		tb.Fatalf("test config: %v", err)
	}
	return app.NewMain(cfg, io.Discard, Logger(tb))
}

// Run runs m as main does and stops it when the test ends.
func Run(tb testing.TB, m *app.Main) *Hub {
	tb.Helper()
	if err := m.Run(context.Background()); err != nil {
		tb.Fatalf("start hub: %v", err)
	}
	h := &Hub{tb: tb, Main: m, Dir: m.Config.DataDir}
	if m.HTTPSAddr != nil {
		h.HTTPSURL = "https://" + m.HTTPSAddr.String()
		h.URL = h.HTTPSURL // tls.only: no plain URL
	}
	if m.HTTPAddr != nil {
		h.URL = "http://" + m.HTTPAddr.String()
	}
	tb.Cleanup(h.Close)
	return h
}

// Logger logs warnings and errors to the test's log; LMOS_TEST_LOG_LEVEL
// (debug, info) logs more, to chase a failure.
func Logger(tb testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if v := os.Getenv("LMOS_TEST_LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			tb.Fatalf("LMOS_TEST_LOG_LEVEL: %v", err)
		}
	}
	return slog.New(slog.NewTextHandler(logWriter{tb}, &slog.HandlerOptions{Level: level}))
}

type logWriter struct{ tb testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// Close stops the hub within 5 s; calling it twice is fine.
func (h *Hub) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Main.Close(ctx); err != nil {
		// What still runs is what held the close up.
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		h.tb.Errorf("close hub: %v\n%s", err, stacks.String())
	}
}

// MQTTAddr is the address the broker listens on.
func (h *Hub) MQTTAddr() string { return h.Main.MQTTAddr.String() }

// MQTT connects a paho MQTT 5 client to the hub's broker (cp nil: an
// anonymous clean start) and fails the test if it cannot.
func (h *Hub) MQTT(cp *paho.Connect) *mqttclient.Client {
	h.tb.Helper()
	return mqttclient.MustDial(h.tb, h.MQTTAddr(), cp)
}

// Do sends a request; token "" sends none. It returns the response with
// its body read into the returned bytes.
func (h *Hub) Do(method, path, contentType string, body []byte, token string) (*http.Response, []byte) {
	h.tb.Helper()
	return h.Request(method, path, contentType, "", body, token)
}

// Request is Do with an Accept header ("" sends none).
func (h *Hub) Request(method, path, contentType, accept string, body []byte, token string) (*http.Response, []byte) {
	h.tb.Helper()
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
	return h.Send(method, path, body, hdr)
}

// Send sends method path with body (nil: none) and the headers hdr, and
// returns the response with its body read.
func (h *Hub) Send(method, path string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	h.tb.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, h.URL+path, rd)
	if err != nil {
		h.tb.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.tb.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// Put registers a TD under id with the admin token and checks for success.
func (h *Hub) Put(id string, td []byte) {
	h.tb.Helper()
	resp, body := h.Do(http.MethodPut, lmos.ThingPath(id), "application/td+json", td, Token)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusNoContent {
		h.tb.Fatalf("PUT %s: %d %s", id, resp.StatusCode, body)
	}
}

// GetJSON GETs path, expects the status want and decodes the body into v
// (nil: not decoded).
func (h *Hub) GetJSON(path string, want int, v any) *http.Response {
	h.tb.Helper()
	resp, body := h.Do(http.MethodGet, path, "", nil, "")
	if resp.StatusCode != want {
		h.tb.Fatalf("GET %s: status %d, want %d: %s", path, resp.StatusCode, want, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			h.tb.Fatalf("GET %s: decode %s: %v", path, body, err)
		}
	}
	return resp
}

// Presence reads lmos:presence (status, via) from GET /things/{id}.
func (h *Hub) Presence(id string) (status, via string) {
	h.tb.Helper()
	var td struct {
		Presence struct {
			Status string `json:"status"`
			Via    string `json:"via"`
		} `json:"lmos:presence"`
	}
	h.GetJSON(lmos.ThingPath(id), http.StatusOK, &td)
	return td.Presence.Status, td.Presence.Via
}

// SyncBuffer is a bytes.Buffer safe for one writer goroutine and
// concurrent readers (the log of a hub running in another goroutine or
// process).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// BareTD returns the smallest valid TD with the given id and title: no
// affordances, nosec.
func BareTD(id, title string) []byte {
	return fmt.Appendf(nil, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":%q,`+
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`, id, title)
}

// InteropScript returns the absolute path of test/interop/script, whose npm
// package module must be installed: `make test` installs it; elsewhere the
// test skips unless LMOS_INTEROP=1 demands it. The repository is found by
// walking up from the test's directory to go.mod, so it holds for a test in
// any package (and under -trimpath).
func InteropScript(tb testing.TB, script, module string) string {
	tb.Helper()
	dir := filepath.Join(repoRoot(tb), "test", "interop")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", module)); err != nil {
		if os.Getenv("LMOS_INTEROP") == "1" {
			tb.Fatalf("npm %s not installed (run scripts/test-deps.sh): %v", module, err)
		}
		tb.Skipf("npm %s not installed; `make test` installs it", module)
	}
	return filepath.Join(dir, script)
}

// repoRoot is the nearest directory above the working directory (a test's
// package directory) that holds go.mod.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			tb.Fatal("go.mod not found above the test's directory")
		}
		dir = up
	}
}

// Sample reads a TD from the shared test data.
func Sample(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(SharedTestdata(tb), "tds", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// SharedTestdata finds the shared test data: testdata/ inside the
// repository, or ../shared/testdata beside it.
func SharedTestdata(tb testing.TB) string {
	tb.Helper()
	root := repoRoot(tb)
	for _, p := range []string{filepath.Join(root, "testdata"), filepath.Join(root, "..", "shared", "testdata")} {
		if _, err := os.Stat(filepath.Join(p, "tds")); err == nil {
			return p
		}
	}
	tb.Fatal("test data not found in testdata/ or ../shared/testdata")
	return ""
}
