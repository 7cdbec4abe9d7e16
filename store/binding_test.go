package store

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	bolt "go.etcd.io/bbolt"
)

var bindT = time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)

func binding(id, did string, created time.Time) hub.Binding {
	return hub.Binding{ID: id, DID: did, Created: created, ProofValue: "z-" + did + "-" + created.Format(time.RFC3339), Since: bindT}
}

// loadBindings returns every binding LoadBindings reports, by id; it
// fails the test if one comes twice.
func loadBindings(t *testing.T, db *DB) map[string]hub.Binding {
	t.Helper()
	out := map[string]hub.Binding{}
	if err := db.LoadBindings(func(b hub.Binding) error {
		if _, dup := out[b.ID]; dup {
			t.Errorf("binding of %q loaded twice", b.ID)
		}
		out[b.ID] = b
		return nil
	}); err != nil {
		t.Fatalf("LoadBindings: %v", err)
	}
	return out
}

// placeOf says where the binding of id is stored: "record" (its Thing's
// thingmeta record), "bucket", "both" or "none".
func placeOf(t *testing.T, db *DB, id string) string {
	t.Helper()
	var inRecord, inBucket bool
	if err := db.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketThingMeta).Get([]byte(id)); v != nil {
			_, bind, _, err := splitMeta(v)
			if err != nil {
				return err
			}
			inRecord = bind != nil
		}
		if b := tx.Bucket(bucketBindings); b != nil {
			inBucket = b.Get([]byte(id)) != nil
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	switch {
	case inRecord && inBucket:
		return "both"
	case inRecord:
		return "record"
	case inBucket:
		return "bucket"
	}
	return "none"
}

// wantBindings checks the loaded bindings (their DID and Created) and
// where each is stored.
func wantBindings(t *testing.T, db *DB, want map[string]hub.Binding, places map[string]string) {
	t.Helper()
	got := loadBindings(t, db)
	if len(got) != len(want) {
		t.Errorf("loaded %d bindings, want %d: %+v", len(got), len(want), got)
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok || g.DID != w.DID || !g.Created.Equal(w.Created) || g.ProofValue != w.ProofValue || !g.Since.Equal(w.Since) {
			t.Errorf("binding of %q = %+v (found %v), want %+v", id, g, ok, w)
		}
	}
	for id, p := range places {
		if got := placeOf(t, db, id); got != p {
			t.Errorf("binding of %q is in %s, want %s", id, got, p)
		}
	}
}

// TestBindingKeptInTheThingsRecord: a binding committed with its Thing is
// stored in the Thing's record, not in a bucket of its own, and a
// presence change, a new document without a binding change (an admin's
// unsigned write) and a new proof all keep exactly one binding, with the
// Thing's summary, across a reopen.
func TestBindingKeptInTheThingsRecord(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	a, b := rec("urn:a"), rec("urn:b")
	a.Summary = []byte{1, 2, 3}
	ba := binding("urn:a", "did:key:zA", bindT)
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{a, b}, Bindings: []hub.Binding{ba}})
	wantBindings(t, db, map[string]hub.Binding{"urn:a": ba}, map[string]string{"urn:a": "record", "urn:b": "none"})

	presence := hub.ThingRecord{ID: "urn:a", Meta: a.Meta}
	presence.Meta.Presence.Status = hub.PresenceOffline
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{presence}})
	again := a
	again.Raw = []byte(`{"id":"urn:a","title":"by an admin"}`)
	again.Summary = []byte{4, 5}
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{again}})
	wantBindings(t, db, map[string]hub.Binding{"urn:a": ba}, map[string]string{"urn:a": "record"})

	ba2 := ba
	ba2.Created, ba2.ProofValue = bindT.Add(time.Hour), "z-next"
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{again}, Bindings: []hub.Binding{ba2}})
	check := func(db *DB) {
		t.Helper()
		wantBindings(t, db, map[string]hub.Binding{"urn:a": ba2}, map[string]string{"urn:a": "record", "urn:b": "none"})
		got := loadAll(t, db)
		if len(got) != 2 || !bytes.Equal(got[0].Summary, again.Summary) || got[0].Raw != nil || got[0].Meta.Presence.Status != hub.PresenceOnline {
			t.Errorf("things loaded as %+v", got)
		}
		if raw, err := db.ThingRaw("urn:a"); err != nil || !bytes.Equal(raw, again.Raw) {
			t.Errorf("ThingRaw(urn:a) = %q, %v", raw, err)
		}
	}
	check(db)
	db.Close()
	check(openT(t, dir, Options{}))
}

