package mqtt

// The connection loop (connloop.go) against the MQTT rules it is easy to
// get wrong: a second CONNECT, keep-alive timing, a CONNECT body that
// arrives in pieces, an expired session's subscriptions, the length of
// Remaining Length.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// rawConnect311 encodes an MQTT 3.1.1 CONNECT with the Thing's credentials and
// a QoS 0 will on willTopic.
func rawConnect311(t *testing.T, id string, cred *credentials, keepAlive uint16, willTopic string, willPayload []byte) []byte {
	t.Helper()
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 4,
		Connect: packets.ConnectParams{
			ProtocolName:     []byte("MQTT"),
			Clean:            true,
			Keepalive:        keepAlive,
			ClientIdentifier: id,
		},
	}
	if cred != nil {
		pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte(cred.Username)
		pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(cred.Password)
	}
	if willTopic != "" {
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, willTopic, willPayload
	}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// mosquittoSubWait starts mosquitto_sub (MQTT 3.1.1) on topic, waiting for
// count messages for at most 10 s, and returns once it is subscribed; the
// returned func waits for it and returns its output, failing the test on
// a non-zero exit (a protocol error, or messages missing).
func mosquittoSubWait(t *testing.T, e *env, name, topic string, count int) func() string {
	t.Helper()
	bin := requireBin(t, "mosquitto_sub")
	host, port, _ := net.SplitHostPort(e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-i", name, "-V", "mqttv311",
		"-q", "1", "-C", strconv.Itoa(count), "-W", "10", "-t", topic)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, name+" subscribed", func() bool {
		cl, ok := e.b.server.Clients.Get(name)
		if !ok {
			return false
		}
		_, ok = cl.State.Subscriptions.Get(topic)
		return ok
	})
	return func() string {
		t.Helper()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: %v (stderr %q, stdout %q)", name, err, errb.String(), out.String())
		}
		return out.String()
	}
}

// A second CONNECT is a protocol violation [MQTT-3.1.0-2]: the connection
// is closed and, not being a DISCONNECT, its will must be published
// [MQTT-3.1.2-8]. mochi's processConnect publishes it itself (sendLWT,
// through its per-client outbound channel) and clears the will flag; on
// the hub's loop no goroutine drains that channel (its capacity is 0), so
// every subscriber's copy is dropped, and the hub's own endSession finds
// the flag cleared: the will reaches nobody.
func TestSecondConnectPublishesWill(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:loop:second"
	cred := e.thing(t, id)
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/gone"
	wait := mosquittoSubWait(t, e, "loop-second-sub", topic, 1)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rawConnect311(t, "loop-second", cred, 30, topic, []byte("will"))
	if _, err := conn.Write(c); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, ack); err != nil || ack[3] != 0 {
		t.Fatalf("CONNACK % x, %v", ack, err)
	}
	if _, err := conn.Write(c); err != nil { // the second CONNECT
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(conn); err != nil || len(rest) != 0 {
		t.Fatalf("want the connection closed, got % x, %v", rest, err)
	}
	if got := wait(); got != "will\n" {
		t.Fatalf("subscriber got %q, want the will", got)
	}
}

// The broker must allow one and a half times the Keep Alive before it
// closes a silent connection (§3.1.2.10 Keep Alive, in 3.1.1 and 5).
// keepAlive computes ka+ka/2 in uint16: 1 s for a Keep Alive of 1 (the
// half second is truncated), and for a Keep Alive above 43,690 s the sum
// wraps (65,535 s gives 32,766 s, half the Keep Alive itself). mochi's
// refreshDeadline has the same arithmetic. Here a client that pings 1.25 s
// after its CONNACK (within 1.5 × 1 s) finds its connection closed.
func TestKeepAliveOneAndAHalf(t *testing.T) {
	e := newEnv(t, nil)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(rawConnect311(t, "loop-ka", nil, 1, "", nil)); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 4)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, ack); err != nil || ack[3] != 0 {
		t.Fatalf("CONNACK % x, %v", ack, err)
	}
	time.Sleep(1250 * time.Millisecond) // inside 1.5 × Keep Alive: what is under test
	if _, err := conn.Write([]byte{0xc0, 0}); err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, 2)
	if _, err := io.ReadFull(conn, resp); err != nil || resp[0] != 0xd0 {
		t.Fatalf("PINGRESP: got % x, %v: the connection was closed before 1.5 × Keep Alive", resp, err)
	}
}

