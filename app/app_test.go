package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// The components start in the order main has always started them (the
// broker before HTTP serves, so /healthz and the WebSocket gateway find it)
// and stop in reverse: HTTP first, the peers' mirrors before the registry
// they write to, the store last.
func TestMainStartsAndStopsInOrder(t *testing.T) {
	var logs hubtest.SyncBuffer
	cfg := hubtest.Config(t.TempDir())
	m := app.NewMain(cfg, nil, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err := m.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	re := regexp.MustCompile(`msg="(mqtt listening|http listening|hub ready)"|msg=stopped component=(\w+)`)
	for _, line := range strings.Split(logs.String(), "\n") {
		if g := re.FindStringSubmatch(line); g != nil {
			got = append(got, g[1]+g[2])
		}
	}
	want := []string{"mqtt listening", "http listening", "hub ready", "http", "mcp", "mqtt", "federation", "registry", "store"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("order:\n got %q\nwant %q\n%s", got, want, logs.String())
	}
}

// A start that fails half way closes what it opened: the HTTP listener
// bound before the broker, and the store (its lock), so the port and the
// data directory are free again.
func TestMainFailedStartReleasesWhatItOpened(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := free.Addr().String()
	free.Close()

	dir := t.TempDir()
	cfg := hubtest.Config(dir)
	cfg.HTTP.Addr, cfg.MQTT.Addr = httpAddr, taken.Addr().String()
	m := app.NewMain(cfg, nil, hubtest.Logger(t))
	if err := m.Run(t.Context()); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Run with the MQTT port taken: %v, want EADDRINUSE", err)
	}
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		t.Fatalf("the HTTP listener is still open: %v", err)
	}
	ln.Close()
	hubtest.StartIn(t, dir, nil) // the store's lock is free
}

// The hub's own log reaches GET /api/log: main wires every component's
// logger through the tail, so an admin reads "hub ready" and the other
// start-up records there, with their attributes.
func TestLogTailWired(t *testing.T) {
	h := hubtest.Start(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.URL+"/api/log", nil)
	req.Header.Set("Authorization", "Bearer "+hubtest.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/log: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	ready, listening := false, false
	for sc.Scan() && !(ready && listening) {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var rec struct {
			Msg   string
			Attrs map[string]string
		}
		if err := json.Unmarshal([]byte(data), &rec); err != nil {
			t.Fatalf("log record %s: %v", data, err)
		}
		ready = ready || rec.Msg == "hub ready" && rec.Attrs["did"] == h.Main.DID()
		listening = listening || rec.Msg == "http listening" && rec.Attrs["addr"] == h.Main.HTTPAddr.String()
	}
	if !ready || !listening {
		t.Fatalf("the log tail lacks the start-up records (hub ready %v, http listening %v): %v", ready, listening, sc.Err())
	}
}
