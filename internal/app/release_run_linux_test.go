package app_test

import (
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/app"
	"github.com/eclipse-lmos/lmos-hub/internal/hubtest"
	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
)

// Run releases the executable's start-up pages releaseAfter after
// everything is open, not before, and the hub serves on.
func TestRunReleasesExecutablePages(t *testing.T) {
	var logs hubtest.SyncBuffer
	m := hubtest.NewMain(t, t.TempDir(), nil)
	m.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	app.SetReleaseAfter(t, 100*time.Millisecond)
	h := hubtest.Run(t, m)
	released := regexp.MustCompile(`msg="released the executable's start-up pages" bytes=(\d+)`)
	if g := released.FindStringSubmatch(logs.String()); g != nil {
		t.Fatalf("released before the delay: %s", g[0])
	}
	var g []string
	testwait.Eventually(t, 5*time.Second, "release logged", func() bool {
		g = released.FindStringSubmatch(logs.String())
		return g != nil
	})
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
