package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// metric reads one counter or gauge from /metrics.
func (h *testHub) metric(name string) float64 {
	h.t.Helper()
	_, body := h.request("GET", "/metrics", "", "", nil, "")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		h.t.Fatalf("no metric %s", name)
	}
	f, _ := strconv.ParseFloat(string(m[1]), 64)
	return f
}

// A consumer that stops reading loses events (counted) and slows nobody:
// the agent keeps emitting and another consumer gets its events.
func TestWSSlowConsumer(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.WebSocket.SendQueue = 8 })
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000e001", false)
	subscribe := func(w *wsClient) {
		if r := w.reply(w.send(map[string]any{"messageType": "subscribeEvent", "thingId": a.id, "event": "alarm"}, false)); r["messageType"] != "acknowledgement" {
			t.Fatal(r)
		}
	}
	// The slow one: a raw connection nobody reads after the acknowledgement.
	slowConn, err := h.wsDialErr("/ws", "lmosprotocol", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slowConn.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := slowConn.Write(ctx, websocket.MessageText, []byte(`{"messageType":"subscribeEvent","messageId":"s","thingId":"`+a.id+`","event":"alarm"}`)); err != nil {
		t.Fatal(err)
	}
	if _, ack, err := slowConn.Read(ctx); err != nil || !strings.Contains(string(ack), "acknowledgement") {
		t.Fatalf("slow subscribe: %s %v", ack, err)
	}
	fast := h.wsDial("lmosprotocol", nil)
	subscribe(fast)

	const n = 200
	pad := strings.Repeat("x", 64<<10)
	start := time.Now()
	got := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for got < n {
			m := fast.next(func(m map[string]any) bool { return m["messageType"] == "event" })
			got++
			if d, _ := m["data"].(map[string]any); d["last"] == true {
				return
			}
		}
	}()
	for i := 0; i < n-1; i++ {
		a.emit("alarm", map[string]any{"i": i, "pad": pad})
		time.Sleep(200 * time.Microsecond)
	}
	// The last event is sent until it arrives: on a loaded machine even
	// the reading consumer's queue of 8 may be full when it is sent once.
	deadline := time.After(10 * time.Second)
	for sent := false; !sent; {
		a.emit("alarm", map[string]any{"last": true})
		select {
		case <-done:
			sent = true
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("the reading consumer got %d events, not the last one", got)
		}
	}
	t.Logf("%d events of 64 KiB to a reading and a stalled consumer in %v; the reading one got %d", n, time.Since(start), got)
	if got < n/2 {
		t.Errorf("the reading consumer got only %d of %d events", got, n)
	}
	if d := h.metric("lmos_ws_dropped_total"); d == 0 {
		t.Error("no events dropped for the stalled consumer")
	}
	if c := h.metric("lmos_ws_slow_closed_total"); c != 0 {
		t.Errorf("%v connections closed; dropping events must not close them", c)
	}
}

// Messages beyond the per-connection rate are refused with 429.
func TestWSMessageRateLimit(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.WebSocket.MessageRate = 1; c.HTTP.WebSocket.MessageBurst = 3 })
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000e101", false)
	w := h.wsDial("lmosprotocol", nil)
	var ids []string // five requests at once
	for i := 0; i < 5; i++ {
		ids = append(ids, w.send(map[string]any{"messageType": "readProperty", "thingId": a.id, "name": "temp"}, false))
	}
	limited := 0
	for range ids { // replies come in any order: interactions run concurrently
		r := w.next(nil)
		if r["messageType"] == "error" {
			expectWSError(t, r, 429, "rate-limited", "too many messages")
			limited++
		}
	}
	if limited != 2 {
		t.Errorf("%d of 5 messages limited, want 2", limited)
	}
	if n := len(a.requests("readProperty")); n != 3 {
		t.Errorf("agent got %d reads, want 3", n)
	}
}

