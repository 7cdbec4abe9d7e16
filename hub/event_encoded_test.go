package hub_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// A live event's encoding is made once and shared by every subscriber
// (issue 24: a thousand event streams encoded each 250 KB update a
// thousand times); an event from the log (a replay) is encoded each time.
func TestEventEncodedOnceForAllSubscribers(t *testing.T) {
	e := newRouterEnv(t)
	var subs []*hub.Subscription
	for range 3 {
		s, _, err := e.reg.Subscribe(0, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Cancel)
		subs = append(subs, s)
	}
	e.put(t, "urn:lamp:enc", hub.SourceHTTP)
	var made atomic.Int64
	encode := func() []byte { made.Add(1); return []byte("frame") }
	var frames [][]byte
	for _, s := range subs {
		select {
		case ev := <-s.C:
			if ev.Type != hub.EventCreated {
				t.Fatalf("event %+v", ev)
			}
			frames = append(frames, ev.Encoded("k", encode))
			if other := ev.Encoded("other", encode); string(other) != "frame" {
				t.Fatalf("%q", other)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
	}
	if n := made.Load(); n != 2 {
		t.Errorf("encoded %d times for 3 subscribers and 2 keys, want 2", n)
	}
	for _, f := range frames[1:] {
		if &f[0] != &frames[0][0] {
			t.Error("subscribers got copies, not the one shared encoding")
		}
	}
	rs, past, err := e.reg.Subscribe(0, true)
	if err != nil || len(past) == 0 {
		t.Fatalf("replay: %v %d", err, len(past))
	}
	t.Cleanup(rs.Cancel)
	before := made.Load()
	past[0].Encoded("k", encode)
	past[0].Encoded("k", encode)
	if made.Load() != before+2 {
		t.Error("a replayed event was memoised")
	}
}