// deadlineConn records the read deadline set on it.
type deadlineConn struct {
	net.Conn
	deadline time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error { c.deadline = t; return nil }

// keepAlive's deadline for the largest Keep Alive (65,535 s) must be
// 1.5 × it, not what the uint16 sum wraps to.
func TestKeepAliveDeadlineDoesNotWrap(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	rc := &deadlineConn{Conn: a}
	oc := newOutConn(rc, 1<<10, time.Second, func() {})
	oc.keepalive.Store(65535)
	before := time.Now()
	// mochi's refreshDeadline: 65535 + 65535/2 in uint16 wraps to 32766.
	_ = oc.SetDeadline(before.Add(32766 * time.Second))
	if got, want := rc.deadline.Sub(before), time.Duration(65535)*1500*time.Millisecond; got < want-time.Second || got > want+time.Second {
		t.Fatalf("read deadline in %v, want %v (1.5 × 65535 s)", got, want)
	}
}

// A CONNECT's body is allocated whole as soon as its fixed header is read
// (readPacket: make([]byte, Remaining)), before a byte of it arrived and
// before authentication: each connection that announces a CONNECT just
// under MaxPacketSize and sends nothing more holds ~1 MB for the whole
// connect timeout. Sixteen such connections hold 16 MB (a Pi-class
// gateway's memory is the point of issue 16). Memory should follow the
// bytes that actually arrived.
func TestPreConnectBodyGrowsAsItArrives(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ConnectTimeout = time.Minute })
	const conns = 16
	baseHeads := e.b.connectHeads.Load()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	for range conns {
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// CONNECT, Remaining Length 1,000,000, then the protocol name only.
		if _, err := conn.Write([]byte{0x10, 0xc0, 0x84, 0x3d, 0, 4, 'M', 'Q', 'T', 'T'}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 5*time.Second, "fixed headers read", func() bool {
		return e.b.connectHeads.Load() >= baseHeads+conns
	})
	for range 25 { // an allocation would follow the header at once
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if grown := int64(ms.HeapAlloc) - int64(base); grown > 4<<20 {
			t.Fatalf("%d connections that sent 10 bytes each hold %d KB of heap", conns, grown>>10)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A session that expires (mochi's clearExpiredClients) is deleted from
// mochi's client table only: its subscriptions stay in the topic index,
// keyed by the client id. A later connection with that id and Clean
// Start, which must find no session [MQTT-3.1.2-4], then gets messages
// for filters it never subscribed to. mosquitto_sub (MQTT 5, clean start)
// subscribes to U only; a message on T, subscribed by the expired session,
// is published before one on U: the first message it gets must be U's.
func TestExpiredSessionLeavesTopicIndex(t *testing.T) {
	e := newEnv(t, nil)
	const id, pubID = "urn:loop:expire", "urn:loop:expirepub"
	cred := e.thing(t, id)
	pub, _ := joinOwner(t, e, pubID, nil)
	topicT := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/events/t"
	topicU := lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/events/u"
	const clientID = "loop-expire"
	c := mustDial(t, e.addr, persistentAs(cred, clientID, 1))
	c.mustSub(topicT)
	c.close()
	testwait.Eventually(t, 10*time.Second, "session expired", func() bool {
		_, ok := e.b.server.Clients.Get(clientID)
		return !ok
	})
	if subs := e.b.server.Topics.Subscribers(topicT); len(subs.Subscriptions) != 0 {
		t.Errorf("the expired session's subscription is still in the topic index: %v", subs.Subscriptions)
	}
	bin := requireBin(t, "mosquitto_sub")
	host, port, _ := net.SplitHostPort(e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-i", clientID, "-V", "mqttv5",
		"-u", cred.Username, "-P", cred.Password, "-q", "1", "-C", "1", "-W", "10", "-F", "%t", "-t", topicU)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "subscribed to U", func() bool {
		cl, ok := e.b.server.Clients.Get(clientID)
		if !ok {
			return false
		}
		_, ok = cl.State.Subscriptions.Get(topicU)
		return ok
	})
	pub.mustPub(topicT, []byte("t"), 1, false)
	pub.mustPub(topicU, []byte("u"), 1, false)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mosquitto_sub: %v %s", err, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != topicU {
		t.Fatalf("a clean session got %q first, want %q: a message for the expired session's filter", got, topicU)
	}
}

// The Remaining Length is at most four bytes [MQTT-1.5.5-1] (3.1.1 §2.2.3).
// mochi's DecodeLength keeps reading while the continuation bit is set and
// the value stays small; the hub reads a connection's CONNECT itself
// (readConnect), so a valid CONNECT whose length is spelt in five bytes
// (mochi would answer it) closes the connection with no CONNACK. (After
// the CONNECT mochi reads: PROTOCOL §10 says what that lets through.)
func TestConnectRemainingLengthAtMostFourBytes(t *testing.T) {
	e := newEnv(t, nil)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	heads := e.b.connectHeads.Load()
	valid := rawConnect311(t, "len-five", nil, 30, "", nil)
	body := valid[2:] // a body under 128 bytes: one length byte
	if valid[1] != byte(len(body)) {
		t.Fatalf("CONNECT of %d bytes needs a longer length", len(body))
	}
	// The same length in five bytes: the value fits, the encoding does not.
	malformed := append([]byte{0x10, byte(len(body)) | 0x80, 0x80, 0x80, 0x80, 0x00}, body...)
	if _, err := conn.Write(malformed); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	// Closed with the rest unread: EOF or a reset.
	if rest, err := io.ReadAll(conn); len(rest) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("want the connection closed (malformed Remaining Length), got % x, %v", rest, err)
	}
	if got := e.b.connectHeads.Load(); got != heads {
		t.Fatalf("a malformed header was counted as read (%d, was %d)", got, heads)
	}
}
