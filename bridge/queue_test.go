package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
	for i := range q.since {
		q.since[i] = time.Now().Add(-3 * time.Second) // both waited 3 s
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
