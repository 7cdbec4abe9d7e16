package hub_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// Pending joins expire join.pendingTTL after they were parked, by the
// registry's clock, across restarts: an expired entry leaves the list and
// the store, its waiting agent is told 504 (join.pendingTTL), and it can
// no longer be approved or denied (404). Before, entries never expired.
func TestPendingJoinsExpireAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clock := newClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	open := func(ttl time.Duration) (*store.DB, *hub.Registry, *hub.Admission) {
		t.Helper()
		db, err := store.Open(dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := hub.NewRegistry(db, hub.RegistryOptions{Now: clock.now})
		if err != nil {
			t.Fatal(err)
		}
		a, err := hub.NewAdmission(r, db, "approve", -1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ttl > 0 {
			a.SetPendingTTL(ttl)
		}
		if err := a.OpenPending(db); err != nil {
			t.Fatal(err)
		}
		return db, r, a
	}
	db, r, a := open(0)
	if a.PendingTTL() != hub.DefaultPendingTTL || hub.DefaultPendingTTL != 24*time.Hour {
		t.Fatalf("default TTL %s", a.PendingTTL())
	}
	sub, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	w1 := newWaiter("pw")
	if err := park(t, a, r, "urn:ttl:1", "10.0.0.1", hub.SourceMQTT, &w1.JoinWaiter); err != nil {
		t.Fatal(err)
	}
	clock.add(2 * time.Hour)
	for _, id := range []string{"urn:ttl:2", "urn:ttl:3"} {
		if err := park(t, a, r, id, "10.0.0.2", hub.SourceWS, nil); err != nil {
			t.Fatal(err)
		}
	}
	wantEvents(t, sub, hub.EventJoinPending, "urn:ttl:1", hub.EventJoinPending, "urn:ttl:2", hub.EventJoinPending, "urn:ttl:3")

	clock.add(22*time.Hour - time.Nanosecond) // a nanosecond before the first's end
	if got := pendingIDs(a); !slices.Equal(got, []string{"urn:ttl:1", "urn:ttl:2", "urn:ttl:3"}) {
		t.Fatalf("before the TTL: %v", got)
	}
	if n, _, _ := w1.decision(); n != 0 {
		t.Fatal("the waiter was told before the TTL")
	}
	clock.add(time.Nanosecond)
	if got := pendingIDs(a); !slices.Equal(got, []string{"urn:ttl:2", "urn:ttl:3"}) {
		t.Fatalf("at the first's TTL: %v", got)
	}
	n, pw, werr := w1.decision()
	if n != 1 || pw != "" {
		t.Fatalf("the waiter was told %d times (%q)", n, pw)
	}
	wantRefusal(t, "the expired join's waiter", werr, hub.ETIMEOUT, "join.pendingTTL")
	wantEvents(t, sub, hub.EventJoinDenied, "urn:ttl:1")
	if got := sortedStored(t, db); !slices.Equal(got, []string{"urn:ttl:2", "urn:ttl:3"}) {
		t.Fatalf("stored after expiry: %v", got)
	}
	for _, f := range []func() error{func() error { return a.Approve(context.Background(), "urn:ttl:1") }, func() error { return a.Deny("urn:ttl:1") }} {
		if err := f(); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Fatalf("decision on an expired join: %v", err)
		}
	}
	if _, err := a.PendingTD("urn:ttl:1"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("the expired join's TD: %v", err)
	}
	if r.Count() != 0 {
		t.Fatal("an expired join reached the registry")
	}
	sub.Cancel()
	a.Close()
	r.Close()
	db.Close()

	// Down for a while: the others' time runs out meanwhile. Opening
	// drops them from the store before anyone asks.
	clock.add(3 * time.Hour)
	db, r, a = open(0)
	if got := sortedStored(t, db); len(got) != 0 {
		t.Fatalf("stored after a restart past the TTL: %v", got)
	}
	if a.PendingCount() != 0 {
		t.Fatal("expired entries loaded")
	}
	// A join parked now keeps its time across a restart: with a shorter
	// TTL configured it expires by that one, counted from its parking.
	if err := park(t, a, r, "urn:ttl:4", "10.0.0.4", hub.SourceWS, nil); err != nil {
		t.Fatal(err)
	}
	a.Close()
	r.Close()
	db.Close()
	clock.add(59 * time.Minute)
	db, r, a = open(time.Hour)
	defer db.Close()
	defer r.Close()
	defer a.Close()
	if got := pendingIDs(a); !slices.Equal(got, []string{"urn:ttl:4"}) {
		t.Fatalf("after the restart within the TTL: %v", got)
	}
	clock.add(time.Minute)
	if a.PendingCount() != 0 || len(storedPending(t, db)) != 0 {
		t.Fatal("the restored entry outlived the TTL")
	}

	// A clock set back by more than the TTL (no real-time clock, a bad
	// time source) leaves entries that look younger than they can be:
	// they expire rather than wait forever.
	if err := park(t, a, r, "urn:ttl:5", "10.0.0.5", hub.SourceWS, nil); err != nil {
		t.Fatal(err)
	}
	clock.add(-2 * time.Hour)
	if a.PendingCount() != 0 {
		t.Fatal("an entry from the clock's future stays")
	}
}