// An idle connection (nothing received, nothing open) is closed; one that
// holds a subscription is kept; one that does not answer pings is closed.
func TestWSIdleAndPing(t *testing.T) {
	h := startHub(t, func(c *Config) {
		c.HTTP.WebSocket.PingInterval = Duration(20 * time.Millisecond)
		c.HTTP.WebSocket.IdleTimeout = Duration(60 * time.Millisecond)
	})
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000e201", false)
	idle := h.wsDial("lmosprotocol", nil)
	busy := h.wsDial("lmosprotocol", nil)
	if r := busy.reply(busy.send(map[string]any{"messageType": "subscribeEvent", "thingId": a.id, "event": "alarm"}, false)); r["messageType"] != "acknowledgement" {
		t.Fatal(r)
	}
	if got := idle.closeStatus(); got != websocket.StatusGoingAway {
		t.Errorf("idle close %v, want 1001", got)
	}
	time.Sleep(150 * time.Millisecond)
	a.emit("alarm", 1)
	if ev := busy.next(func(m map[string]any) bool { return m["messageType"] == "event" }); ev["data"] != 1.0 {
		t.Errorf("busy connection: %v", ev)
	}
	// A raw client that never reads never answers pings.
	deaf, err := h.wsDialErr("/ws", "lmosprotocol", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer deaf.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = deaf.Write(ctx, websocket.MessageText, []byte(`{"messageType":"subscribeEvent","thingId":"`+a.id+`","event":"alarm"}`))
	time.Sleep(200 * time.Millisecond)
	var rerr error
	for rerr == nil {
		_, _, rerr = deaf.Read(ctx)
	}
	// coder/websocket drops the TCP connection when a ping times out, so
	// the client may see EOF rather than a close frame.
	if errors.Is(rerr, context.DeadlineExceeded) {
		t.Errorf("deaf client still connected: %v", rerr)
	}
}

// A consumer that does not read its own replies is closed with 1013 once
// its send queue is full (replies are never dropped); the agent and other
// consumers carry on.
func TestWSSlowConsumerOfRepliesIsClosed(t *testing.T) {
	h := startHub(t, func(c *Config) {
		c.HTTP.WebSocket.SendQueue = 2
		c.HTTP.WebSocket.MessageRate = 1000
	})
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-00000000e301", false)
	slow, err := h.wsDialErr("/ws", "lmosprotocol", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	slow.SetReadLimit(1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	big := strings.Repeat("x", 400<<10)
	for i := range 40 { // 16 MB of replies: more than loopback buffers hold
		msg := `{"messageType":"invokeAction","messageId":"` + strconv.Itoa(i) + `","thingId":"` + a.id + `","action":"echo","input":"` + big + `"}`
		if err := slow.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			break // the hub may close it before all are sent
		}
		time.Sleep(5 * time.Millisecond) // paced: the agent's own queue holds 2 requests
	}
	waitFor(t, 15*time.Second, "slow consumer closed", func() bool { return h.metric("lmos_ws_slow_closed_total") >= 1 })
	var rerr error
	for rerr == nil {
		_, _, rerr = slow.Read(ctx)
	}
	if st := websocket.CloseStatus(rerr); st != websocket.StatusTryAgainLater {
		t.Errorf("slow consumer: %v, want close 1013", rerr)
	}
	// Another consumer is served once the agent has worked off what the
	// slow one had sent it: until then the agent is busy (503, by design).
	w := h.wsDial("lmosprotocol", nil)
	waitFor(t, 15*time.Second, "another consumer served", func() bool {
		r := w.reply(w.send(map[string]any{"messageType": "invokeAction", "thingId": a.id, "action": "echo", "input": 1}, false))
		return r["status"] == "completed"
	})
}

// An agent that does not keep up with requests is not disconnected: once
// its send queue is full, further requests are refused (503).
func TestWSBusyAgentRefusesRequests(t *testing.T) {
	h := startHub(t, func(c *Config) {
		c.HTTP.WebSocket.SendQueue = 2
		c.HTTP.WebSocket.MessageRate = 1000
		c.HTTP.ProxyTimeout = Duration(2 * time.Second)
	})
	id := "urn:uuid:5b0d6c1e-0000-4000-8000-00000000e401"
	agent, err := h.wsDialErr("/ws", "lmosprotocol", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, _ := json.Marshal(map[string]any{"messageType": "registerThing", "messageId": "r", "td": wsTD(id)})
	if err := agent.Write(ctx, websocket.MessageText, reg); err != nil {
		t.Fatal(err)
	}
	if _, ack, err := agent.Read(ctx); err != nil || !strings.Contains(string(ack), "acknowledgement") {
		t.Fatalf("register: %s %v", ack, err)
	}
	// The agent reads nothing from now on: TCP backs up, then its queue.
	w := h.wsDial("lmosprotocol", nil)
	big := strings.Repeat("x", 400<<10)
	busy := 0
	refused := func(r map[string]any) bool { return r["messageType"] == "error" && r["status"] == 503.0 }
	for i := 0; i < 60 && busy == 0; i++ {
		w.send(map[string]any{"messageType": "invokeAction", "thingId": id, "action": "echo", "input": big}, false)
		select {
		case r := <-w.msgs:
			if refused(r) {
				busy++
			}
		case <-time.After(10 * time.Millisecond):
		}
	}
	deadline := time.After(5 * time.Second)
	for busy == 0 {
		select {
		case r := <-w.msgs:
			if refused(r) {
				busy++
			}
		case <-deadline:
			t.Fatal("no request was refused while the agent did not read")
		}
	}
	if busy == 0 {
		t.Fatal("no request was refused while the agent did not read")
	}
	if s, _ := h.presenceOf(id); s != "online" {
		t.Errorf("the busy agent is %s", s)
	}
	if n := h.metric("lmos_ws_slow_closed_total"); n != 0 {
		t.Errorf("%v connections closed", n)
	}
}
