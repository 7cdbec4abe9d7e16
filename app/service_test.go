package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWatchdogPingsOnlyWhileHealthy: each tick pings the watchdog when the
// hub is healthy and skips it, with a warning, when it is not; the loop
// ends with its context.
func TestWatchdogPingsOnlyWhileHealthy(t *testing.T) {
	tick := make(chan time.Time)
	health := make(chan error)
	healthy := func() error { return <-health }
	pings := make(chan struct{}, 10)
	ping := func() error { pings <- struct{}{}; return nil }
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); watchdog(ctx, tick, healthy, ping, logger) }()

	for _, h := range []error{nil, errors.New("store: disk I/O error"), errors.New("broker: closed"), nil} {
		tick <- time.Time{}
		health <- h
	}
	// The loop is sequential: the last tick's ping means every earlier
	// tick is handled.
	<-pings
	<-pings
	cancel()
	<-done
	if n := len(pings); n != 0 {
		t.Errorf("%d pings more than the two healthy ticks", n)
	}
	logMu.Lock()
	defer logMu.Unlock()
	out := logs.String()
	if n := strings.Count(out, "not pinging the systemd watchdog"); n != 2 || !strings.Contains(out, "disk I/O error") || !strings.Contains(out, "broker: closed") {
		t.Errorf("want a warning naming the error for each unhealthy tick, got:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
