package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	bolt "go.etcd.io/bbolt"
)

func openT(t *testing.T, dir string, opts Options) *DB {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func rec(id string) hub.ThingRecord {
	return hub.ThingRecord{
		ID:  id,
		Raw: []byte(fmt.Sprintf(`{"id":%q,"title":"T"}`, id)),
		Meta: hub.ThingMeta{
			Created:  t0,
			Modified: t0,
			TTL:      60,
			Origin:   hub.Origin{Source: hub.SourceHTTP},
			Presence: hub.Presence{Status: hub.PresenceOnline, Since: t0},
		},
	}
}

func ev(seq uint64, typ hub.EventType, id string) hub.Event {
	return hub.Event{Seq: seq, Type: typ, ID: id, Time: t0}
}

func loadAll(t *testing.T, db *DB) []hub.ThingRecord {
	t.Helper()
	var out []hub.ThingRecord
	if err := db.LoadThings(func(r hub.ThingRecord) error { out = append(out, r); return nil }); err != nil {
		t.Fatalf("LoadThings: %v", err)
	}
	return out
}

func eventsAfter(t *testing.T, db *DB, seq uint64) []hub.Event {
	t.Helper()
	var out []hub.Event
	if err := db.EventsAfter(seq, func(e hub.Event) error { out = append(out, e); return nil }); err != nil {
		t.Fatalf("EventsAfter: %v", err)
	}
	return out
}

func commit(t *testing.T, db *DB, b *hub.Batch) {
	t.Helper()
	if err := db.Commit(b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func TestOpenCreatesDirAndReopenKeepsData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, want 0700", fi.Mode().Perm())
	}
	fi, err = os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, want 0600", fi.Mode().Perm())
	}
	id := db.HubID()
	if len(id) != 36 || id[14] != '4' {
		t.Errorf("HubID = %q, want a UUID v4", id)
	}
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:a")}, Events: []hub.Event{ev(1, hub.EventCreated, "urn:a")}})
	if db.Size() <= 0 {
		t.Errorf("Size = %d", db.Size())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openT(t, dir, Options{})
	if db.HubID() != id {
		t.Errorf("HubID after reopen = %q, want %q", db.HubID(), id)
	}
	got := loadAll(t, db)
	if len(got) != 1 || got[0].ID != "urn:a" || !bytes.Equal(got[0].Raw, rec("urn:a").Raw) {
		t.Fatalf("things after reopen = %+v", got)
	}
	if !got[0].Meta.Created.Equal(t0) || got[0].Meta.Presence.Status != hub.PresenceOnline || got[0].Meta.TTL != 60 {
		t.Errorf("meta after reopen = %+v", got[0].Meta)
	}
	if last, _ := db.LastSeq(); last != 1 {
		t.Errorf("LastSeq after reopen = %d, want 1", last)
	}
}

func TestCommitPutsDeletesEvents(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	if last, err := db.LastSeq(); err != nil || last != 0 {
		t.Fatalf("LastSeq on empty = %d, %v", last, err)
	}
	commit(t, db, &hub.Batch{
		Puts: []hub.ThingRecord{rec("urn:c"), rec("urn:a"), rec("urn:b")},
		Events: []hub.Event{
			ev(1, hub.EventCreated, "urn:c"),
			ev(2, hub.EventCreated, "urn:a"),
			ev(3, hub.EventCreated, "urn:b"),
		},
	})
	var ids []string
	for _, r := range loadAll(t, db) {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "urn:a,urn:b,urn:c" {
		t.Errorf("LoadThings order = %v", ids)
	}

	upd := rec("urn:a")
	upd.Raw = []byte(`{"id":"urn:a","title":"new"}`)
	commit(t, db, &hub.Batch{
		Puts:    []hub.ThingRecord{upd},
		Deletes: []string{"urn:b", "urn:missing"},
		Events:  []hub.Event{ev(4, hub.EventUpdated, "urn:a"), ev(5, hub.EventDeleted, "urn:b")},
	})
	raw, err := db.ThingRaw("urn:a")
	if err != nil || string(raw) != string(upd.Raw) {
		t.Errorf("ThingRaw(urn:a) = %q, %v", raw, err)
	}
	if _, err := db.ThingRaw("urn:b"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("ThingRaw(deleted) err = %v", err)
	}
	if n := len(loadAll(t, db)); n != 2 {
		t.Errorf("things = %d, want 2", n)
	}
	if last, _ := db.LastSeq(); last != 5 {
		t.Errorf("LastSeq = %d, want 5", last)
	}
	// Empty and nil batches are no-ops.
	commit(t, db, &hub.Batch{})
	commit(t, db, nil)
}

func TestCommitRejectsStaleSeqAtomically(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	commit(t, db, &hub.Batch{Events: []hub.Event{ev(1, hub.EventCreated, "urn:x")}})
	err := db.Commit(&hub.Batch{
		Puts:   []hub.ThingRecord{rec("urn:y")},
		Events: []hub.Event{ev(2, hub.EventCreated, "urn:y"), ev(2, hub.EventUpdated, "urn:y")},
	})
	if err == nil {
		t.Fatal("Commit with repeated seq succeeded")
	}
	if _, err := db.ThingRaw("urn:y"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("put of failed batch applied: %v", err)
	}
	if last, _ := db.LastSeq(); last != 1 {
		t.Errorf("LastSeq = %d, want 1", last)
	}
	if err := db.Commit(&hub.Batch{Events: []hub.Event{ev(1, hub.EventCreated, "urn:z")}}); err == nil {
		t.Error("Commit reusing seq 1 succeeded")
	}
}

func TestEventLogTrimmedLastSeqKept(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{EventLogSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	for i := range 7 { // 7 batches of 4 events = 28 events
		var b hub.Batch
		for range 4 {
			seq++
			b.Events = append(b.Events, ev(seq, hub.EventUpdated, fmt.Sprintf("urn:%d", i)))
		}
		commit(t, db, &b)
	}
	evs := eventsAfter(t, db, 0)
	if len(evs) != 10 || evs[0].Seq != 19 || evs[9].Seq != 28 {
		t.Fatalf("log = %d events, first %d", len(evs), evs[0].Seq)
	}
	if last, _ := db.LastSeq(); last != 28 {
		t.Errorf("LastSeq = %d, want 28", last)
	}
	db.Close()

	// A smaller bound on reopen takes effect at the next commit; LastSeq
	// survives even when every earlier event is trimmed.
	db = openT(t, dir, Options{EventLogSize: 2})
	if last, _ := db.LastSeq(); last != 28 {
		t.Errorf("LastSeq after reopen = %d, want 28", last)
	}
	commit(t, db, &hub.Batch{Events: []hub.Event{ev(29, hub.EventDeleted, "urn:0")}})
	evs = eventsAfter(t, db, 0)
	if len(evs) != 2 || evs[0].Seq != 28 || evs[1].Seq != 29 {
		t.Errorf("log after shrink = %+v", evs)
	}
}

func TestEventsAfter(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	td := json.RawMessage(`{"id":"urn:a"}`)
	patch := json.RawMessage(`{"id":"urn:a","title":"x"}`)
	created := ev(1, hub.EventCreated, "urn:a")
	created.TD = td
	updated := ev(2, hub.EventUpdated, "urn:a")
	updated.Patch = patch
	commit(t, db, &hub.Batch{Events: []hub.Event{created, updated}})
	commit(t, db, &hub.Batch{Events: []hub.Event{ev(3, hub.EventDeleted, "urn:a")}})

	all := eventsAfter(t, db, 0)
	if len(all) != 3 {
		t.Fatalf("EventsAfter(0) = %d events", len(all))
	}
	for i, e := range all {
		if e.Seq != uint64(i+1) {
			t.Errorf("event %d seq = %d", i, e.Seq)
		}
	}
	if string(all[0].TD) != string(td) || all[0].Type != hub.EventCreated || !all[0].Time.Equal(t0) {
		t.Errorf("created event = %+v", all[0])
	}
	if string(all[1].Patch) != string(patch) {
		t.Errorf("patch = %s", all[1].Patch)
	}
	if got := eventsAfter(t, db, 2); len(got) != 1 || got[0].Seq != 3 {
		t.Errorf("EventsAfter(2) = %+v", got)
	}
	if got := eventsAfter(t, db, 3); len(got) != 0 {
		t.Errorf("EventsAfter(3) = %+v", got)
	}
	if got := eventsAfter(t, db, ^uint64(0)); len(got) != 0 {
		t.Errorf("EventsAfter(max) = %+v", got)
	}
	stop := errors.New("stop")
	n := 0
	err := db.EventsAfter(0, func(hub.Event) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("EventsAfter did not stop on fn error: n=%d err=%v", n, err)
	}
}

func TestLoadThingsManyChunks(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	const n = 2*loadChunk + 3
	var b hub.Batch
	for i := range n {
		b.Puts = append(b.Puts, rec(fmt.Sprintf("urn:%05d", i)))
	}
	commit(t, db, &b)
	got := loadAll(t, db)
	if len(got) != n {
		t.Fatalf("LoadThings = %d, want %d", len(got), n)
	}
	for i, r := range got {
		if want := fmt.Sprintf("urn:%05d", i); r.ID != want {
			t.Fatalf("record %d = %q, want %q", i, r.ID, want)
		}
	}
	stop := errors.New("stop")
	if err := db.LoadThings(func(hub.ThingRecord) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("LoadThings fn error = %v", err)
	}
}

func TestThingRawNotFound(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	_, err := db.ThingRaw("urn:nope")
	if code := hub.ErrorCode(err); code != hub.ENOTFOUND {
		t.Errorf("ErrorCode = %q (%v), want %q", code, err, hub.ENOTFOUND)
	}
}

func TestThingRawIsACopy(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:a")}})
	raw, _ := db.ThingRaw("urn:a")
	raw[0] = 'X'
	again, _ := db.ThingRaw("urn:a")
	if again[0] != '{' {
		t.Error("ThingRaw returned memory shared with the store")
	}
}

func TestSecondOpenLocked(t *testing.T) {
	dir := t.TempDir()
	openT(t, dir, Options{})
	start := time.Now()
	db2, err := Open(dir, Options{LockTimeout: 100 * time.Millisecond})
	if err == nil {
		db2.Close()
		t.Fatal("second Open succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Errorf("err = %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "in use by another lmos-hub process") {
		t.Errorf("message = %q", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("second Open took %v", d)
	}
}

func TestSchemaTooNew(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	if err := db.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchema, u64(SchemaVersion+1))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db2, err := Open(dir, Options{}); err == nil {
		db2.Close()
		t.Fatal("Open of newer schema succeeded")
	}
}

func TestTokens(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	if ts, err := db.Tokens(); err != nil || len(ts) != 0 {
		t.Fatalf("Tokens on empty = %v, %v", ts, err)
	}
	a := hub.Token{ID: "b-id", Name: "ci", Hash: "h1", Created: t0}
	b := hub.Token{ID: "a-id", Name: "ops", Hash: "h2", Created: t0}                 // same time: ID breaks the tie
	c := hub.Token{ID: "0-id", Name: "old", Hash: "h3", Created: t0.Add(-time.Hour)} // oldest
	for _, tok := range []hub.Token{a, b, c} {
		if err := db.PutToken(tok); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.TokenByHash("h1")
	if err != nil || got.ID != "b-id" || got.Name != "ci" || !got.Created.Equal(t0) || !got.Revoked.IsZero() {
		t.Errorf("TokenByHash(h1) = %+v, %v", got, err)
	}
	if _, err := db.TokenByHash("nope"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("TokenByHash(unknown) err = %v", err)
	}
	ts, _ := db.Tokens()
	var ids []string
	for _, tok := range ts {
		ids = append(ids, tok.ID)
	}
	if strings.Join(ids, ",") != "0-id,a-id,b-id" {
		t.Errorf("Tokens order = %v", ids)
	}

	// Revoke by putting again.
	a.Revoked = t0.Add(time.Minute)
	if err := db.PutToken(a); err != nil {
		t.Fatal(err)
	}
	got, _ = db.TokenByHash("h1")
	if !got.Revoked.Equal(a.Revoked) {
		t.Errorf("revoked = %v, want %v", got.Revoked, a.Revoked)
	}
	if ts, _ := db.Tokens(); len(ts) != 3 {
		t.Errorf("Tokens after revoke = %d", len(ts))
	}

	// Replacing a token's hash drops the old index entry.
	b.Hash = "h2new"
	if err := db.PutToken(b); err != nil {
		t.Fatal(err)
	}
	if _, err := db.TokenByHash("h2"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("old hash still resolves: %v", err)
	}
	if got, err := db.TokenByHash("h2new"); err != nil || got.ID != "a-id" {
		t.Errorf("TokenByHash(h2new) = %+v, %v", got, err)
	}
	// A hash owned by another token is a conflict.
	if err := db.PutToken(hub.Token{ID: "x", Hash: "h1", Created: t0}); hub.ErrorCode(err) != hub.ECONFLICT {
		t.Errorf("duplicate hash err = %v", err)
	}
	if err := db.PutToken(hub.Token{Name: "no id"}); hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("empty token err = %v", err)
	}
}

func TestBackup(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	commit(t, db, &hub.Batch{
		Puts:   []hub.ThingRecord{rec("urn:a"), rec("urn:b")},
		Events: []hub.Event{ev(1, hub.EventCreated, "urn:a"), ev(2, hub.EventCreated, "urn:b")},
	})
	if err := db.PutToken(hub.Token{ID: "t", Hash: "h", Created: t0}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := db.Backup(&buf)
	if err != nil || n != int64(buf.Len()) || n == 0 {
		t.Fatalf("Backup = %d, %v (buffer %d)", n, err, buf.Len())
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	restored := openT(t, dir, Options{})
	if restored.HubID() != db.HubID() {
		t.Errorf("restored HubID = %q, want %q", restored.HubID(), db.HubID())
	}
	if got := loadAll(t, restored); len(got) != 2 || got[0].ID != "urn:a" || got[1].ID != "urn:b" {
		t.Errorf("restored things = %+v", got)
	}
	if last, _ := restored.LastSeq(); last != 2 {
		t.Errorf("restored LastSeq = %d", last)
	}
	if _, err := restored.TokenByHash("h"); err != nil {
		t.Errorf("restored token: %v", err)
	}
}

// benchDoc is a ~2.5 KB Thing Description.
func benchDoc(id string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":"Lamp","securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc","properties":{`, id)
	for i := range 18 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"prop%02d":{"type":"number","readOnly":true,"forms":[{"href":"https://lamp.example.com/properties/prop%02d","op":["readproperty"]}]}`, i, i)
	}
	b.WriteString(`}}`)
	return []byte(b.String())
}

func benchCommit(b *testing.B, perCommit int) {
	db, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	docs := make([][]byte, 1000)
	for i := range docs {
		docs[i] = benchDoc(fmt.Sprintf("urn:dev:bench:%04d", i))
	}
	r := rec("x")
	seq := uint64(0)
	b.SetBytes(int64(len(docs[0]) * perCommit))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		batch := &hub.Batch{
			Puts:   make([]hub.ThingRecord, 0, perCommit),
			Events: make([]hub.Event, 0, perCommit),
		}
		for j := range perCommit {
			k := (i*perCommit + j) % len(docs)
			seq++
			r.ID = fmt.Sprintf("urn:dev:bench:%04d", k)
			r.Raw = docs[k]
			batch.Puts = append(batch.Puts, r)
			batch.Events = append(batch.Events, hub.Event{Seq: seq, Type: hub.EventUpdated, ID: r.ID, Time: t0, Patch: json.RawMessage(`{"title":"Lamp 2"}`)})
		}
		if err := db.Commit(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommit is one Put and one Event per durable commit.
func BenchmarkCommit(b *testing.B) { benchCommit(b, 1) }

// BenchmarkCommitBatch64 is 64 Puts and Events per durable commit.
func BenchmarkCommitBatch64(b *testing.B) { benchCommit(b, 64) }

func TestPing(t *testing.T) {
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("ping open store: %v", err)
	}
	db.Close()
	if err := db.Ping(); err == nil {
		t.Fatal("ping of a closed store succeeded")
	}
}

// TestSummaryKeptWithMetadata: a record's summary comes back from
// LoadThings instead of its document, survives metadata-only updates, and
// metadata written without one (older stores) still loads with Raw.
func TestSummaryKeptWithMetadata(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	a, b := rec("urn:a"), rec("urn:b")
	a.Summary = []byte{1, 2, 3, 0, '{'}
	if err := db.Commit(&hub.Batch{Puts: []hub.ThingRecord{a, b}}); err != nil {
		t.Fatal(err)
	}
	// A presence change carries no Raw and no Summary.
	presence := hub.ThingRecord{ID: "urn:a", Meta: a.Meta}
	presence.Meta.Presence.Status = hub.PresenceOffline
	if err := db.Commit(&hub.Batch{Puts: []hub.ThingRecord{presence}}); err != nil {
		t.Fatal(err)
	}
	check := func(db *DB) {
		t.Helper()
		got := loadAll(t, db)
		if len(got) != 2 {
			t.Fatalf("loaded %d records", len(got))
		}
		if !bytes.Equal(got[0].Summary, a.Summary) || got[0].Raw != nil || got[0].Meta.Presence.Status != hub.PresenceOffline {
			t.Errorf("urn:a loaded as summary %v raw %q presence %q", got[0].Summary, got[0].Raw, got[0].Meta.Presence.Status)
		}
		if got[1].Summary != nil || !bytes.Equal(got[1].Raw, b.Raw) || !got[1].Meta.Created.Equal(t0) {
			t.Errorf("urn:b loaded as summary %v raw %q meta %+v", got[1].Summary, got[1].Raw, got[1].Meta)
		}
		if raw, err := db.ThingRaw("urn:a"); err != nil || !bytes.Equal(raw, a.Raw) {
			t.Errorf("ThingRaw(urn:a) = %q, %v", raw, err)
		}
	}
	check(db)
	db.Close()
	check(openT(t, dir, Options{}))
}

func TestCorruptMetadataRecord(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	if err := db.Commit(&hub.Batch{Puts: []hub.ThingRecord{rec("urn:a")}}); err != nil {
		t.Fatal(err)
	}
	if err := db.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketThingMeta).Put([]byte("urn:a"), []byte{metaWithSummary, 200, 1})
	}); err != nil {
		t.Fatal(err)
	}
	err := db.LoadThings(func(hub.ThingRecord) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `thing "urn:a": corrupt metadata record`) {
		t.Fatalf("LoadThings = %v", err)
	}
}
