package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// wire drives test/interop/mqtt-wire.mjs: raw MQTT sockets whose packets
// npm mqtt-packet generates and whose every received byte mqtt-packet's
// strict parser decodes. Any protocol error the script reports fails the
// test; packets are read per connection, in order.
type wire struct {
	t     *testing.T
	in    io.WriteCloser
	cmd   *exec.Cmd
	mu    sync.Mutex
	conns map[string]chan wireEvent
	// backlog holds packets take read past, per connection.
	backlog map[string][]*wirePacket
	errs    []string
	done    chan struct{}
}

type wireEvent struct {
	Ev     string      `json:"ev"`
	Conn   string      `json:"conn"`
	Error  string      `json:"error"`
	Packet *wirePacket `json:"packet"`
}

// wirePacket is a packet as mqtt-packet decodes it (Buffers in base64).
type wirePacket struct {
	Cmd            string         `json:"cmd"`
	MessageID      int            `json:"messageId"`
	ReasonCode     *int           `json:"reasonCode"`
	ReturnCode     *int           `json:"returnCode"`
	SessionPresent bool           `json:"sessionPresent"`
	Granted        []int          `json:"granted"`
	Topic          string         `json:"topic"`
	Payload        []byte         `json:"payload"`
	QoS            int            `json:"qos"`
	Retain         bool           `json:"retain"`
	Properties     map[string]any `json:"properties"`
	Length         int            `json:"length"`
}

// reason is the packet's reason code (v5) or return code (3.1.1 CONNACK);
// -1 when it has neither.
func (p *wirePacket) reason() int {
	switch {
	case p.ReasonCode != nil:
		return *p.ReasonCode
	case p.ReturnCode != nil:
		return *p.ReturnCode
	}
	return -1
}

// user returns the user property key ("" when absent).
func (p *wirePacket) user(key string) string {
	u, _ := p.Properties["userProperties"].(map[string]any)
	s, _ := u[key].(string)
	return s
}

// bytesProp decodes a binary property (correlationData).
func (p *wirePacket) bytesProp(name string) string {
	s, _ := p.Properties[name].(string)
	b, _ := base64.StdEncoding.DecodeString(s)
	return string(b)
}

func (p *wirePacket) String() string {
	b, _ := json.Marshal(p)
	return string(b)
}

func startWire(t *testing.T, addr string) *wire {
	t.Helper()
	script := hubtest.InteropScript(t, "mqtt-wire.mjs", "mqtt-packet")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", script, addr)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &wire{t: t, in: in, cmd: cmd, conns: map[string]chan wireEvent{}, backlog: map[string][]*wirePacket{}, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 4<<20), 4<<20)
		for sc.Scan() {
			var e wireEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				w.fail(fmt.Sprintf("script output %q: %v", sc.Text(), err))
				continue
			}
			if e.Ev == "error" {
				w.fail(fmt.Sprintf("%s: %s", e.Conn, e.Error))
				continue
			}
			w.ch(e.Conn) <- e
		}
	}()
	t.Cleanup(func() {
		in.Close()
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
		}
		cancel()
		_ = cmd.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, e := range w.errs {
			t.Errorf("strict decoder: %s", e)
		}
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("node stderr: %s", stderr.String())
		}
	})
	return w
}

func (w *wire) fail(msg string) {
	w.mu.Lock()
	w.errs = append(w.errs, msg)
	w.mu.Unlock()
}

// errors returns the protocol errors reported so far.
func (w *wire) errors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.errs...)
}

// takeErrors returns the protocol errors reported so far and forgets them.
func (w *wire) takeErrors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	errs := w.errs
	w.errs = nil
	return errs
}

func (w *wire) ch(conn string) chan wireEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.conns[conn]
	if c == nil {
		c = make(chan wireEvent, 1024)
		w.conns[conn] = c
	}
	return c
}

func (w *wire) command(v map[string]any) {
	w.t.Helper()
	b, _ := json.Marshal(v)
	if _, err := w.in.Write(append(b, '\n')); err != nil {
		w.t.Fatalf("write to the wire script: %v", err)
	}
}

// event returns the next event of conn.
func (w *wire) event(conn string) wireEvent {
	w.t.Helper()
	select {
	case e := <-w.ch(conn):
		return e
	case <-time.After(5 * time.Second):
		w.t.Fatalf("%s: nothing within 5 s (protocol errors: %v)", conn, w.errors())
	case <-w.done:
		w.t.Fatalf("%s: the wire script ended (protocol errors: %v)", conn, w.errors())
	}
	return wireEvent{}
}

