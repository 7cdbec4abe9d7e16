package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	sse "github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// startHubHeartbeat starts a hub as startHub does, with SSE keep-alives
// every d, so a test sees many of them without waiting.
func startHubHeartbeat(t *testing.T, d time.Duration) *testHub {
	t.Helper()
	m := hubtest.NewMain(t, t.TempDir(), nil)
	m.SSEHeartbeat = d
	return runHub(t, m)
}

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

// r3labsStream is one github.com/r3labs/sse/v2 subscription. That client
// hands the application every block that is not empty, so any block
// without an event and its data shows up here as a bad event.
type r3labsStream struct {
	t      *testing.T
	reads  chan int
	events chan *sse.Event
	done   chan error
}

func openR3labs(t *testing.T, url string) *r3labsStream {
	t.Helper()
	s := &r3labsStream{t: t, reads: make(chan int, 1), events: make(chan *sse.Event, 16), done: make(chan error, 1)}
	c := sse.NewClient(url)
	c.Connection = &http.Client{Transport: countingTransport{s.reads}}
	c.ReconnectStrategy = &backoff.StopBackOff{} // a dropped stream is a failure, not a retry
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		s.done <- c.SubscribeRawWithContext(ctx, func(e *sse.Event) { s.events <- e })
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

// keepAlives waits until n reads reached the client while no event came.
func (s *r3labsStream) keepAlives(n int) {
	s.t.Helper()
	deadline := time.After(5 * time.Second)
	for i := 0; i < n; {
		select {
		case <-s.reads:
			i++
		case e := <-s.events:
			s.t.Fatalf("r3labs delivered an event nobody sent: type %q id %q data %q retry %q", e.Event, e.ID, e.Data, e.Retry)
		case err := <-s.done:
			s.t.Fatalf("r3labs stopped: %v", err)
		case <-deadline:
			s.t.Fatalf("saw %d of %d keep-alives", i, n)
		}
	}
}

// next waits for one event, which must have the type wantType and data.
func (s *r3labsStream) next(wantType string) *sse.Event {
	s.t.Helper()
	select {
	case e := <-s.events:
		if len(e.Event) == 0 || len(e.Data) == 0 {
			s.t.Fatalf("r3labs delivered an event without type or data: type %q id %q data %q retry %q", e.Event, e.ID, e.Data, e.Retry)
		}
		if string(e.Event) != wantType {
			s.t.Fatalf("event %q, want %q (data %s)", e.Event, wantType, e.Data)
		}
		return e
	case err := <-s.done:
		s.t.Fatalf("r3labs stopped: %v", err)
	case <-time.After(5 * time.Second):
		s.t.Fatalf("no %s event", wantType)
	}
	return nil
}

// TestSSEr3labsGetsOnlyEvents reads the change feed (W3C WoT Discovery
// tdd-notification-sse) with github.com/r3labs/sse/v2, a client nobody in
// this project wrote, and fails on any event without a type or data: the
// lone `retry:` block the feed used to open with, and comment-only
// keep-alives (which r3labs fills in with the last event id). Keep-alives
// pass between the events, and every event owed is counted.
func TestSSEr3labsGetsOnlyEvents(t *testing.T) {
	h := startHubHeartbeat(t, 10*time.Millisecond)
	s := openR3labs(t, h.URL+"/events")
	// The stream is up once its first bytes (headers and keep-alives) came.
	s.keepAlives(3)
	h.put("urn:ex:sse1", makeTD("urn:ex:sse1", "one"))
	created := s.next("thing_created")
	if string(created.Retry) != "2000" || len(created.ID) == 0 {
		t.Errorf("first event: retry %q id %q, want retry 2000 and an id", created.Retry, created.ID)
	}
	s.keepAlives(4)
	h.put("urn:ex:sse1", makeTD("urn:ex:sse1", "two"))
	if e := s.next("thing_updated"); len(e.Retry) != 0 {
		t.Errorf("retry %q sent again", e.Retry)
	}
	s.keepAlives(4)
	if resp, body := h.do(http.MethodDelete, "/things/urn:ex:sse1", "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	s.next("thing_deleted")
	s.keepAlives(4)
}

// TestSSEr3labsProxyEvent: the proxy's subscribeevent stream (startSSE in
// web/proxy.go) follows the same rule as the change feed.
func TestSSEr3labsProxyEvent(t *testing.T) {
	h := startHubHeartbeat(t, 10*time.Millisecond)
	a := h.startAgent(agentID)
	eventTopic := "lmos/v1/things/" + a.tid + "/events/alarm"
	s := openR3labs(t, h.URL+"/proxy/"+pathEscape(agentID)+"/events/alarm")
	waitFor(t, 2*time.Second, "stream subscribed", func() bool { return h.Main.Broker.Subscribers(eventTopic) == 1 })
	s.keepAlives(3)
	a.mc.pub(eventTopic, []byte(`{"level": 1}`), false)
	if e := s.next("alarm"); string(e.Data) != `{"level":1}` || string(e.Retry) != "2000" {
		t.Errorf("first event: data %s retry %q", e.Data, e.Retry)
	}
	s.keepAlives(4)
	a.mc.pub(eventTopic, []byte(`{"level": 2}`), false)
	if e := s.next("alarm"); string(e.Data) != `{"level":2}` {
		t.Errorf("second event: data %s", e.Data)
	}
	s.keepAlives(4)
}
