package store

import (
	"slices"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// pendingIDs lists the outbox's ops as "id" or "-id" (a deletion), in order.
func pendingIDs(t *testing.T, o *Outbox) []string {
	t.Helper()
	ops, err := o.Pending(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, op := range ops {
		if op.Delete {
			out = append(out, "-"+op.ID)
		} else {
			out = append(out, op.ID)
		}
	}
	return out
}

func claimedIDs(t *testing.T, o *Outbox) []string {
	t.Helper()
	var out []string
	if err := o.Claimed(func(id string) error { out = append(out, id); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func enqueueT(t *testing.T, o *Outbox, at time.Time, changes ...hub.OutboxChange) {
	t.Helper()
	if err := o.Enqueue(at, changes...); err != nil {
		t.Fatal(err)
	}
}

func TestOutboxCoalescesInOrder(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	o := db.Outbox("http://remote")
	if got := pendingIDs(t, o); len(got) != 0 {
		t.Fatalf("new outbox holds %v", got)
	}
	enqueueT(t, o, t0, hub.OutboxChange{ID: "urn:a"}, hub.OutboxChange{ID: "urn:b"})
	enqueueT(t, o, t0.Add(time.Second), hub.OutboxChange{ID: "urn:c"})
	// Updates of a and b coalesce in place; b's deletion replaces its
	// update; c's delete-then-create is an update again.
	enqueueT(t, o, t0.Add(2*time.Second), hub.OutboxChange{ID: "urn:a"}, hub.OutboxChange{ID: "urn:b", Delete: true},
		hub.OutboxChange{ID: "urn:c", Delete: true}, hub.OutboxChange{ID: "urn:c"}, hub.OutboxChange{ID: "urn:a"})
	if got, want := pendingIDs(t, o), []string{"urn:a", "-urn:b", "urn:c"}; !slices.Equal(got, want) {
		t.Fatalf("pending = %v, want %v", got, want)
	}
	depth, oldest, err := o.Stats()
	if err != nil || depth != 3 || !oldest.Equal(t0) {
		t.Fatalf("Stats = %d, %v, %v; want 3, %v (the first enqueue of the oldest op)", depth, oldest, err, t0)
	}
	// Pending pages from a position.
	ops, _ := o.Pending(0, 2)
	if len(ops) != 2 {
		t.Fatalf("Pending(0, 2) = %d ops", len(ops))
	}
	rest, _ := o.Pending(ops[1].Pos, 0)
	if len(rest) != 1 || rest[0].ID != "urn:c" {
		t.Fatalf("Pending after %d = %+v, want urn:c", ops[1].Pos, rest)
	}
	if got, want := claimedIDs(t, o), []string{"urn:a", "urn:b", "urn:c"}; !slices.Equal(got, want) {
		t.Fatalf("claimed = %v, want %v (b is released only when its deletion is sent)", got, want)
	}
}

func TestOutboxDoneKeepsAChangeMadeWhileSending(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	o := db.Outbox("r")
	enqueueT(t, o, t0, hub.OutboxChange{ID: "urn:a"}, hub.OutboxChange{ID: "urn:b"})
	ops, _ := o.Pending(0, 0)
	sent := ops[0]
	// urn:a changes again while its op is on the wire: the ack of the
	// older version must not remove the newer one.
	enqueueT(t, o, t0.Add(time.Second), hub.OutboxChange{ID: "urn:a", Delete: true})
	if err := o.Done(hub.OutboxAck{ID: sent.ID, Version: sent.Version, Release: true}); err != nil {
		t.Fatal(err)
	}
	if got, want := pendingIDs(t, o), []string{"-urn:a", "urn:b"}; !slices.Equal(got, want) {
		t.Fatalf("pending = %v, want %v", got, want)
	}
	if got, want := claimedIDs(t, o), []string{"urn:a", "urn:b"}; !slices.Equal(got, want) {
		t.Fatalf("claimed = %v, want %v (a stale ack releases nothing)", got, want)
	}
	ops, _ = o.Pending(0, 0)
	if err := o.Done(hub.OutboxAck{ID: ops[0].ID, Version: ops[0].Version, Release: true},
		hub.OutboxAck{ID: ops[1].ID, Version: ops[1].Version}); err != nil {
		t.Fatal(err)
	}
	// Done is idempotent: a repeat changes nothing.
	if err := o.Done(hub.OutboxAck{ID: ops[1].ID, Version: ops[1].Version}); err != nil {
		t.Fatal(err)
	}
	if got := pendingIDs(t, o); len(got) != 0 {
		t.Fatalf("pending = %v, want none", got)
	}
	if got, want := claimedIDs(t, o), []string{"urn:b"}; !slices.Equal(got, want) {
		t.Fatalf("claimed = %v, want %v", got, want)
	}
	if depth, oldest, _ := o.Stats(); depth != 0 || !oldest.IsZero() {
		t.Fatalf("Stats = %d, %v; want 0 and zero time", depth, oldest)
	}
}

func TestOutboxSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := db.Outbox("r")
	for i, id := range []string{"urn:x", "urn:y", "urn:z"} {
		enqueueT(t, o, t0.Add(time.Duration(i)*time.Second), hub.OutboxChange{ID: id})
	}
	enqueueT(t, o, t0.Add(time.Hour), hub.OutboxChange{ID: "urn:y", Delete: true})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openT(t, dir, Options{})
	o = db.Outbox("r")
	if got, want := pendingIDs(t, o), []string{"urn:x", "-urn:y", "urn:z"}; !slices.Equal(got, want) {
		t.Fatalf("after reopen pending = %v, want %v", got, want)
	}
	// New ops go after the old ones; positions are not reused.
	enqueueT(t, o, t0.Add(2*time.Hour), hub.OutboxChange{ID: "urn:w"})
	if got, want := pendingIDs(t, o), []string{"urn:x", "-urn:y", "urn:z", "urn:w"}; !slices.Equal(got, want) {
		t.Fatalf("pending = %v, want %v", got, want)
	}
	// Another outbox's name is another queue.
	if got := pendingIDs(t, db.Outbox("other")); len(got) != 0 {
		t.Fatalf("outbox other holds %v", got)
	}
	if err := o.Enqueue(t0, hub.OutboxChange{}); err == nil {
		t.Fatal("a change without id was accepted")
	}
	if got := pendingIDs(t, o); len(got) != 4 {
		t.Fatalf("a refused enqueue changed the outbox: %v", got)
	}
}
