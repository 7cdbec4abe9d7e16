package netnstest

import (
	"bufio"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// Child is the test binary re-executed in a node by LAN.Helper: the test
// function named there reads its Mode and acts as a hub, an agent, a
// browser… until the parent stops it.
type Child struct {
	// Mode is the value of the environment variable the parent set: what
	// the child is to do.
	Mode string
	// Log writes text to stderr, which the parent's Proc copies into its
	// test log.
	Log  *slog.Logger
	sigs chan os.Signal
}

// StartChild returns the child the parent started with env set, and skips
// the test when env is unset (the function is a test by name only). It
// catches SIGTERM at once, so a Stop that comes as soon as the child has
// said it is ready still ends it cleanly (an mDNS goodbye, say).
func StartChild(t *testing.T, env string) *Child {
	mode := os.Getenv(env)
	if mode == "" {
		t.Skip("child process of the namespace tests")
	}
	// LMOS_TEST_LOG_LEVEL=debug, as for an in-process hub (hubtest.Logger),
	// logs the child's debug lines to chase a failure (a hub child takes
	// LMOS_HUB_LOG_LEVEL from the same environment). Never less than
	// info: the parents wait for info lines.
	level := slog.LevelInfo
	if v := os.Getenv("LMOS_TEST_LOG_LEVEL"); v != "" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(v)); err != nil {
			t.Fatalf("LMOS_TEST_LOG_LEVEL: %v", err)
		}
		level = min(level, l)
	}
	c := &Child{Mode: mode, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		sigs: make(chan os.Signal, 1)}
	signal.Notify(c.sigs, syscall.SIGTERM)
	return c
}

// Serve passes each line the parent sends (Proc.Send) to onLine (nil:
// lines are ignored) until SIGTERM; then it runs stop and exits 0.
func (c *Child) Serve(onLine func(line string), stop func()) {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case <-c.sigs:
			stop()
			os.Exit(0)
		case l := <-lines:
			if onLine != nil {
				onLine(l)
			}
		}
	}
}