// The list sweeps by itself while entries wait: an agent still connected
// hears of its join's expiry without anyone looking at the list. (A short
// TTL on the real clock; the test waits for the event, at most a minute.)
func TestPendingExpiryTellsWaiterUnasked(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "approve", -1, 0)
	a.SetPendingTTL(time.Millisecond)
	if err := a.OpenPending(s.DB); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	told := make(chan error, 1)
	w := &hub.JoinWaiter{Live: func() bool { return true }, Decided: func(_ string, err error) { told <- err }}
	if err := park(t, a, r, "urn:ttl:timer", "10.0.0.1", hub.SourceWS, w); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-told:
		wantRefusal(t, "the waiter", err, hub.ETIMEOUT, "join.pendingTTL")
	case <-time.After(time.Minute):
		t.Fatal("the waiting agent was not told of its join's expiry")
	}
	if got := storedPending(t, s.DB); len(got) != 0 {
		t.Fatalf("stored after the timer's sweep: %v", got)
	}
}

// Bulk denial (POST /api/join/pending/deny): all, by source, by age, or
// source and age; each selected entry leaves the list and the store, its
// waiting agent is told 403. A filter naming nothing, or badly, is
// refused 400 and nothing changes; one that selects nothing denies none.
func TestDenyAllByFilter(t *testing.T) {
	clock := newClock(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	s, r, a := pendingHub(t, clock)
	waiters := map[string]*waiter{}
	parkAt := func(id, addr string) {
		t.Helper()
		w := newWaiter("")
		waiters[id] = w
		if err := park(t, a, r, id, addr, hub.SourceWS, &w.JoinWaiter); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		parkAt(fmt.Sprintf("urn:bulk:a%d", i), "10.1.0.1")
		parkAt(fmt.Sprintf("urn:bulk:b%d", i), "2001:db8:0:1::"+fmt.Sprint(i+1)) // one /64
		parkAt(fmt.Sprintf("urn:bulk:c%d", i), "10.1.0.3")
		clock.add(time.Hour)
	}
	all := pendingIDs(a)
	if len(all) != 12 {
		t.Fatalf("parked %d", len(all))
	}

	for _, bad := range []hub.PendingFilter{
		{},
		{All: true, Source: "10.1.0.1"},
		{All: true, OlderThan: time.Hour},
		{OlderThan: -time.Hour},
		{Source: "not-an-address"},
		{Source: "10.1.0.1/33/x"},
		// Prefixes no source is named by select nothing: refused.
		{Source: "10.1.0.0/16"},
		{Source: "2001:db8:0:1::/48"},
		{Source: "::ffff:10.1.0.0/120"},
	} {
		ids, err := a.DenyAll(bad)
		if hub.ErrorCode(err) != hub.EINVALID || ids != nil {
			t.Fatalf("filter %+v: %v %v, want invalid", bad, ids, err)
		}
		if got := pendingIDs(a); !slices.Equal(got, all) || len(storedPending(t, s.DB)) != 12 {
			t.Fatalf("a refused filter %+v changed the list", bad)
		}
	}
	for id, w := range waiters {
		if n, _, _ := w.decision(); n != 0 {
			t.Fatalf("%s told after refused filters", id)
		}
	}

	deny := func(f hub.PendingFilter, want ...string) {
		t.Helper()
		ids, err := a.DenyAll(f)
		if err != nil || !slices.Equal(sorted(ids), sorted(want)) {
			t.Fatalf("deny %+v: %v %v, want %v", f, ids, err, want)
		}
		for _, id := range want {
			n, _, werr := waiters[id].decision()
			if n != 1 || hub.ErrorCode(werr) != hub.EFORBIDDEN {
				t.Fatalf("%s's waiter: %d %v", id, n, werr)
			}
		}
		if got, wantStored := sortedStored(t, s.DB), sorted(pendingIDs(a)); !slices.Equal(got, wantStored) {
			t.Fatalf("store %v, list %v", got, wantStored)
		}
	}
	// Received 4h, 3h, 2h, 1h ago: older than 150 min are the first two
	// rounds of 10.1.0.3.
	deny(hub.PendingFilter{Source: "10.1.0.3", OlderThan: 150 * time.Minute}, "urn:bulk:c0", "urn:bulk:c1")
	// An address of a /64 names its prefix, as GET /api/join shows it.
	deny(hub.PendingFilter{Source: "2001:db8:0:1::99"}, "urn:bulk:b0", "urn:bulk:b1", "urn:bulk:b2", "urn:bulk:b3")
	// The /64 itself selects its entries too, also written with a host part.
	parkAt("urn:bulk:b4", "2001:db8:0:1::5")
	deny(hub.PendingFilter{Source: "2001:db8:0:1::/64"}, "urn:bulk:b4")
	parkAt("urn:bulk:b5", "2001:db8:0:1::6")
	deny(hub.PendingFilter{Source: "2001:db8:0:1::1/64"}, "urn:bulk:b5")
	deny(hub.PendingFilter{Source: "192.0.2.1"})
	deny(hub.PendingFilter{OlderThan: 3 * time.Hour}, "urn:bulk:a0", "urn:bulk:a1")
	deny(hub.PendingFilter{All: true}, "urn:bulk:a2", "urn:bulk:a3", "urn:bulk:c2", "urn:bulk:c3")
	if a.PendingCount() != 0 || r.Count() != 0 {
		t.Fatalf("after deny all: %d pending, %d Things", a.PendingCount(), r.Count())
	}
	// It is no ban: the same Thing may ask again.
	parkAt("urn:bulk:a0", "10.1.0.1")
}
