package app_test

import (
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/internal/hubtest"
)

// Run releases the executable's start-up pages once everything is open,
// and the hub serves on.
func TestRunReleasesExecutablePages(t *testing.T) {
	var logs hubtest.SyncBuffer
	m := hubtest.NewMain(t, t.TempDir(), nil)
	m.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := hubtest.Run(t, m)
	g := regexp.MustCompile(`msg="released the executable's start-up pages" bytes=(\d+)`).FindStringSubmatch(logs.String())
	if g == nil {
		t.Fatalf("no release logged:\n%s", logs.String())
	}
	if n, _ := strconv.ParseInt(g[1], 10, 64); n <= 0 {
		t.Fatalf("released %d bytes, want > 0", n)
	}
	for _, path := range []string{"/healthz", "/things"} {
		resp, err := http.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, body)
		}
	}
}
