package hub_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// Issue 24, point 7: the pending list could be filled for good. Entries
// expire (join.pendingTTL), anonymous ones give way to newer joins from
// sources holding fewer, and an admin denies in bulk.

// pendingHub is a registry on a moved clock with join mode approve and a
// durable pending list.
func pendingHub(t *testing.T, clock *testClock) (*gatedStore, *hub.Registry, *hub.Admission) {
	t.Helper()
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock.now})
	a := newAdmission(t, s, r, "approve", -1, 0)
	if err := a.OpenPending(s.DB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return s, r, a
}

// pendingIDs is the pending list's ids, oldest first.
func pendingIDs(a *hub.Admission) []string {
	var ids []string
	for _, p := range a.State(true).Pending {
		ids = append(ids, p.ID)
	}
	return ids
}

func sortedStored(t *testing.T, db *store.DB) []string {
	t.Helper()
	ids := storedPending(t, db)
	slices.Sort(ids)
	return ids
}

func sorted(ids []string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}

// wantLimit checks err is a hub error of code and limit.
func wantRefusal(t *testing.T, what string, err error, code, limit string) {
	t.Helper()
	var he *hub.Error
	if !errors.As(err, &he) || he.Code != code || he.Limit != limit {
		t.Fatalf("%s: %v, want %s (%s)", what, err, code, limit)
	}
}

// fill parks 16 joins from each of 16 sources 10.9.0.s (ids urn:x:s-i), a
// second apart, in source order: the list is full.
func fill(t *testing.T, a *hub.Admission, r *hub.Registry, clock *testClock, waiters map[string]*waiter) {
	t.Helper()
	for s := range hub.MaxPending / hub.MaxPendingPerSource {
		for i := range hub.MaxPendingPerSource {
			id := fmt.Sprintf("urn:x:%d-%d", s, i)
			w := newWaiter("")
			waiters[id] = w
			if err := park(t, a, r, id, fmt.Sprintf("10.9.0.%d", s), hub.SourceWS, &w.JoinWaiter); err != nil {
				t.Fatalf("park %s: %v", id, err)
			}
			clock.add(time.Second)
		}
	}
	if n := a.PendingCount(); n != hub.MaxPending {
		t.Fatalf("filled %d, want %d", n, hub.MaxPending)
	}
}

