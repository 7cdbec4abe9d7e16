package hub_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// putQueued writes n Things at once, each from its own goroutine and all
// queued behind a held commit, so they share batches: the quotas are
// checked in the write loop, on counts that include the batch so far.
func putQueued(t *testing.T, s *gatedStore, r *hub.Registry, n int, td func(i int) (string, []byte, hub.Origin)) (ok int, errs []error) {
	t.Helper()
	var ops []func() error
	for i := range n {
		id, raw, o := td(i)
		ops = append(ops, func() error { _, err := r.Put(context.Background(), id, raw, o); return err })
	}
	for _, err := range queueBehindGate(t, s, r, ops...)[1:] { // [0]: the blocker
		if err == nil {
			ok++
		} else {
			errs = append(errs, err)
		}
	}
	return ok, errs
}

func wantLimits(t *testing.T, errs []error, code, limit string) {
	t.Helper()
	for _, err := range errs {
		wantLimit(t, "refusal", err, code, limit)
	}
}

// TestQuotasHoldUnderConcurrentWrites: concurrent anonymous writes from
// one address never overshoot registry.maxThingsPerSource; another
// address and authenticated writers are not counted against it.
func TestQuotasHoldUnderConcurrentWrites(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{MaxThingsPerSource: 5})
	ok, errs := putQueued(t, s, r, 20, func(i int) (string, []byte, hub.Origin) {
		id := fmt.Sprintf("urn:q:%d", i)
		return id, testTD(id, "q"), hub.Origin{Source: hub.SourceMQTT, Addr: "192.0.2.1"}
	})
	if ok != 5 || len(errs) != 15 {
		t.Fatalf("%d accepted, %d refused; want 5 and 15", ok, len(errs))
	}
	wantLimits(t, errs, hub.EFULL, "registry.maxThingsPerSource")
	ctx := context.Background()
	if _, err := r.Put(ctx, "urn:q:other", testTD("urn:q:other", "o"), hub.Origin{Addr: "192.0.2.2"}); err != nil {
		t.Errorf("another address: %v", err)
	}
	if _, err := r.Put(ctx, "urn:q:admin", testTD("urn:q:admin", "a"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Errorf("authenticated writer: %v", err)
	}
	// Deleting one of the address's Things frees its place.
	things, _ := r.List(0, 0)
	var mine string
	for _, th := range things {
		if th.Meta.Anon == "192.0.2.1" {
			mine = th.ID
		}
	}
	if err := r.Delete(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(ctx, "urn:q:new", testTD("urn:q:new", "n"), hub.Origin{Addr: "192.0.2.1"}); err != nil {
		t.Errorf("after a delete: %v", err)
	}
	if _, err := r.Put(ctx, "urn:q:new2", testTD("urn:q:new2", "n"), hub.Origin{Addr: "192.0.2.1"}); hub.RefusalReason(err) != "registry.maxThingsPerSource" {
		t.Errorf("past the quota again: %v", err)
	}
}

// TestMaxBytesCountsDifferencesAndFailedCommits: registry.maxBytes bounds
// the stored documents; a replacement counts its size difference, and a
// failed commit gives back what its batch took.
func TestMaxBytesCountsDifferencesAndFailedCommits(t *testing.T) {
	td := func(id string, pad int) []byte { return testTD(id, strings.Repeat("x", pad)) }
	one := len(td("urn:b:0", 1000))
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{MaxBytes: int64(3*one + one/2)})
	ok, errs := putQueued(t, s, r, 10, func(i int) (string, []byte, hub.Origin) {
		id := fmt.Sprintf("urn:b:%d", i)
		return id, td(id, 1000), hub.Origin{}
	})
	if ok != 3 {
		t.Fatalf("%d accepted, want 3", ok)
	}
	wantLimits(t, errs, hub.EFULL, "registry.maxBytes")
	ctx := context.Background()
	things, _ := r.List(0, 0)
	id := things[0].ID
	if _, err := r.Put(ctx, id, td(id, 1000+one/3), hub.Origin{}); err != nil {
		t.Errorf("growing within the room left: %v", err)
	}
	if _, err := r.Put(ctx, id, td(id, 1000+one), hub.Origin{}); hub.RefusalReason(err) != "registry.maxBytes" {
		t.Errorf("growing past it: %v", err)
	}
	if _, err := r.Put(ctx, id, td(id, 10), hub.Origin{}); err != nil {
		t.Errorf("shrinking: %v", err)
	}
	s.fail.Store(true)
	if _, err := r.Put(ctx, "urn:b:new", td("urn:b:new", 1000), hub.Origin{}); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("put during failure: %v", err)
	}
	s.fail.Store(false)
	if _, err := r.Put(ctx, "urn:b:new", td("urn:b:new", 1000), hub.Origin{}); err != nil {
		t.Errorf("the failed commit kept its bytes: %v", err)
	}
}

// TestTDSizeLimitInRegistry: every write path refuses a document over
// MaxTDBytes, a merge patch's result too, naming registry.maxTDBytes.
func TestTDSizeLimitInRegistry(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{MaxTDBytes: 2000})
	ctx := context.Background()
	big := testTD("urn:s:a", strings.Repeat("x", 2000))
	if _, err := r.Put(ctx, "urn:s:a", big, hub.Origin{}); hub.RefusalReason(err) != "registry.maxTDBytes" || hub.ErrorCode(err) != hub.ETOOLARGE {
		t.Errorf("Put: %v", err)
	}
	if _, err := r.Create(ctx, []byte(`{"title":"`+strings.Repeat("x", 2000)+`"}`), hub.Origin{}); hub.RefusalReason(err) != "registry.maxTDBytes" {
		t.Errorf("Create: %v", err)
	}
	if _, err := r.Prepare(big); hub.RefusalReason(err) != "registry.maxTDBytes" {
		t.Errorf("Prepare: %v", err)
	}
	if _, err := r.Put(ctx, "urn:s:a", testTD("urn:s:a", "small"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Patch(ctx, "urn:s:a", []byte(`{"description":"`+strings.Repeat("y", 2000)+`"}`)); hub.RefusalReason(err) != "registry.maxTDBytes" {
		t.Errorf("Patch growing past the limit: %v", err)
	}
}

// TestQuotaCountsSurviveRestart: sizes and anonymous sources are stored
// with each Thing, so a restarted registry enforces the same quotas.
func TestQuotaCountsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	open := func(opts hub.RegistryOptions) (*store.DB, *hub.Registry) {
		db, err := store.Open(dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := hub.NewRegistry(db, opts)
		if err != nil {
			t.Fatal(err)
		}
		return db, r
	}
	opts := hub.RegistryOptions{MaxThingsPerSource: 2, MaxBytes: 4000}
	db, r := open(opts)
	ctx := context.Background()
	for i := range 2 {
		id := fmt.Sprintf("urn:r:%d", i)
		if _, err := r.Put(ctx, id, testTD(id, strings.Repeat("x", 1000)), hub.Origin{Addr: "192.0.2.1"}); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	db.Close()
	db, r = open(opts)
	defer db.Close()
	defer r.Close()
	if _, err := r.Put(ctx, "urn:r:2", testTD("urn:r:2", "x"), hub.Origin{Addr: "192.0.2.1"}); hub.RefusalReason(err) != "registry.maxThingsPerSource" {
		t.Errorf("per source after restart: %v", err)
	}
	if _, err := r.Put(ctx, "urn:r:3", testTD("urn:r:3", strings.Repeat("x", 2000)), hub.Origin{}); hub.RefusalReason(err) != "registry.maxBytes" {
		t.Errorf("bytes after restart: %v", err)
	}
}