// open connects conn with MQTT version (3 = 3.1, 4 = 3.1.1, 5) and CONNECT fields
// in connect (clientId at least); it returns the CONNACK.
func (w *wire) open(conn string, version int, connect map[string]any) *wirePacket {
	w.t.Helper()
	w.command(map[string]any{"op": "open", "conn": conn, "version": version})
	if e := w.event(conn); e.Ev != "open" {
		w.t.Fatalf("%s: %+v before open", conn, e)
	}
	pk := map[string]any{"cmd": "connect", "protocolVersion": version, "clean": true, "keepalive": 30}
	if version == 3 {
		pk["protocolId"] = "MQIsdp"
	}
	for k, v := range connect {
		pk[k] = v
	}
	w.send(conn, pk)
	return w.expect(conn, "connack")
}

// connect opens conn and checks that the CONNACK accepts it.
func (w *wire) connect(conn string, version int, clientID string) {
	w.t.Helper()
	if ca := w.open(conn, version, map[string]any{"clientId": clientID}); ca.reason() != 0 {
		w.t.Fatalf("%s: CONNACK %s", conn, ca)
	}
}

func (w *wire) send(conn string, pk map[string]any) {
	w.t.Helper()
	w.command(map[string]any{"op": "send", "conn": conn, "packet": pk})
}

// next returns the next packet on conn; it fails on a close.
func (w *wire) next(conn string) *wirePacket {
	w.t.Helper()
	e := w.event(conn)
	if e.Ev != "packet" {
		w.t.Fatalf("%s: %s, want a packet (protocol errors: %v)", conn, e.Ev, w.errors())
	}
	return e.Packet
}

// expect returns the next packet on conn, which must be a cmd.
func (w *wire) expect(conn, cmd string) *wirePacket {
	w.t.Helper()
	p := w.next(conn)
	if p.Cmd != cmd {
		w.t.Fatalf("%s: got %s, want %s", conn, p, cmd)
	}
	return p
}

// take returns the first packet on conn, waiting or from the backlog,
// that is a cmd and satisfies match (nil: any); packets read past wait in
// the backlog. Acknowledgements and deliveries travel on different queues
// of the broker, so their order on one connection is not fixed.
func (w *wire) take(conn, cmd string, match func(*wirePacket) bool) *wirePacket {
	w.t.Helper()
	ok := func(p *wirePacket) bool { return p.Cmd == cmd && (match == nil || match(p)) }
	for i, p := range w.backlog[conn] {
		if ok(p) {
			w.backlog[conn] = append(w.backlog[conn][:i:i], w.backlog[conn][i+1:]...)
			return p
		}
	}
	for {
		p := w.next(conn)
		if ok(p) {
			return p
		}
		w.backlog[conn] = append(w.backlog[conn], p)
	}
}

// takeReason is take of the cmd with that reason code (-1: none).
func (w *wire) takeReason(conn, cmd string, id, reason int) *wirePacket {
	w.t.Helper()
	p := w.take(conn, cmd, func(p *wirePacket) bool { return id == 0 || p.MessageID == id })
	if p.reason() != reason {
		w.t.Errorf("%s: %s reason %#x, want %#x (%s)", conn, cmd, p.reason(), reason, p)
	}
	return p
}

// drained checks that conn received nothing beyond what was taken: a
// PINGREQ's PINGRESP is the next packet.
func (w *wire) drained(conn string) {
	w.t.Helper()
	w.send(conn, map[string]any{"cmd": "pingreq"})
	w.take(conn, "pingresp", nil)
	for _, p := range w.backlog[conn] {
		w.t.Errorf("%s: unexpected %s", conn, p)
	}
	w.backlog[conn] = nil
}

// closed waits for the broker to close conn; packets before the close are
// returned (a DISCONNECT, say).
func (w *wire) closed(conn string) []*wirePacket {
	w.t.Helper()
	var before []*wirePacket
	for {
		e := w.event(conn)
		if e.Ev == "close" {
			return before
		}
		before = append(before, e.Packet)
	}
}

func b64(s string) map[string]any {
	return map[string]any{"$b64": base64.StdEncoding.EncodeToString([]byte(s))}
}