// The reproduction: 16 addresses fill the list, after which a device's
// join from another address was refused 507 join.pending for good. Now
// it takes the place of the oldest anonymous entry of a source holding
// the most; the evicted agent is told 507; the store follows in the
// same commit; the flood going on from its own addresses and new ones
// only ever evicts its own entries, never the device's.
func TestFullPendingListGivesWayToNewSource(t *testing.T) {
	clock := newClock(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC))
	s, r, a := pendingHub(t, clock)
	waiters := map[string]*waiter{}
	fill(t, a, r, clock, waiters)
	sub, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()

	legit := newWaiter("")
	if err := park(t, a, r, "urn:device:lamp", "192.168.1.20", hub.SourceWS, &legit.JoinWaiter); err != nil {
		t.Fatalf("a device's join on a list full of strangers: %v", err)
	}
	clock.add(time.Second)
	ids := pendingIDs(a)
	if len(ids) != hub.MaxPending || slices.Contains(ids, "urn:x:0-0") || ids[len(ids)-1] != "urn:device:lamp" {
		t.Fatalf("after the device's join: %d entries, first %v, last %s", len(ids), ids[:2], ids[len(ids)-1])
	}
	n, _, werr := waiters["urn:x:0-0"].decision()
	if n != 1 {
		t.Fatalf("the evicted agent was told %d times", n)
	}
	wantRefusal(t, "the evicted agent", werr, hub.EFULL, "join.pending")
	if got, want := sortedStored(t, s.DB), sorted(ids); !slices.Equal(got, want) {
		t.Fatalf("store %d entries, list %d: they differ", len(got), len(want))
	}
	wantEvents(t, sub, hub.EventJoinDenied, "urn:x:0-0", hub.EventJoinPending, "urn:device:lamp")

	// The flood goes on: its sources asking again, new ones joining.
	// Each join takes a place of a source holding more than its own, or
	// is refused (its source at its cap, or holding as many as any).
	parked := 0
	for k := range 200 {
		src := fmt.Sprintf("10.9.0.%d", k%20) // 16 known addresses, 4 new ones
		err := park(t, a, r, fmt.Sprintf("urn:x:more-%d", k), src, hub.SourceWS, nil)
		var he *hub.Error
		switch {
		case err == nil:
			parked++
		case !errors.As(err, &he) || he.Code != hub.EFULL || he.Limit != "join.pendingPerSource" && he.Limit != "join.pending":
			t.Fatalf("flood join %d from %s: %v", k, src, err)
		}
		clock.add(time.Second)
	}
	if parked < 40 {
		t.Fatalf("only %d of the flood's joins parked", parked)
	}
	ids = pendingIDs(a)
	if len(ids) != hub.MaxPending || !slices.Contains(ids, "urn:device:lamp") {
		t.Fatalf("after the flood went on: %d entries, the device's kept: %v", len(ids), slices.Contains(ids, "urn:device:lamp"))
	}
	if n, _, _ := legit.decision(); n != 0 {
		t.Fatalf("the device's agent was told something: %d", n)
	}
	// The places are shared out: each new address got every one of its
	// 10 joins in (it always held fewer than the others), and no address
	// holds more than its cap.
	perSource := map[string]int{}
	for _, p := range a.State(true).Pending {
		perSource[hub.SourceOf(p.Addr)]++
	}
	for src, c := range perSource {
		isNew := src >= "10.9.0.16" && src <= "10.9.0.19" && len(src) == len("10.9.0.16")
		if c > hub.MaxPendingPerSource || isNew && c != 10 {
			t.Errorf("source %s holds %d entries: %v", src, c, perSource)
		}
	}
	if r.Count() != 0 {
		t.Fatalf("%d Things reached the registry", r.Count())
	}
	if got, want := sortedStored(t, s.DB), sorted(pendingIDs(a)); !slices.Equal(got, want) {
		t.Fatalf("store and list differ after the flood")
	}
}

