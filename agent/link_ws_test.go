package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A hub records a re-registered agent online, and routes consumers' requests
// to it, before it queues the acknowledgement: after a hub restart a
// consumer's invokeAction can reach the agent's socket first (the flake of
// TestBrokerRestart over WebSocket). A scripted hub forces that order on the
// agent's reconnect; the agent must serve the request, not drop it while it
// waits for the acknowledgement.
func TestWSRequestBeforeRegistrationAnswer(t *testing.T) {
	answers := make(chan map[string]any, 1)
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"lmosprotocol"}})
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer c.CloseNow()
		n := conns.Add(1)
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		reg := readFrame(ctx, t, c)
		if reg["messageType"] != "registerThing" {
			t.Errorf("first frame: %v", reg)
			return
		}
		ack := map[string]any{"messageType": "acknowledgement", "message": "registered", "correlationId": reg["messageId"], "messageId": "ack"}
		switch n {
		case 1:
			writeFrame(ctx, t, c, ack)
			c.Close(websocket.StatusGoingAway, "the hub is stopping") // the agent reconnects
			return
		case 2:
		default: // after the test: until the agent closes
			writeFrame(ctx, t, c, ack)
			_, _, _ = c.Read(ctx)
			return
		}
		writeFrame(ctx, t, c, map[string]any{"messageType": "invokeAction", "messageId": "req-1", "thingId": reg["thingId"],
			"action": "add", "input": map[string]any{"A": 1, "B": 1}})
		writeFrame(ctx, t, c, ack)
		for {
			f := readFrame(ctx, t, c)
			if f == nil {
				return
			}
			if f["correlationId"] == "req-1" && f["messageType"] == "actionStatus" && f["status"] != StatusRunning {
				answers <- f // once: the next connection is the default case
				return
			}
		}
	}))
	defer srv.Close()
	a, err := Connect(context.Background(), Options{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws", TD: testTD("urn:test:early"),
		Logger: testLogger(t), Timeout: 5 * time.Second, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	serveTestActions(a)
	select {
	case f := <-answers:
		out, _ := json.Marshal(f["output"])
		if f["status"] != StatusCompleted || !strings.Contains(string(out), `"sum":2`) {
			t.Fatalf("answer: %v", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request sent before the registration's answer was not answered")
	}
}

func readFrame(ctx context.Context, t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Errorf("read: %v", err)
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Errorf("frame %s: %v", data, err)
	}
	return m
}

func writeFrame(ctx context.Context, t *testing.T, c *websocket.Conn, m map[string]any) {
	t.Helper()
	b, _ := json.Marshal(m)
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Errorf("write: %v", err)
	}
}

// The frames kept before the registration's answer are bounded: a hub that
// sends more than maxEarlyFrames first is left (1008), not buffered.
func TestWSTooManyFramesBeforeRegistrationAnswer(t *testing.T) {
	closed := make(chan websocket.StatusCode, 1)
	var served atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"lmosprotocol"}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		if served.Swap(true) {
			// A retry: only the first connection is checked. srv.Close
			// does not wait for a hijacked connection, so a retry served
			// here could report to t after the test ended.
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		reg := readFrame(ctx, t, c)
		for i := range maxEarlyFrames + 1 {
			writeFrame(ctx, t, c, map[string]any{"messageType": "readProperty", "messageId": fmt.Sprint("req-", i), "thingId": reg["thingId"], "name": "level"})
		}
		_, _, err = c.Read(ctx)
		select {
		case closed <- websocket.CloseStatus(err):
		default:
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := Connect(ctx, Options{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws", TD: testTD("urn:test:flood"),
		Logger: testLogger(t), Timeout: 5 * time.Second, MaxBackoff: 100 * time.Millisecond})
	// The agent retries a hub that floods it until ctx ends, so the error
	// Connect returns is that of whichever attempt ctx ended: only the
	// first connection's close code is certain.
	if err == nil {
		t.Fatal("connected to a hub that floods before answering")
	}
	if code := <-closed; code != websocket.StatusPolicyViolation {
		t.Fatalf("close status %v", code)
	}
}
