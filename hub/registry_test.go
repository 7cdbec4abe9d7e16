package hub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

func testTD(id, title string, extra ...string) []byte {
	m := map[string]any{
		"@context":            "https://www.w3.org/2022/wot/td/v1.1",
		"id":                  id,
		"title":               title,
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		var v any
		_ = json.Unmarshal([]byte(extra[i+1]), &v)
		m[extra[i]] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// gatedStore is the real bbolt store with a gate in front of Commit, so a
// test can hold the write loop while more writes queue up behind it.
type gatedStore struct {
	*store.DB
	gate    chan struct{} // when non-nil, Commit waits for a receive
	fail    atomic.Bool
	commits atomic.Int64
}

func (g *gatedStore) Commit(b *hub.Batch) error {
	if g.gate != nil {
		<-g.gate
	}
	g.commits.Add(1)
	if g.fail.Load() {
		return errors.New("disk on fire")
	}
	return g.DB.Commit(b)
}

func openStore(t *testing.T) *gatedStore {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &gatedStore{DB: db}
}

func newRegistry(t *testing.T, s hub.Store, opts hub.RegistryOptions) *hub.Registry {
	t.Helper()
	r, err := hub.NewRegistry(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestConcurrentWritesShareCommitsAndKeepOrder(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	sub, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("urn:t:%03d", i)
			if created, err := r.Put(context.Background(), id, testTD(id, "t"), hub.Origin{Source: hub.SourceHTTP}); err != nil || !created {
				t.Errorf("put %s: %v %v", id, created, err)
			}
		}()
	}
	wg.Wait()
	if got := r.Count(); got != n {
		t.Errorf("count = %d", got)
	}
	for want := uint64(1); want <= n; want++ {
		select {
		case e := <-sub.C:
			if e.Seq != want || e.Type != hub.EventCreated {
				t.Fatalf("event %d = %+v", want, e)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d missing", want)
		}
	}
	if c := s.commits.Load(); c >= n {
		t.Errorf("%d commits for %d concurrent writes: no batching", c, n)
	}
	t.Logf("%d writes in %d commits", n, s.commits.Load())
}

// queueBehindGate holds the loop in a commit of a first write, queues ops
// in order, then releases the gate.
func queueBehindGate(t *testing.T, s *gatedStore, r *hub.Registry, ops ...func() error) []error {
	t.Helper()
	s.gate = make(chan struct{})
	errs := make([]error, len(ops)+1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[0] = r.Put(context.Background(), "urn:t:blocker", testTD("urn:t:blocker", "b"), hub.Origin{})
	}()
	time.Sleep(50 * time.Millisecond) // the loop is now inside the gated commit
	for i, op := range ops {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i+1] = op() }()
		time.Sleep(50 * time.Millisecond) // keep queue order
	}
	close(s.gate)
	wg.Wait()
	s.gate = nil
	return errs
}

func TestSameIDTwiceInOneBatch(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	ctx := context.Background()
	if _, err := r.Put(ctx, "urn:t:x", testTD("urn:t:x", "old"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	before := s.commits.Load()
	// Delete then re-create in one batch: the Thing must exist afterwards.
	errs := queueBehindGate(t, s, r,
		func() error { return r.Delete(ctx, "urn:t:x") },
		func() error { _, err := r.Put(ctx, "urn:t:x", testTD("urn:t:x", "new"), hub.Origin{}); return err },
	)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if got := s.commits.Load() - before; got != 2 {
		t.Fatalf("%d commits, want 2 (the blocker, then one batch)", got)
	}
	if th, err := r.Get("urn:t:x"); err != nil || th.Summary.Title != "new" {
		t.Fatalf("after delete+put: %v %v", th.Summary.Title, err)
	}
	if raw, err := s.ThingRaw("urn:t:x"); err != nil || !json.Valid(raw) {
		t.Fatalf("store after delete+put: %v", err)
	}
	// Create then delete in one batch: gone, in memory and on disk.
	errs = queueBehindGate(t, s, r,
		func() error { _, err := r.Put(ctx, "urn:t:y", testTD("urn:t:y", "y"), hub.Origin{}); return err },
		func() error { return r.Delete(ctx, "urn:t:y") },
		func() error { return r.Delete(ctx, "urn:t:y") }, // now absent: 404 without failing the batch
	)
	if errs[1] != nil || errs[2] != nil || hub.ErrorCode(errs[3]) != hub.ENOTFOUND {
		t.Fatalf("errs = %v", errs)
	}
	if _, err := r.Get("urn:t:y"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("y still readable: %v", err)
	}
	if _, err := s.ThingRaw("urn:t:y"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("y still stored: %v", err)
	}
	// The event log tells the whole story in order.
	var types []string
	_ = s.EventsAfter(0, func(e hub.Event) error { types = append(types, string(e.Type)+" "+e.ID); return nil })
	want := []string{"thing_created urn:t:x", "thing_created urn:t:blocker", "thing_deleted urn:t:x", "thing_created urn:t:x",
		"thing_updated urn:t:blocker", "thing_created urn:t:y", "thing_deleted urn:t:y"}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Errorf("events = %v\nwant     %v", types, want)
	}
}

func TestFailedCommitChangesNothing(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	ctx := context.Background()
	if _, err := r.Put(ctx, "urn:t:a", testTD("urn:t:a", "a"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	rev := r.Revision()
	s.fail.Store(true)
	_, err := r.Put(ctx, "urn:t:b", testTD("urn:t:b", "b"), hub.Origin{})
	if hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("put during failure: %v", err)
	}
	if err := r.Delete(ctx, "urn:t:a"); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("delete during failure: %v", err)
	}
	if _, err := r.Get("urn:t:b"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("b visible after failed commit: %v", err)
	}
	if _, err := r.Get("urn:t:a"); err != nil {
		t.Errorf("a gone after failed delete: %v", err)
	}
	if r.Revision() != rev {
		t.Errorf("revision moved on failure")
	}
	s.fail.Store(false)
	if _, err := r.Put(ctx, "urn:t:b", testTD("urn:t:b", "b"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if r.Revision() != rev+1 {
		t.Errorf("revision = %d, want %d: failed writes must not use up sequence numbers", r.Revision(), rev+1)
	}
}

func TestSlowSubscriberIsDroppedAndCanCatchUp(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{SubscriberBuffer: 2})
	slow, _, _ := r.Subscribe(0, false)
	fast, _, _ := r.Subscribe(0, false)
	got := make(chan uint64, 100)
	go func() {
		for e := range fast.C {
			got <- e.Seq
		}
	}()
	// One write at a time, each read by the fast subscriber before the
	// next: it keeps up by construction, and only the slow one falls behind.
	for i := range 6 {
		id := fmt.Sprintf("urn:t:%d", i)
		if _, err := r.Put(context.Background(), id, testTD(id, "x"), hub.Origin{}); err != nil {
			t.Fatal(err)
		}
		select {
		case seq := <-got:
			if seq != uint64(i+1) {
				t.Fatalf("fast subscriber got %d, want %d", seq, i+1)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("fast subscriber got nothing for event %d (dropped: %v)", i+1, fast.Dropped())
		}
	}
	var last uint64
	for e := range slow.C { // closed after the two buffered events
		last = e.Seq
	}
	if !slow.Dropped() || last != 2 {
		t.Fatalf("slow subscriber: dropped %v, last %d", slow.Dropped(), last)
	}
	again, past, err := r.Subscribe(last, true)
	if err != nil || len(past) != 4 || past[0].Seq != 3 || past[3].Seq != 6 {
		t.Fatalf("catch-up replay = %v, %v", past, err)
	}
	again.Cancel()
	again.Cancel() // twice is fine
}

func TestExpiryWithClock(t *testing.T) {
	s := openStore(t)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock})
	ctx := context.Background()
	put := func(id string, extra ...string) {
		t.Helper()
		if _, err := r.Put(ctx, id, testTD(id, id, extra...), hub.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	put("urn:t:ttl", "registration", `{"ttl": 60}`)
	put("urn:t:expires", "registration", `{"expires": "2026-01-01T12:00:30Z"}`)
	put("urn:t:forever")
	th, _ := r.Get("urn:t:ttl")
	if th.Meta.TTL != 60 || !th.Meta.Expires.Equal(now.Add(time.Minute)) {
		t.Fatalf("meta = %+v", th.Meta)
	}
	sub, _, _ := r.Subscribe(r.Revision(), false)

	advance(30 * time.Second)
	if _, err := r.Get("urn:t:expires"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("client expires not honoured: %v", err)
	}
	// An empty patch refreshes the TTL.
	if err := r.Patch(ctx, "urn:t:ttl", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	advance(45 * time.Second) // 75 s after the put, 45 s after the refresh
	if _, err := r.Get("urn:t:ttl"); err != nil {
		t.Errorf("refreshed Thing expired: %v", err)
	}
	if list, total := r.List(0, 0); total != 2 || len(list) != 2 {
		t.Errorf("list = %d/%d, want the refreshed and the unlimited Thing", len(list), total)
	}
	advance(20 * time.Second)
	if _, err := r.Get("urn:t:ttl"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("Thing readable after its expiry: %v", err)
	}
	put("urn:t:poke") // the loop re-arms its timer from the moved clock
	var deleted []string
	timeout := time.After(5 * time.Second)
	for len(deleted) < 2 {
		select {
		case e := <-sub.C:
			if e.Type == hub.EventDeleted {
				deleted = append(deleted, e.ID)
			}
		case <-timeout:
			t.Fatalf("purge events: %v", deleted)
		}
	}
	for _, id := range []string{"urn:t:ttl", "urn:t:expires"} {
		if _, err := s.ThingRaw(id); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Errorf("%s not purged from the store: %v", id, err)
		}
	}
	if r.Count() != 2 {
		t.Errorf("count = %d", r.Count())
	}
}

func TestMaxThings(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{MaxThings: 2})
	ctx := context.Background()
	for _, id := range []string{"urn:t:1", "urn:t:2"} {
		if _, err := r.Put(ctx, id, testTD(id, "x"), hub.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Put(ctx, "urn:t:3", testTD("urn:t:3", "x"), hub.Origin{}); hub.ErrorCode(err) != hub.EFULL {
		t.Errorf("third Thing: %v", err)
	}
	if _, err := r.Put(ctx, "urn:t:1", testTD("urn:t:1", "replaced"), hub.Origin{}); err != nil {
		t.Errorf("replacing at the limit: %v", err)
	}
	if r.Count() != 2 {
		t.Errorf("count = %d", r.Count())
	}
}

func TestReloadFromStore(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := hub.NewRegistry(db, hub.RegistryOptions{})
	for i := range 5 {
		id := fmt.Sprintf("urn:t:%d", 4-i)
		if _, err := r.Put(context.Background(), id, testTD(id, "x"), hub.Origin{Source: hub.SourceMQTT}); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	db.Close()
	db, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r2, err := hub.NewRegistry(db, hub.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	list, total := r2.List(1, 2)
	if total != 5 || len(list) != 2 || list[0].ID != "urn:t:1" || list[0].Meta.Origin.Source != hub.SourceMQTT {
		t.Errorf("reloaded list = %+v (total %d)", list, total)
	}
	if r2.Revision() != 5 {
		t.Errorf("revision = %d", r2.Revision())
	}
	// Writes after Close fail cleanly.
	r2.Close()
	if _, err := r2.Put(context.Background(), "urn:t:z", testTD("urn:t:z", "z"), hub.Origin{}); hub.ErrorCode(err) != hub.EUNAVAILABLE {
		t.Errorf("put after close: %v", err)
	}
}

func TestPresence(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	ctx := context.Background()
	if err := r.SetPresence(ctx, "urn:t:none", hub.PresenceOnline, hub.SourceMQTT); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("presence of an unknown Thing: %v", err)
	}
	if err := r.SetPresence(ctx, "urn:t:p", "sleepy", hub.SourceMQTT); hub.ErrorCode(err) != hub.EINVALID {
		t.Fatalf("bad status: %v", err)
	}
	sub, _, _ := r.Subscribe(0, false)
	// A put and a presence change in one batch: both must be stored.
	errs := queueBehindGate(t, s, r,
		func() error {
			_, err := r.Put(ctx, "urn:t:p", testTD("urn:t:p", "p"), hub.Origin{Source: hub.SourceMQTT})
			return err
		},
		func() error { return r.SetPresence(ctx, "urn:t:p", hub.PresenceOnline, hub.SourceMQTT) },
		func() error { return r.SetPresence(ctx, "urn:t:p", hub.PresenceOnline, hub.SourceMQTT) }, // no change, no event
	)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	th, _ := r.Get("urn:t:p")
	if th.Meta.Presence.Status != hub.PresenceOnline || th.Meta.Presence.Via != hub.SourceMQTT {
		t.Errorf("presence = %+v", th.Meta.Presence)
	}
	if raw, err := s.ThingRaw("urn:t:p"); err != nil || len(raw) == 0 {
		t.Fatalf("document lost by the presence change in the same batch: %v", err)
	}
	var types []hub.EventType
	for len(types) < 3 {
		select {
		case e := <-sub.C:
			types = append(types, e.Type)
			if e.Type == hub.EventPresence && (e.Presence == nil || e.Presence.Status != hub.PresenceOnline) {
				t.Errorf("presence event = %+v", e)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("events = %v", types)
		}
	}
	if fmt.Sprint(types) != "[thing_created thing_created presence]" {
		t.Errorf("events = %v, want the blocker's and p's creation, then one presence event", types)
	}
	// Presence survives a reload; the document is untouched.
	if err := r.SetPresence(ctx, "urn:t:p", hub.PresenceOffline, hub.SourceMQTT); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r2 := newRegistry(t, s, hub.RegistryOptions{})
	th, err := r2.Get("urn:t:p")
	if err != nil || th.Meta.Presence.Status != hub.PresenceOffline || th.Summary.Title != "p" {
		t.Errorf("after reload: %+v %v", th.Meta.Presence, err)
	}
}

func TestListHugeLimit(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	for _, id := range []string{"urn:t:a", "urn:t:b"} {
		if _, err := r.Put(context.Background(), id, testTD(id, "x"), hub.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	if list, total := r.List(1, int(^uint(0)>>1)); total != 2 || len(list) != 1 || list[0].ID != "urn:t:b" {
		t.Errorf("List(1, MaxInt) = %d things of %d", len(list), total)
	}
	if list, _ := r.List(5, 3); len(list) != 0 {
		t.Errorf("offset past the end: %d things", len(list))
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func TestExpiryEdgeCases(t *testing.T) {
	s := openStore(t)
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock.Now})
	ctx := context.Background()
	sub, _, _ := r.Subscribe(0, false)
	next := func() hub.Event {
		t.Helper()
		select {
		case e := <-sub.C:
			return e
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
		return hub.Event{}
	}

	// A fractional TTL rounds up to whole seconds.
	if _, err := r.Put(ctx, "urn:t:frac", testTD("urn:t:frac", "f", "registration", `{"ttl": 0.0000001}`), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if th, _ := r.Get("urn:t:frac"); th.Meta.TTL != 1 || !th.Meta.Expires.Equal(clock.Now().Add(time.Second)) {
		t.Errorf("ttl 1e-7: meta %+v", th.Meta)
	}
	next()
	// An expires that is already over is refused, and nothing is stored.
	_, err := r.Put(ctx, "urn:t:past", testTD("urn:t:past", "p", "registration", `{"expires": "2000-01-01T00:00:00Z"}`), hub.Origin{})
	if hub.ErrorCode(err) != hub.EINVALID || hub.ErrorFields(err)[0].Field != "/registration/expires" {
		t.Errorf("past expires: %v", err)
	}
	if _, err := s.ThingRaw("urn:t:past"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("refused Thing stored: %v", err)
	}

	// Re-registered after expiry but before the purge: deleted, then created.
	clock.Advance(2 * time.Second)
	if created, err := r.Put(ctx, "urn:t:frac", testTD("urn:t:frac", "again"), hub.Origin{}); err != nil || !created {
		t.Fatalf("re-register: %v %v", created, err)
	}
	if e1, e2 := next(), next(); e1.Type != hub.EventDeleted || e2.Type != hub.EventCreated || e2.Seq != e1.Seq+1 {
		t.Errorf("events = %+v, %+v; want deleted then created", e1, e2)
	}

	// A purge whose commit fails is tried again.
	if _, err := r.Put(ctx, "urn:t:ttl", testTD("urn:t:ttl", "t", "registration", `{"ttl": 5}`), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	next()
	clock.Advance(10 * time.Second)
	s.fail.Store(true)
	_, _ = r.Put(ctx, "urn:t:poke", testTD("urn:t:poke", "p"), hub.Origin{}) // re-arms the timer; the purge then fails too
	time.Sleep(100 * time.Millisecond)
	s.fail.Store(false)
	if _, err := r.Put(ctx, "urn:t:poke", testTD("urn:t:poke", "p"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	var purged bool
	for deadline := time.After(5 * time.Second); !purged; {
		select {
		case e := <-sub.C:
			purged = e.Type == hub.EventDeleted && e.ID == "urn:t:ttl"
		case <-deadline:
			t.Fatal("the purge was not retried after a failed commit")
		}
	}
	if _, err := s.ThingRaw("urn:t:ttl"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("expired Thing still stored: %v", err)
	}
}

func TestPresenceEventsAreNotNumbered(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	ctx := context.Background()
	if _, err := r.Put(ctx, "urn:t:p", testTD("urn:t:p", "p"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	rev := r.Revision()
	for i := range 5 {
		status := []string{hub.PresenceOnline, hub.PresenceOffline}[i%2]
		if err := r.SetPresence(ctx, "urn:t:p", status, hub.SourceMQTT); err != nil {
			t.Fatal(err)
		}
	}
	if r.Revision() != rev {
		t.Errorf("presence changes moved the directory revision %d -> %d", rev, r.Revision())
	}
	var logged int
	_ = s.EventsAfter(0, func(e hub.Event) error { logged++; return nil })
	if logged != 1 {
		t.Errorf("%d events logged, want only the creation", logged)
	}
}

func TestRevokedTokenIsNotRevived(t *testing.T) {
	tokens := hub.NewTokens(openStore(t), nil)
	tok, err := tokens.Install("provisioned-secret-0123", "cfg")
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Revoke(tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Install("provisioned-secret-0123", "cfg"); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Errorf("installing a revoked token again: %v", err)
	}
	if _, err := tokens.Verify("provisioned-secret-0123"); hub.ErrorCode(err) != hub.EUNAUTHORIZED {
		t.Errorf("revoked token verifies after a re-install: %v", err)
	}
}

// TestReloadedSummaries: after a restart the registry answers search and
// affordance questions from the stored summaries, and a Thing whose stored
// summary cannot be used (another version, damaged) is summarised again
// from its document, or with a patch and a presence change in between.
func TestReloadedSummaries(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, _ := hub.NewRegistry(db, hub.RegistryOptions{})
	for i := range 4 {
		id := fmt.Sprintf("urn:t:%d", i)
		if _, err := r.Put(ctx, id, testTD(id, fmt.Sprintf("Lamp %d", i), "actions", `{"toggleLight":{"forms":[{"href":"x"}]}}`), hub.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Patch(ctx, "urn:t:1", []byte(`{"title":"Heater"}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.SetPresence(ctx, "urn:t:1", hub.PresenceOnline, hub.SourceMQTT); err != nil {
		t.Fatal(err)
	}
	r.Close()
	// Damage one stored summary the way an older hub would have left none
	// usable: a metadata record with a summary of an unknown version.
	meta := hub.ThingMeta{Created: time.Now(), Modified: time.Now(), Presence: hub.Presence{Status: hub.PresenceUnknown}}
	if err := db.Commit(&hub.Batch{Puts: []hub.ThingRecord{{ID: "urn:t:2", Raw: testTD("urn:t:2", "Lamp 2", "actions", `{"toggleLight":{"forms":[{"href":"x"}]}}`), Meta: meta, Summary: []byte{99, 1, 2}}}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r2 := newRegistry(t, db, hub.RegistryOptions{})
	for i := range 4 {
		th, err := r2.Get(fmt.Sprintf("urn:t:%d", i))
		if err != nil || !th.Summary.HasAffordance("actions", "toggleLight") {
			t.Errorf("urn:t:%d after restart: %v %+v", i, err, th.Summary)
		}
	}
	if th, _ := r2.Get("urn:t:1"); th.Summary.Title != "Heater" || th.Meta.Presence.Status != hub.PresenceOnline {
		t.Errorf("patched Thing after restart: %q %q", th.Summary.Title, th.Meta.Presence.Status)
	}
	hits, err := r2.SearchText("toggle light", "", 10)
	if err != nil || len(hits) != 4 {
		t.Errorf("text search after restart: %+v %v", hits, err)
	}
	// urn:t:2's summary was rebuilt, urn:t:3's read back as stored (whose
	// filter a later process can use: TestBloomKeysAreStable).
	for id, title := range map[string]string{"urn:t:2": "Lamp 2", "urn:t:3": "Lamp 3"} {
		got, err := r2.SearchJSONPath(`$[?@.title=='` + title + `'].id`)
		if err != nil || len(got) != 1 || got[0] != id {
			t.Errorf("JSONPath for %s after restart: %v %v", id, got, err)
		}
	}
}