// wantEvents reads the feed until it has seen the given (type, id) pairs
// in order.
func wantEvents(t *testing.T, sub *hub.Subscription, pairs ...any) {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		typ, id := pairs[i].(hub.EventType), pairs[i+1].(string)
		select {
		case e := <-sub.C:
			if e.Type != typ || e.ID != id {
				t.Fatalf("event %s %s, want %s %s", e.Type, e.ID, typ, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %s %s", typ, id)
		}
	}
}

// Nothing gives way to a join from a source holding as many entries as
// any other: it is refused 507 join.pending and nothing changes. Entries
// whose requester proved the id its own (its MQTT credential, its bound
// key) never give way, and such a join takes an anonymous entry's place
// whatever its source holds.
func TestPendingEvictionSparesEqualsAndProvenEntries(t *testing.T) {
	clock := newClock(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC))
	s, r, a := pendingHub(t, clock)
	ctx := context.Background()
	// Two Things that joined over MQTT with credentials, since deleted
	// by an admin (their credentials stay): their holders come back.
	for _, id := range []string{"urn:owned:1", "urn:owned:2"} {
		register(t, a, r, id, hub.Origin{Source: hub.SourceMQTT, Addr: "10.8.0.1"}, "hash-"+id)
		if err := r.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	parkHolder := func(id, addr string) error {
		t.Helper()
		if _, err := a.Admit(hub.JoinRequest{ID: id, Door: hub.SourceMQTT, Holder: true, Addr: addr}); !errors.Is(err, hub.ErrJoinPending) {
			t.Fatalf("holder's admit %s: %v", id, err)
		}
		p, err := r.Prepare(testTD(id, "owned"))
		if err != nil {
			t.Fatal(err)
		}
		return a.Park(id, p, hub.SourceMQTT, addr, nil)
	}
	// The oldest entry is proven.
	if err := parkHolder("urn:owned:1", "10.8.0.1"); err != nil {
		t.Fatal(err)
	}
	clock.add(time.Second)
	// 17 sources with 15 entries each (the first one's after the proven
	// entry) and one with one: 1 + 255 = 256.
	for i := range 255 {
		src := i % 17
		if err := park(t, a, r, fmt.Sprintf("urn:e:%d-%d", src, i/17), fmt.Sprintf("10.8.1.%d", src), hub.SourceWS, nil); err != nil {
			t.Fatalf("park %d: %v", i, err)
		}
		clock.add(time.Second)
	}
	if a.PendingCount() != hub.MaxPending {
		t.Fatalf("pending %d", a.PendingCount())
	}
	if st := a.State(true); !st.Pending[0].Proven || st.Pending[0].ID != "urn:owned:1" || st.Pending[1].Proven {
		t.Fatalf("proven marks: %+v %+v", st.Pending[0].Proven, st.Pending[1].Proven)
	}
	before, stored := pendingIDs(a), sortedStored(t, s.DB)

	// A source holding 15, as many as any: refused, nothing changed.
	err := park(t, a, r, "urn:e:refused", "10.8.1.3", hub.SourceWS, nil)
	wantRefusal(t, "a join from a source holding as many as any", err, hub.EFULL, "join.pending")
	if after := pendingIDs(a); !slices.Equal(after, before) || !slices.Equal(sortedStored(t, s.DB), stored) {
		t.Fatal("a refused join changed the list or the store")
	}

	// A new source (holding none) takes the place of the oldest anonymous
	// entry of a source holding 15: not the older proven entry.
	if err := park(t, a, r, "urn:e:newcomer", "10.8.2.1", hub.SourceWS, nil); err != nil {
		t.Fatal(err)
	}
	clock.add(time.Second)
	after := pendingIDs(a)
	if !slices.Contains(after, "urn:owned:1") || slices.Contains(after, "urn:e:0-0") || !slices.Contains(after, "urn:e:newcomer") {
		t.Fatalf("eviction took the wrong entry: first entries %v", after[:3])
	}

	// The holder of urn:owned:2 comes back from a source holding 15, as
	// many as any: a proven join takes an anonymous place anyway.
	if err := parkHolder("urn:owned:2", "10.8.1.5"); err != nil {
		t.Fatalf("a proven join on a full list: %v", err)
	}
	after = pendingIDs(a)
	if len(after) != hub.MaxPending || !slices.Contains(after, "urn:owned:2") || !slices.Contains(after, "urn:owned:1") {
		t.Fatalf("after the proven join: %d entries", len(after))
	}
	if got, want := sortedStored(t, s.DB), sorted(after); !slices.Equal(got, want) {
		t.Fatal("store and list differ")
	}
}

// A description is bounded in bytes as the list is in count: large joins
// of one source stop at join.pendingBytes (nothing of another source may
// give way); another source's large join takes the place of as many of
// that source's oldest entries as it needs.
func TestPendingBytesEvictOldestOfBiggestSource(t *testing.T) {
	clock := newClock(time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC))
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock.now, MaxTDBytes: 1 << 20})
	a := newAdmission(t, s, r, "approve", -1, 0)
	big := func(id string, kib int) *hub.PreparedTD {
		t.Helper()
		p, err := r.Prepare(testTD(id, "big", "description", `"`+strings.Repeat("x", kib<<10)+`"`))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var err error
	n := 0
	for ; err == nil && n < hub.MaxPendingPerSource; n++ {
		id := fmt.Sprintf("urn:big:a%d", n)
		err = a.Park(id, big(id, 600), hub.SourceMQTT, "10.7.0.1", nil)
		clock.add(time.Second)
	}
	wantRefusal(t, fmt.Sprintf("large join %d of one source", n), err, hub.EFULL, "join.pendingBytes")
	held := pendingIDs(a)
	if len(held) != n-1 || len(held) < 2 {
		t.Fatalf("%d held after %d joins", len(held), n)
	}
	// 1.5 MiB from another source: two of the first source's oldest go.
	if err := a.Park("urn:big:b", big("urn:big:b", 1000), hub.SourceMQTT, "10.7.0.2", nil); err != nil {
		t.Fatal(err)
	}
	got := pendingIDs(a)
	total := 0
	for _, p := range a.State(true).Pending {
		total += len(p.TD)
	}
	if total > hub.MaxPendingBytes || got[len(got)-1] != "urn:big:b" || !slices.Equal(got[:len(got)-1], held[len(held)-len(got)+1:]) {
		t.Fatalf("after the other source's join: %v (%d bytes), held before %v", got, total, held)
	}
}
