package mqtt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// writeCounter counts the writes that reach a real TCP connection.
type writeCounter struct {
	net.Conn
	n atomic.Int32
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(p)
}

// readN reads exactly n bytes from c within 5 s.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

// The acknowledgements mochi writes while it processes what it read
// (PUBACK, PUBREC, PUBCOMP) leave together, in order, when it next reads,
// ahead of anything written after them; a connection that closes still
// sends them. Any other packet is written at once.
func TestAcksHeldUntilNextRead(t *testing.T) {
	peer, server := loopbackPair(t)
	w := &writeCounter{Conn: server}
	c := newOutConn(w, 1<<10, 0, nil)
	acks := [][]byte{
		{0x40, 2, 0, 1},       // PUBACK 1 (MQTT 3.1.1, or 5 with Success)
		{0x50, 3, 0, 2, 0x10}, // PUBREC 2, No matching subscribers
		{0x70, 2, 0, 3},       // PUBCOMP 3
	}
	for _, a := range acks {
		if n, err := c.Write(a); err != nil || n != len(a) {
			t.Fatalf("write %x: %d, %v", a, n, err)
		}
	}
	if n := w.n.Load(); n != 0 {
		t.Fatalf("%d writes before the next read, want 0", n)
	}
	// The next read (the client sent something) sends them, in one write.
	if _, err := peer.Write([]byte{0xc0, 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	if n := w.n.Load(); n != 1 {
		t.Fatalf("%d writes for three held acknowledgements, want 1", n)
	}
	if got, want := readN(t, peer, 13), bytes.Join(acks, nil); !bytes.Equal(got, want) {
		t.Fatalf("peer read %x, want %x", got, want)
	}
	// Not acknowledgements: a PUBREL (mochi writes it on other paths too),
	// and two packets in one write.
	for _, p := range [][]byte{{0x62, 2, 0, 4}, {0x40, 2, 0, 5, 0x40, 2, 0, 6}} {
		before := w.n.Load()
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
		if w.n.Load() != before+1 {
			t.Fatalf("%x was held", p)
		}
		if got := readN(t, peer, len(p)); !bytes.Equal(got, p) {
			t.Fatalf("peer read %x, want %x", got, p)
		}
	}
	// A held acknowledgement goes out ahead of a packet written after it.
	suback := []byte{0x90, 3, 0, 9, 1}
	if _, err := c.Write([]byte{0x40, 2, 0, 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(suback); err != nil {
		t.Fatal(err)
	}
	if got, want := readN(t, peer, 9), append([]byte{0x40, 2, 0, 7}, suback...); !bytes.Equal(got, want) {
		t.Fatalf("peer read %x, want %x", got, want)
	}
	// Closing sends what is held, then the peer reads the end.
	if _, err := c.Write([]byte{0x40, 2, 0, 8}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, peer, 4); !bytes.Equal(got, []byte{0x40, 2, 0, 8}) {
		t.Fatalf("peer read %x after close, want the held PUBACK", got)
	}
	if n, err := peer.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after close: %d bytes, %v; want EOF", n, err)
	}
}

// A burst of QoS 2 messages from mosquitto_pub -l (20 in flight, so
// PUBRECs and PUBCOMPs are held and sent together) completes, and
// mosquitto_sub over MQTT 5 and 3.1.1 at QoS 2 gets each exactly once:
// strict clients that fail on a missing or malformed acknowledgement.
func TestQoS2BurstWithHeldAcknowledgements(t *testing.T) {
	const n = 2000
	e := newEnv(t, nil)
	const id = "urn:q2"
	topic := lmos.ThingsPrefix + id + "/events/n"
	_, creds := joinOwner(t, e, id, nil)
	var waits []func() []string
	for _, v := range []string{"mqttv5", "mqttv311"} {
		waits = append(waits, mosquittoSub(t, e, "mosq2-"+v, topic, "-V", v, "-q", "2", "-C", fmt.Sprint(n)))
	}
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, "%d\n", i)
	}
	host, port, _ := net.SplitHostPort(e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, requireBin(t, "mosquitto_pub"), "-h", host, "-p", port, "-V", "mqttv5", "-q", "2",
		"-u", creds.Username, "-P", creds.Password, "-t", topic, "-l")
	cmd.Stdin = strings.NewReader(lines.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
	for _, wait := range waits {
		got := wait()
		seen := map[string]bool{}
		for _, l := range got {
			seen[l] = true
		}
		if len(got) != n || len(seen) != n {
			t.Fatalf("mosquitto_sub got %d messages, %d distinct, want %d", len(got), len(seen), n)
		}
	}
}
