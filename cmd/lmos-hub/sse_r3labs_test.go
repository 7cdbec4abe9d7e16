package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	sse "github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"
)

// countingBody reports every read that returned bytes, so the test can wait
// for keep-alives on the wire instead of sleeping.
type countingBody struct {
	io.ReadCloser
	reads chan<- int
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		select {
		case b.reads <- n:
		default:
		}
	}
	return n, err
}

type countingTransport struct{ reads chan<- int }

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = countingBody{resp.Body, t.reads}
	}
	return resp, err
}

// TestSSEr3labsGetsOnlyEvents reads the change feed (W3C WoT Discovery
// tdd-notification-sse) with github.com/r3labs/sse/v2, a client nobody in
// this project wrote. It hands the application every block that is not
// empty; the test fails on any event without a type or data: the lone
// `retry:` block the feed used to open with, and comment-only keep-alives
// (which r3labs fills in with the last event id). Keep-alives are made to
// pass between the events, and every event owed is counted.
func TestSSEr3labsGetsOnlyEvents(t *testing.T) {
	cfg := testConfig(t.TempDir())
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := NewMain(cfg, io.Discard, slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
	m.sseHeartbeat = 10 * time.Millisecond
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("start hub: %v", err)
	}
	h := &testHub{t: t, Main: m, URL: "http://" + m.HTTPAddr.String(), Dir: cfg.DataDir}
	t.Cleanup(h.Close)

	reads := make(chan int, 1)
	c := sse.NewClient(h.URL + "/events")
	c.Connection = &http.Client{Transport: countingTransport{reads}}
	c.ReconnectStrategy = &backoff.StopBackOff{} // a dropped stream is a failure, not a retry
	events := make(chan *sse.Event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.SubscribeRawWithContext(ctx, func(e *sse.Event) { events <- e })
	}()
	t.Cleanup(func() { cancel(); <-done })

	// awaitKeepAlives waits until n reads reached the client with no event.
	awaitKeepAlives := func(n int) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for i := 0; i < n; {
			select {
			case <-reads:
				i++
			case e := <-events:
				t.Fatalf("r3labs delivered an event nobody sent: type %q id %q data %q retry %q", e.Event, e.ID, e.Data, e.Retry)
			case err := <-done:
				t.Fatalf("r3labs stopped: %v", err)
			case <-deadline:
				t.Fatalf("saw %d of %d keep-alives", i, n)
			}
		}
	}
	next := func(wantType string) *sse.Event {
		t.Helper()
		select {
		case e := <-events:
			if len(e.Event) == 0 || len(e.Data) == 0 || len(e.ID) == 0 {
				t.Fatalf("r3labs delivered an event without type, id or data: type %q id %q data %q retry %q", e.Event, e.ID, e.Data, e.Retry)
			}
			if string(e.Event) != wantType {
				t.Fatalf("event %q, want %q (data %s)", e.Event, wantType, e.Data)
			}
			return e
		case err := <-done:
			t.Fatalf("r3labs stopped: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", wantType)
		}
		return nil
	}

	// The stream is up once its first bytes (headers and keep-alives) came.
	awaitKeepAlives(3)
	h.put("urn:ex:sse1", makeTD("urn:ex:sse1", "one"))
	created := next("thing_created")
	if string(created.Retry) != "2000" {
		t.Errorf("first event carries retry %q, want 2000", created.Retry)
	}
	awaitKeepAlives(4)
	h.put("urn:ex:sse1", makeTD("urn:ex:sse1", "two"))
	next("thing_updated")
	awaitKeepAlives(4)
	if resp, body := h.do(http.MethodDelete, "/things/urn:ex:sse1", "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	next("thing_deleted")
	awaitKeepAlives(4)
}
