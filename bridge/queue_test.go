package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho/queue"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// The outbox keeps its order within one tick of the file system's clock
// (autopaho's file queue orders by modification time) and across a
// reopen; what Quarantine sets aside is not taken again.
func TestQueueOrderAndReopen(t *testing.T) {
	dir := t.TempDir()
	q, err := openQueue(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		if err := q.Enqueue(strings.NewReader(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	take := func(q *fileQueue, k int, from int) {
		t.Helper()
		for i := from; i < from+k; i++ {
			e, err := q.Peek()
			if err != nil {
				t.Fatal(err)
			}
			r, _ := e.Reader()
			b, _ := io.ReadAll(r)
			if string(b) != fmt.Sprint(i) {
				t.Fatalf("message %d is %q", i, b)
			}
			if err := e.Remove(); err != nil && !errors.Is(err, queue.ErrEmpty) {
				t.Fatal(err)
			}
		}
	}
	take(q, 100, 0)
	q2, err := openQueue(dir)
	if err != nil {
		t.Fatal(err)
	}
	if q2.Len() != n-100 {
		t.Fatalf("reopened with %d messages, want %d", q2.Len(), n-100)
	}
	if err := q2.Enqueue(strings.NewReader(fmt.Sprint(n))); err != nil {
		t.Fatal(err)
	}
	take(q2, n-100+1, 100)
	if _, err := q2.Peek(); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Peek of an empty queue: %v", err)
	}
	if err := q2.Enqueue(strings.NewReader("bad")); err != nil {
		t.Fatal(err)
	}
	e, err := q2.Peek()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Quarantine(); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Quarantine: %v", err)
	}
	q3, err := openQueue(dir)
	if err != nil || q3.Len() != 0 {
		t.Fatalf("reopened after a quarantine: %d messages, %v", q3.Len(), err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.corrupt")); len(m) != 1 {
		t.Errorf("quarantined files: %v", m)
	}
}

// The session store lists packets in the order they were put, a packet
// put again under its id last, and reloads the same from disk.
func TestSessionStoreOrderAndReload(t *testing.T) {
	dir := t.TempDir()
	s, err := openSessionStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint16{5, 1, 9, 3} {
		if err := s.Put(id, 3, bytes.NewBufferString(fmt.Sprint("p", id))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(1, 6, bytes.NewBufferString("p1again")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(9); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*sessionStore{s, must(openSessionStore(dir))} {
		ids, _ := st.List()
		if fmt.Sprint(ids) != "[5 3 1]" {
			t.Errorf("List = %v, want [5 3 1]", ids)
		}
		r, err := st.Get(1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		if string(b) != "p1again" {
			t.Errorf("Get(1) = %q", b)
		}
	}
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if ids, _ := must(openSessionStore(dir)).List(); len(ids) != 0 {
		t.Errorf("after Reset: %v", ids)
	}
}

// drain takes every queued message, oldest first, and returns their
// payloads.
func drain(q *fileQueue) []string {
	var got []string
	for {
		e, err := q.Peek()
		if err != nil {
			return got
		}
		r, _ := e.Reader()
		b, _ := io.ReadAll(r)
		got = append(got, string(b))
		_ = e.Remove()
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A queued message whose Message Expiry Interval passed while it waited
// is not sent; one still alive goes with what is left of its interval.
func TestQueueExpiry(t *testing.T) {
	q, err := openQueue(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	expired := 0
	q.expired = func() { expired++ }
	put := func(topic string, expiry uint32) {
		t.Helper()
		p := &paho.Publish{QoS: 1, Topic: topic, Payload: []byte("x"), Properties: &paho.PublishProperties{MessageExpiry: &expiry}}
		var b bytes.Buffer
		if _, err := p.Packet().WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if err := q.Enqueue(&b); err != nil {
			t.Fatal(err)
		}
	}
	put("old", 2)
	put("young", 10)
	for i := range q.recs {
		q.recs[i].since = time.Now().Add(-3 * time.Second) // both waited 3 s
	}
	e, err := q.Peek()
	if err != nil {
		t.Fatal(err)
	}
	r, _ := e.Reader()
	cp, err := packets.ReadPacket(r)
	if err != nil {
		t.Fatal(err)
	}
	pub := cp.Content.(*packets.Publish)
	if pub.Topic != "young" || pub.Properties.MessageExpiry == nil || *pub.Properties.MessageExpiry != 7 {
		t.Fatalf("peeked %s with expiry %v, want young with 7 s left", pub.Topic, pub.Properties.MessageExpiry)
	}
	if expired != 1 || q.Len() != 1 {
		t.Errorf("expired %d, left %d; want 1 and 1", expired, q.Len())
	}
}

// qos1 is an encoded QoS 1 PUBLISH of payload, as autopaho queues it.
func qos1(t *testing.T, payload string) io.Reader {
	t.Helper()
	var b bytes.Buffer
	if _, err := (&paho.Publish{QoS: 1, Topic: "t", Payload: []byte(payload)}).Packet().WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return &b
}

// send takes the oldest message as autopaho sends a QoS 1 one: Peek, the
// PUBLISH put in the client session (tied to the message), Remove.
func send(t *testing.T, q *fileQueue, c *clientSession, id uint16) string {
	t.Helper()
	e, err := q.Peek()
	if err != nil {
		t.Fatal(err)
	}
	r, _ := e.Reader()
	cp, err := packets.ReadPacket(r)
	if err != nil {
		t.Fatal(err)
	}
	pub := cp.Content.(*packets.Publish)
	pub.PacketID = id
	if err := c.Put(id, packets.PUBLISH, pub); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(); err != nil && !errors.Is(err, queue.ErrEmpty) {
		t.Fatal(err)
	}
	return string(pub.Payload)
}

// A QoS 1 message sent but not acknowledged upstream stays in the outbox
// (on disk) while its session packet lives in memory only: a process
// killed then (the queue reopened without closing) sends it again. The
// PUBACK (the session packet deleted) makes it done, also on disk.
func TestQueueKeepsSentUntilAcknowledged(t *testing.T) {
	dir := t.TempDir()
	q, c := openBoth(t, dir)
	for i := range 3 {
		if err := q.Enqueue(qos1(t, fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := send(t, q, c, 7) + send(t, q, c, 8); got != "m0m1" {
		t.Fatalf("sent %q", got)
	}
	if q.Len() != 3 {
		t.Fatalf("Len %d with two messages in flight and one queued, want 3", q.Len())
	}
	if ids, _ := c.List(); fmt.Sprint(ids) != "[7 8]" {
		t.Fatalf("session lists %v", ids)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "session", "*")); len(files) != 0 {
		t.Errorf("QoS 1 packets in flight wrote session files: %v", files)
	}
	killed, _ := openBoth(t, dir) // what a restart finds
	if got := send(t, killed, must(newClientSession(killed, must(openSessionStore(t.TempDir())))), 1); got != "m0" || killed.Len() != 3 {
		t.Fatalf("after a kill: first %q of %d, want m0 of 3", got, killed.Len())
	}
	if err := c.Delete(8); err != nil { // PUBACKs out of order
		t.Fatal(err)
	}
	if q.Len() != 3 || must(openQueue(filepath.Join(dir, "queue"))).Len() != 3 {
		t.Fatalf("m1 acknowledged before m0: Len %d, want 3 (m0 not done)", q.Len())
	}
	if err := c.Delete(7); err != nil {
		t.Fatal(err)
	}
	reopened := must(openQueue(filepath.Join(dir, "queue")))
	if q.Len() != 1 || reopened.Len() != 1 {
		t.Fatalf("both acknowledged: Len %d, reopened %d, want 1", q.Len(), reopened.Len())
	}
	if got := send(t, reopened, must(newClientSession(reopened, must(openSessionStore(t.TempDir())))), 1); got != "m2" {
		t.Errorf("after the acknowledgements the reopened queue sends %q, want m2", got)
	}
}

func openBoth(t *testing.T, dir string) (*fileQueue, *clientSession) {
	t.Helper()
	q, err := openQueue(filepath.Join(dir, "queue"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := openSessionStore(filepath.Join(dir, "session"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClientSession(q, s)
	if err != nil {
		t.Fatal(err)
	}
	return q, c
}

// The upstream lost the session (Reset): the QoS 1 messages in flight go
// again from the outbox, before those still queued, in order.
func TestSessionResetResends(t *testing.T) {
	q, c := openBoth(t, t.TempDir())
	for i := range 4 {
		if err := q.Enqueue(qos1(t, fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	send(t, q, c, 1)
	send(t, q, c, 2)
	send(t, q, c, 3)
	if err := c.Delete(2); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if ids, _ := c.List(); len(ids) != 0 {
		t.Fatalf("session after Reset: %v", ids)
	}
	var got []string
	for range 3 {
		got = append(got, send(t, q, c, 9))
		_ = c.Delete(9)
	}
	if fmt.Sprint(got) != "[m0 m2 m3]" || q.Len() != 0 {
		t.Errorf("after Reset sent %v (Len %d), want [m0 m2 m3] and 0", got, q.Len())
	}
}

// The outbox is a few segment files, not a file per message, and a
// segment goes once every message in it is done.
func TestQueueFiles(t *testing.T) {
	dir := t.TempDir()
	q, err := openQueue(dir)
	if err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 1000)
	const n = 3000 // ~3 segments
	for range n {
		if err := q.Enqueue(strings.NewReader(payload)); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segmentExt))
	if len(segs) < 2 || len(segs) > 4 {
		t.Fatalf("%d segment files for %d messages of 1 kB: %v", len(segs), n, segs)
	}
	for range n {
		e, err := q.Peek()
		if err != nil {
			t.Fatal(err)
		}
		_ = e.Remove()
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) > 2 { // the marker and at most the segment being written
		t.Errorf("files left once every message is done: %v", left)
	}
	if got := must(openQueue(dir)).Len(); got != 0 {
		t.Errorf("reopened an empty queue with %d messages", got)
	}
}

// A record cut short or damaged (a power cut) is set aside at load; the
// records before it are kept, in order, and new ones follow them.
func TestQueueDamagedTail(t *testing.T) {
	dir := t.TempDir()
	q := must(openQueue(dir))
	for i := range 3 {
		if err := q.Enqueue(strings.NewReader(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segmentExt))
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	data, _ := os.ReadFile(segs[0])
	data[len(data)-1] ^= 0xff // the last record's data no longer matches its CRC
	if err := os.WriteFile(segs[0], append(data, 0, 0, 0), 0o600); err != nil {
		t.Fatal(err)
	}
	q2 := must(openQueue(dir))
	if err := q2.Enqueue(strings.NewReader("m3")); err != nil {
		t.Fatal(err)
	}
	got := drain(q2)
	if fmt.Sprint(got) != "[m0 m1 m3]" {
		t.Errorf("after a damaged record: %v, want [m0 m1 m3]", got)
	}
	if aside, _ := filepath.Glob(filepath.Join(dir, "*.corrupt")); len(aside) != 1 {
		t.Errorf("set aside: %v", aside)
	}
}

// The one-file-per-message outbox of earlier versions is taken over in
// order and its files removed.
func TestQueueMigratesMessageFiles(t *testing.T) {
	dir := t.TempDir()
	for i, m := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d.msg", 10-i*3)), []byte(m), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	q := must(openQueue(dir))
	got := drain(q)
	if fmt.Sprint(got) != "[c b a]" {
		t.Errorf("migrated %v, want [c b a] (by sequence number)", got)
	}
	if old, _ := filepath.Glob(filepath.Join(dir, "*.msg")); len(old) != 0 {
		t.Errorf("left %v", old)
	}
}

// The session dropped (Reset) between the PUBLISH put in it and autopaho
// removing the message: the message stays queued and goes again.
func TestSessionResetBeforeRemove(t *testing.T) {
	q, c := openBoth(t, t.TempDir())
	if err := q.Enqueue(qos1(t, "m0")); err != nil {
		t.Fatal(err)
	}
	e, err := q.Peek()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(4, packets.PUBLISH, &packets.Publish{QoS: 1, PacketID: 4, Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(); err != nil {
		t.Fatalf("Remove: %v, want nil (still queued)", err)
	}
	if got := send(t, q, c, 5); got != "m0" {
		t.Fatalf("sent %q after the reset, want m0 again", got)
	}
	if err := c.Delete(5); err != nil {
		t.Fatal(err)
	}
	if q.Len() != 0 {
		t.Errorf("Len %d after the PUBACK, want 0", q.Len())
	}
}

// A damaged segment that is not the newest: the records after the
// damage are lost, those of the next segments still go, in order, and the
// marker moves past the gap once they are done.
func TestQueueDamagedOlderSegment(t *testing.T) {
	dir := t.TempDir()
	q := must(openQueue(dir))
	for i := range 3 {
		if err := q.Enqueue(strings.NewReader(fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	q = must(openQueue(dir)) // a new segment at each start
	if err := q.Enqueue(strings.NewReader("b0")); err != nil {
		t.Fatal(err)
	}
	q.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segmentExt))
	if len(segs) != 2 {
		t.Fatalf("segments %v", segs)
	}
	data, _ := os.ReadFile(segs[0])
	if err := os.WriteFile(segs[0], data[:len(data)-5], 0o600); err != nil { // a2 cut short
		t.Fatal(err)
	}
	q = must(openQueue(dir))
	got := drain(q)
	if fmt.Sprint(got) != "[a0 a1 b0]" || q.Len() != 0 {
		t.Errorf("sent %v (Len %d), want [a0 a1 b0] and 0", got, q.Len())
	}
	q.Close()
	if n := must(openQueue(dir)).Len(); n != 0 {
		t.Errorf("reopened with %d messages, want 0", n)
	}
}
