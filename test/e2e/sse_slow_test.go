package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// slowSSE opens an event stream on a raw TCP connection with a small
// receive buffer, reads the response head and then never reads again.
func (h *testHub) slowSSE(path string) net.Conn {
	h.t.Helper()
	c := h.slowConn()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", path, h.Main.HTTPAddr)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReaderSize(c, 16) // reads little beyond the head
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		h.t.Fatalf("GET %s: %q %v", path, status, err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			h.t.Fatalf("GET %s: head: %v", path, err)
		}
		if line == "\r\n" {
			break
		}
	}
	return c
}

// slowConn is a TCP connection to the hub's HTTP port with a small
// receive buffer, so the hub's writes block soon when it does not read.
func (h *testHub) slowConn() net.Conn {
	h.t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", h.Main.HTTPAddr.String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// Issue 12 point 6: every event stream the hub closes because its client
// stopped reading is counted in lmos_sse_dropped_total (it stayed 0: a
// stream blocked in a write ended on the write deadline, uncounted).
// Two directory streams and one proxied event stream stop reading; a
// client that reads keeps its stream and is not counted.
func TestSSESlowReadersCounted(t *testing.T) {
	m := hubtest.NewMain(t, t.TempDir(), nil)
	m.SSEWriteTimeout = 300 * time.Millisecond
	h := runHub(t, m)
	a := h.startAgent(agentID)
	eventTopic := "lmos/v1/things/" + a.tid + "/events/alarm"

	fast := h.openSSE("/events", "")
	sawAfter := make(chan struct{})
	go func() {
		for ev := range fast.C {
			if strings.Contains(ev.Data, "urn:ex:after") {
				close(sawAfter)
			}
		}
	}()
	slow := []net.Conn{h.slowSSE("/events?diff=true"), h.slowSSE("/events/thing_updated?diff=true"),
		h.slowSSE("/proxy/" + pathEscape(agentID) + "/events/alarm")}
	waitFor(t, 2*time.Second, "proxy stream subscribed", func() bool { return h.Main.Broker.Subscribers(eventTopic) == 1 })
	before := h.metric("lmos_sse_dropped_total")

	// Big updates and events until the three streams are closed: each
	// update's diff and each event carries 200 KB; bounded at 40 MB.
	id := "urn:ex:slow-sse"
	big := func(c byte) string { return strings.Repeat(string(c), 200<<10) }
	for i := 0; i < 100 && h.metric("lmos_sse_dropped_total")-before < float64(len(slow)); i++ {
		h.put(id, []byte(fmt.Sprintf(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":"slow","description":%q,"securityDefinitions":{"n":{"scheme":"nosec"}},"security":"n"}`,
			id, big(byte('a'+i%2)))))
		a.mc.pub(eventTopic, []byte(`"`+big('e')+`"`), false)
	}
	if got := h.metric("lmos_sse_dropped_total") - before; got != float64(len(slow)) {
		t.Fatalf("lmos_sse_dropped_total moved by %v, want %d (the streams that stopped reading)", got, len(slow))
	}
	// Each slow stream is closed: draining it ends in EOF, not a timeout.
	for i, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("slow stream %d: not closed by the hub: %v", i, err)
		}
	}
	waitFor(t, 2*time.Second, "proxy stream unsubscribed", func() bool { return h.Main.Broker.Subscribers(eventTopic) == 0 })
	// The reading client keeps its stream and is not counted.
	h.put("urn:ex:after", makeTD("urn:ex:after", "after"))
	select {
	case <-sawAfter:
	case <-time.After(5 * time.Second):
		t.Error("the reading client's stream did not carry the last event")
	}
	if got := h.metric("lmos_sse_dropped_total") - before; got != float64(len(slow)) {
		t.Errorf("lmos_sse_dropped_total moved by %v after, want %d", got, len(slow))
	}
}

// A client that asks for a large answer and never reads it does not hold
// the request (its goroutine and the answer in memory) for ever: the
// response must be taken within the write timeout, then the hub closes the
// connection. Other clients are answered meanwhile.
func TestHTTPResponseNotReadIsBounded(t *testing.T) {
	m := hubtest.NewMain(t, t.TempDir(), nil)
	m.HTTPWriteTimeout = 500 * time.Millisecond
	h := runHub(t, m)
	// 24 Things of 240 KB: a list of ~5.8 MB, more than the socket
	// buffers between the hub and a client that does not read.
	for i := range 24 {
		id := fmt.Sprintf("urn:ex:big-%d", i)
		h.put(id, []byte(fmt.Sprintf(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":"big","description":%q,"securityDefinitions":{"n":{"scheme":"nosec"}},"security":"n"}`,
			id, strings.Repeat("x", 240<<10))))
	}
	// Long-lived connections are not ordinary responses: a WebSocket
	// agent and an event stream outlive the write timeout.
	agent := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-0000000b0001", false)
	events := h.openSSE("/events", "")
	c := h.slowConn()
	fmt.Fprintf(c, "GET /things HTTP/1.1\r\nHost: %s\r\n\r\n", h.Main.HTTPAddr)
	// Not reading: the hub's write blocks, then fails on its deadline.
	// Meanwhile others are served.
	var st map[string]any
	h.getJSON("/api/status", 200, &st)
	time.Sleep(time.Second) // the client does not read for a while: that is the attack
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Fatalf("the hub did not close the connection of a client that stopped reading (read %d bytes): %v", n, err)
	}
	if n >= 24*240<<10 {
		t.Errorf("the client got the whole list (%d bytes) though it did not read in time", n)
	}
	if resp, body := h.request("GET", "/proxy/"+pathEscape(agent.id)+"/properties/temp", "", "", nil, ""); resp.StatusCode != 200 || string(body) != "21.5" {
		t.Errorf("the WebSocket agent after the write timeout: %d %s", resp.StatusCode, body)
	}
	h.put("urn:ex:later", makeTD("urn:ex:later", "later"))
	for {
		ev := events.next(5 * time.Second)
		if strings.Contains(ev.Data, "urn:ex:later") {
			break
		}
	}
}