// TestBindingOutlivesItsDeletedThing: deleting (or purging) a Thing moves
// its binding to the bucket in the same commit; registering the Thing
// again moves it back into the record, one binding throughout.
func TestBindingOutlivesItsDeletedThing(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	bg := binding("urn:gone", "did:key:zG", bindT)
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:gone")}, Bindings: []hub.Binding{bg}})
	commit(t, db, &hub.Batch{Deletes: []string{"urn:gone"}})
	wantBindings(t, db, map[string]hub.Binding{"urn:gone": bg}, map[string]string{"urn:gone": "bucket"})
	db.Close()
	db = openT(t, dir, Options{})
	wantBindings(t, db, map[string]hub.Binding{"urn:gone": bg}, map[string]string{"urn:gone": "bucket"})
	if got := loadAll(t, db); len(got) != 0 {
		t.Errorf("deleted Thing loaded: %+v", got)
	}

	// Its owner registers it again with a newer proof, or an admin
	// without one (the binding as it was).
	bg2 := bg
	bg2.Created = bindT.Add(time.Minute)
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:gone")}, Bindings: []hub.Binding{bg2}})
	wantBindings(t, db, map[string]hub.Binding{"urn:gone": bg2}, map[string]string{"urn:gone": "record"})
	commit(t, db, &hub.Batch{Deletes: []string{"urn:gone"}})
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:gone")}})
	wantBindings(t, db, map[string]hub.Binding{"urn:gone": bg2}, map[string]string{"urn:gone": "record"})
	db.Close()
	db = openT(t, dir, Options{})
	wantBindings(t, db, map[string]hub.Binding{"urn:gone": bg2}, map[string]string{"urn:gone": "record"})
}

// TestAdminBindingChanges: an admin's re-bind or unbind of a registered
// Thing (no document written) changes its record and keeps its metadata
// and summary; of an unregistered id, the bucket; a delete and a binding
// change of one id in one batch leave the change in the bucket. A backup
// restores them all.
func TestAdminBindingChanges(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	a := rec("urn:a")
	a.Summary = []byte{9, 9}
	ba := binding("urn:a", "did:key:zA", bindT)
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{a, rec("urn:d"), rec("urn:e")}, Bindings: []hub.Binding{ba,
		binding("urn:d", "did:key:zD", bindT), binding("urn:e", "did:key:zE", bindT)}})

	// Re-bind a registered Thing, and an id not registered.
	rebound := hub.Binding{ID: "urn:a", DID: "did:key:zRotated", Since: bindT.Add(time.Hour)}
	reserved := hub.Binding{ID: "urn:r", DID: "did:key:zR", Since: bindT.Add(time.Hour)}
	commit(t, db, &hub.Batch{Bindings: []hub.Binding{rebound, reserved}})
	// Delete a Thing and re-bind it in one batch; delete another and
	// unbind it in one batch.
	dRebound := hub.Binding{ID: "urn:d", DID: "did:key:zD2", Since: bindT.Add(2 * time.Hour)}
	commit(t, db, &hub.Batch{Deletes: []string{"urn:d", "urn:e"}, Bindings: []hub.Binding{dRebound}, DeleteBindings: []string{"urn:e"}})
	wantBindings(t, db, map[string]hub.Binding{"urn:a": rebound, "urn:r": reserved, "urn:d": dRebound},
		map[string]string{"urn:a": "record", "urn:r": "bucket", "urn:d": "bucket", "urn:e": "none"})

	// The reserved id registers: its binding moves into the record.
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:r")}})
	// Unbind the registered Thing.
	commit(t, db, &hub.Batch{DeleteBindings: []string{"urn:a"}})
	check := func(db *DB) {
		t.Helper()
		wantBindings(t, db, map[string]hub.Binding{"urn:r": reserved, "urn:d": dRebound},
			map[string]string{"urn:a": "none", "urn:r": "record", "urn:d": "bucket"})
		got := loadAll(t, db)
		if len(got) != 2 || got[0].ID != "urn:a" || !bytes.Equal(got[0].Summary, a.Summary) || !got[0].Meta.Created.Equal(t0) || got[0].Meta.TTL != 60 {
			t.Errorf("things loaded as %+v", got)
		}
	}
	check(db)
	// A backup holds both places: restored, it loads the same.
	var snap bytes.Buffer
	if _, err := db.Backup(&snap); err != nil {
		t.Fatal(err)
	}
	restored := t.TempDir()
	if err := os.WriteFile(filepath.Join(restored, FileName), snap.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	check(openT(t, restored, Options{}))
	db.Close()
	check(openT(t, dir, Options{}))
}

