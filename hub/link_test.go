package hub_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// WatchLinks tells the feed of a link that appears, changes state, meets
// a new error or goes away, and of nothing else: a link whose counters
// move while its state holds is not news.
func TestWatchLinksAnnouncesChanges(t *testing.T) {
	reg := newRegistry(t, openStore(t), hub.RegistryOptions{})
	sub, _, err := reg.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	var mu sync.Mutex
	links := []hub.LinkState{{Kind: hub.LinkSync, Name: "http://a", State: hub.LinkConnecting}}
	set := func(l []hub.LinkState) { mu.Lock(); links = l; mu.Unlock() }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		hub.WatchLinks(ctx, reg, time.Millisecond, func() []hub.LinkState {
			mu.Lock()
			defer mu.Unlock()
			return append([]hub.LinkState(nil), links...)
		})
	}()
	defer func() { cancel(); <-done }()
	next := func(what string) hub.LinkState {
		t.Helper()
		select {
		case e := <-sub.C:
			if e.Type != hub.EventLink || e.Link == nil || e.ID != e.Link.Name || e.Seq != 0 {
				t.Fatalf("%s: event %+v", what, e)
			}
			return *e.Link
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no link event", what)
		}
		return hub.LinkState{}
	}
	if l := next("appears"); l.Kind != hub.LinkSync || l.State != hub.LinkConnecting {
		t.Fatalf("first event %+v", l)
	}
	// Counters move, state holds: no event; then the state changes.
	set([]hub.LinkState{{Kind: hub.LinkSync, Name: "http://a", State: hub.LinkConnecting, Sent: 10, Outbox: 3}})
	set([]hub.LinkState{{Kind: hub.LinkSync, Name: "http://a", State: hub.LinkConnected, Sent: 11}})
	if l := next("connected"); l.State != hub.LinkConnected || l.Sent != 11 {
		t.Fatalf("second event %+v", l)
	}
	set([]hub.LinkState{{Kind: hub.LinkSync, Name: "http://a", State: hub.LinkDown, LastError: "503"}})
	if l := next("down"); l.State != hub.LinkDown || l.LastError != "503" {
		t.Fatalf("third event %+v", l)
	}
	set([]hub.LinkState{{Kind: hub.LinkSync, Name: "http://a", State: hub.LinkDown, LastError: "connection refused"}})
	if l := next("new error"); l.LastError != "connection refused" {
		t.Fatalf("fourth event %+v", l)
	}
	set(nil)
	if l := next("removed"); l.State != hub.LinkRemoved || l.Kind != hub.LinkSync || l.Name != "http://a" {
		t.Fatalf("fifth event %+v", l)
	}
}