// TestFailedCommitMovesNoBinding: a commit that fails (here a stale event
// seq, checked last) leaves every binding where it was: the moves are in
// bbolt's one transaction.
func TestFailedCommitMovesNoBinding(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	ba, bb := binding("urn:a", "did:key:zA", bindT), binding("urn:b", "did:key:zB", bindT)
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:a")}, Bindings: []hub.Binding{ba, bb},
		Events: []hub.Event{ev(5, hub.EventCreated, "urn:a")}})
	err := db.Commit(&hub.Batch{Deletes: []string{"urn:a"}, Puts: []hub.ThingRecord{rec("urn:b")},
		Events: []hub.Event{ev(5, hub.EventDeleted, "urn:a")}})
	if err == nil {
		t.Fatal("a commit with a stale seq succeeded")
	}
	wantBindings(t, db, map[string]hub.Binding{"urn:a": ba, "urn:b": bb}, map[string]string{"urn:a": "record", "urn:b": "bucket"})
	if got := loadAll(t, db); len(got) != 1 || got[0].ID != "urn:a" {
		t.Errorf("things after the failed commit: %+v", got)
	}
}

// TestSchema1StoreLoads: a store written by the previous layout (schema 1:
// every binding in the bindings bucket) loads every binding, is marked
// schema 2, and its bindings move as their Things are written, deleted
// or re-bound. testdata/schema1-hub.db.gz was written by commit 15855a9's
// store: urn:a (registered, bound, with a summary), urn:b (registered,
// unbound), urn:gone (bound, its Thing deleted), urn:reserved (bound by an
// admin, never registered), events 1–5.
func TestSchema1StoreLoads(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(filepath.Join("testdata", "schema1-hub.db.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	ba := hub.Binding{ID: "urn:a", DID: "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", Created: created,
		ProofValue: "z3FXQjecWufY46yg5abdVZsXqLhxhueuSoZgNSARiKBk9czhSePTFehP8c3PGfb6a22gkfUKxTzpJkMzCP1qmSTNe", Since: created}
	bg := hub.Binding{ID: "urn:gone", DID: "did:key:z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw", Created: created,
		ProofValue: "z4oey5q2M3XKaxup3tmzN4DRFTLVqpLMweBrSxMY2xHX5XTYVQeVbY8nQAVHMrXFkXJpmEcqdoDwLWxaqA3Q1geV6", Since: created}
	br := hub.Binding{ID: "urn:reserved", DID: "did:key:z6MkjchhfUsD6mmvni8mCdXHw216Xrm9bQe2mBH1P5RDjVJG", Since: created.Add(time.Hour)}
	all := map[string]hub.Binding{"urn:a": ba, "urn:gone": bg, "urn:reserved": br}

	db := openT(t, dir, Options{})
	wantBindings(t, db, all, map[string]string{"urn:a": "bucket", "urn:b": "none", "urn:gone": "bucket", "urn:reserved": "bucket"})
	if got := loadAll(t, db); len(got) != 2 || got[0].ID != "urn:a" || !bytes.Equal(got[0].Summary, []byte{1, 2, 3}) || got[1].ID != "urn:b" {
		t.Errorf("things loaded as %+v", got)
	}
	if last, err := db.LastSeq(); err != nil || last != 5 {
		t.Errorf("LastSeq = %d, %v", last, err)
	}
	var schema uint64
	if err := db.db.View(func(tx *bolt.Tx) error {
		schema = getU64(tx.Bucket(bucketMeta).Get(keySchema))
		return nil
	}); err != nil || schema != SchemaVersion {
		t.Errorf("schema after open = %d, %v; want %d", schema, err, SchemaVersion)
	}

	// A presence change of urn:a moves its binding into the record;
	// urn:gone registers again (into the record); urn:b's Thing is
	// deleted (nothing to keep); urn:reserved is unbound.
	presence := hub.ThingRecord{ID: "urn:a", Meta: rec("urn:a").Meta}
	presence.Meta.Presence.Status = hub.PresenceOffline
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{presence, rec("urn:gone")}, Deletes: []string{"urn:b"}, DeleteBindings: []string{"urn:reserved"}})
	delete(all, "urn:reserved")
	wantBindings(t, db, all, map[string]string{"urn:a": "record", "urn:gone": "record", "urn:b": "none", "urn:reserved": "none"})
	// A delete, or an unbind, of a registered Thing whose binding is
	// still in the bucket: fresh copies of the fixture.
	db.Close()
	if err := os.WriteFile(filepath.Join(dir, FileName), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db = openT(t, dir, Options{})
	// A delete of a Thing whose binding is still in the bucket keeps it.
	commit(t, db, &hub.Batch{Deletes: []string{"urn:a"}})
	wantBindings(t, db, map[string]hub.Binding{"urn:a": ba, "urn:gone": bg, "urn:reserved": br}, map[string]string{"urn:a": "bucket"})
	db.Close()
	if err := os.WriteFile(filepath.Join(dir, FileName), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db = openT(t, dir, Options{})
	commit(t, db, &hub.Batch{DeleteBindings: []string{"urn:a"}})
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:a")}, Bindings: []hub.Binding{binding("urn:b", "did:key:zB", bindT)}})
	commit(t, db, &hub.Batch{Deletes: []string{"urn:b"}})
	wantBindings(t, db, map[string]hub.Binding{"urn:gone": bg, "urn:reserved": br, "urn:b": binding("urn:b", "did:key:zB", bindT)},
		map[string]string{"urn:a": "none", "urn:b": "bucket", "urn:gone": "bucket", "urn:reserved": "bucket"})
	if got := loadAll(t, db); len(got) != 1 || got[0].ID != "urn:a" || got[0].Summary != nil {
		t.Errorf("things loaded as %+v", got)
	}
}

// TestCorruptBindingInRecord: a record whose binding part is cut short or
// empty fails loading and writing (with the Thing's id) rather than losing
// the binding.
func TestCorruptBindingInRecord(t *testing.T) {
	for name, mangle := range map[string]func(meta, bind []byte) []byte{
		"cut": func(meta, bind []byte) []byte {
			return joinMeta(meta, bind, nil)[:len(meta)+len(bind)-3]
		},
		"empty": func(meta, _ []byte) []byte {
			v := binary.AppendUvarint([]byte{metaWithBinding}, uint64(len(meta)))
			return append(append(v, meta...), 0)
		},
	} {
		db := openT(t, t.TempDir(), Options{})
		commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:a")}, Bindings: []hub.Binding{binding("urn:a", "did:key:zA", bindT)}})
		if err := db.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketThingMeta)
			v := b.Get([]byte("urn:a"))
			meta, bind, _, err := splitMeta(v)
			if err != nil || v[0] != metaWithBinding {
				t.Fatalf("record %q: %v", v, err)
			}
			return b.Put([]byte("urn:a"), mangle(bytes.Clone(meta), bytes.Clone(bind)))
		}); err != nil {
			t.Fatal(err)
		}
		err := db.LoadBindings(func(hub.Binding) error { return nil })
		if err == nil || !strings.Contains(err.Error(), `thing "urn:a": corrupt metadata record`) {
			t.Errorf("%s: LoadBindings = %v", name, err)
		}
		for what, b := range map[string]*hub.Batch{
			"delete":   {Deletes: []string{"urn:a"}},
			"presence": {Puts: []hub.ThingRecord{{ID: "urn:a", Meta: rec("urn:a").Meta}}},
			"unbind":   {DeleteBindings: []string{"urn:a"}},
		} {
			if err := db.Commit(b); err == nil || !strings.Contains(err.Error(), `thing "urn:a": corrupt metadata record`) {
				t.Errorf("%s: a %s of a record the store cannot read: %v", name, what, err)
			}
		}
	}
}
