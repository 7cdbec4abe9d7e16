package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
	bolt "go.etcd.io/bbolt"
)

func applyBroker(t *testing.T, db *DB, recs ...brokerstate.Record) {
	t.Helper()
	if err := db.ApplyBroker(recs); err != nil {
		t.Fatalf("ApplyBroker: %v", err)
	}
}

// loadBroker returns kind's records as "key=value" strings in the order
// LoadBroker gave them.
func loadBroker(t *testing.T, db *DB, kind string) []string {
	t.Helper()
	var out []string
	if err := db.LoadBroker(kind, func(k string, v []byte) error {
		if v == nil {
			t.Errorf("LoadBroker(%s) gave nil value for %q", kind, k)
		}
		out = append(out, k+"="+string(v))
		return nil
	}); err != nil {
		t.Fatalf("LoadBroker(%s): %v", kind, err)
	}
	return out
}

func put(kind, key, value string) brokerstate.Record {
	return brokerstate.Record{Kind: kind, Key: key, Value: []byte(value)}
}

func del(kind, key string) brokerstate.Record { return brokerstate.Record{Kind: kind, Key: key} }

func checkBroker(t *testing.T, db *DB, kind string, want ...string) {
	t.Helper()
	if got := loadBroker(t, db, kind); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("LoadBroker(%s) = %q, want %q", kind, got, want)
	}
}

func TestApplyBrokerPutsAndDeletesAcrossKinds(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"retained", "client", "subscription", "inflight"} {
		checkBroker(t, db, kind) // nothing stored yet: no calls
	}
	applyBroker(t, db,
		put("retained", "lmos/a/temp", "21"),
		put("retained", "lmos/a/hum", "40"),
		put("client", "c1", "session-1"),
		put("subscription", "c1|lmos/#", "qos1"),
		put("inflight", "c1|7", "pkt7"),
		put("inflight", "c1|8", "pkt8"),
	)
	applyBroker(t, db,
		del("retained", "lmos/a/hum"),
		put("retained", "lmos/a/temp", "22"), // replace
		del("inflight", "c1|7"),
		del("inflight", "c1|never"), // deleting an absent key is fine
		del("client", "c2"),
		put("client", "c2", "session-2"), // later record for a key wins
		put("subscription", "c1|x", "qos0"),
		del("subscription", "c1|x"),
		brokerstate.Record{Kind: "retained", Key: "lmos/empty", Value: []byte{}}, // empty is a value, not a delete
	)
	want := map[string][]string{
		"retained":     {"lmos/a/temp=22", "lmos/empty="},
		"client":       {"c1=session-1", "c2=session-2"},
		"subscription": {"c1|lmos/#=qos1"},
		"inflight":     {"c1|8=pkt8"},
	}
	for kind, w := range want {
		checkBroker(t, db, kind, w...)
	}
	// Empty and nil calls are no-ops.
	applyBroker(t, db)
	if err := db.ApplyBroker(nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openT(t, dir, Options{})
	for kind, w := range want {
		checkBroker(t, db, kind, w...)
	}
}

func TestLoadBrokerKeyOrder(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	keys := []string{"b", "a/b/c", "a", "B", "a/b", "ab", "a0", "\x00", "é"}
	var recs []brokerstate.Record
	for _, k := range keys {
		recs = append(recs, put("retained", k, "v"))
	}
	applyBroker(t, db, recs...)
	var got []string
	if err := db.LoadBroker("retained", func(k string, _ []byte) error { got = append(got, k); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []string{"\x00", "B", "a", "a/b", "a/b/c", "a0", "ab", "b", "é"} // byte order
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("order = %q, want %q", got, want)
	}
}

func TestApplyBrokerRejectsUnknownKindAtomically(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	applyBroker(t, db, put("client", "c1", "old"))
	err := db.ApplyBroker([]brokerstate.Record{
		put("retained", "lmos/x", "1"),
		put("client", "c1", "new"),
		put("sessions", "c9", "x"),
	})
	if err == nil {
		t.Fatal("ApplyBroker with unknown kind succeeded")
	}
	if !strings.Contains(err.Error(), `"sessions"`) || hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("err = %v (code %q), want EINVALID naming the kind", err, hub.ErrorCode(err))
	}
	checkBroker(t, db, "retained")
	checkBroker(t, db, "client", "c1=old")

	// An empty key is rejected the same way.
	err = db.ApplyBroker([]brokerstate.Record{put("retained", "lmos/y", "1"), put("retained", "", "1")})
	if hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("empty key err = %v", err)
	}
	checkBroker(t, db, "retained")

	// A failure inside the transaction (a key bbolt refuses) rolls back the
	// records before it too.
	err = db.ApplyBroker([]brokerstate.Record{
		put("retained", "lmos/z", "1"),
		put("retained", strings.Repeat("k", bolt.MaxKeySize+1), "1"),
	})
	if err == nil {
		t.Fatal("ApplyBroker with an oversized key succeeded")
	}
	checkBroker(t, db, "retained")

	if err := db.LoadBroker("sessions", func(string, []byte) error { return nil }); err == nil || !strings.Contains(err.Error(), `"sessions"`) {
		t.Errorf("LoadBroker(unknown) err = %v", err)
	}
}

func TestLoadBrokerStopsOnFnError(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	applyBroker(t, db, put("retained", "a", "1"), put("retained", "b", "2"), put("retained", "c", "3"))
	stop := errors.New("stop")
	var seen []string
	err := db.LoadBroker("retained", func(k string, _ []byte) error {
		seen = append(seen, k)
		if k == "b" {
			return stop
		}
		return nil
	})
	if err != stop { // returned as is, not wrapped
		t.Errorf("err = %v, want stop", err)
	}
	if strings.Join(seen, ",") != "a,b" {
		t.Errorf("fn saw %v after stop", seen)
	}
}

func TestLoadBrokerValuesAreCopiesAndFnMayWrite(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	applyBroker(t, db, put("inflight", "c1|1", "pkt1"), put("inflight", "c1|2", "pkt2"))
	var kept [][]byte
	err := db.LoadBroker("inflight", func(k string, v []byte) error {
		kept = append(kept, v)
		v[0] = 'X'
		// No read transaction is open: fn may write (even the same bucket).
		return db.ApplyBroker([]brokerstate.Record{del("inflight", k)})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 2 || string(kept[0]) != "Xkt1" || string(kept[1]) != "Xkt2" {
		t.Errorf("values = %q", kept)
	}
	checkBroker(t, db, "inflight")
}

// deleteCredential commits a batch that only deletes id's credential, as
// a deregistration of a Thing already gone does.
func deleteCredential(db *DB, id string) error {
	return db.Commit(&hub.Batch{DeleteCredentials: []string{id}})
}

// A batch deleting a Thing and its credential applies both or, failing,
// neither: they share one transaction.
func TestCommitDeletesThingAndCredentialTogether(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	const id = "urn:a"
	put := &hub.Batch{
		Puts:        []hub.ThingRecord{{ID: id, Raw: []byte(`{"id":"urn:a"}`)}},
		Credentials: []hub.CredentialRecord{{ThingID: id, Hash: "h"}},
		Events:      []hub.Event{{Seq: 1, Type: hub.EventCreated, ID: id}},
	}
	if err := db.Commit(put); err != nil {
		t.Fatal(err)
	}
	present := func() (thing, cred bool) {
		_, err := db.ThingRaw(id)
		_, cerr := db.CredentialHash(id)
		return err == nil, cerr == nil
	}
	del := func(seq uint64) *hub.Batch {
		return &hub.Batch{Deletes: []string{id}, DeleteCredentials: []string{id},
			Events: []hub.Event{{Seq: seq, Type: hub.EventDeleted, ID: id}}}
	}
	// A repeated seq fails the transaction after the deletes were applied
	// in it (events come last).
	if err := db.Commit(del(1)); err == nil {
		t.Fatal("a batch with a repeated seq was committed")
	}
	if thing, cred := present(); !thing || !cred {
		t.Errorf("after a failed commit: Thing %v, credential %v; want both", thing, cred)
	}
	if err := db.Commit(del(2)); err != nil {
		t.Fatal(err)
	}
	if thing, cred := present(); thing || cred {
		t.Errorf("after the commit: Thing %v, credential %v; want neither", thing, cred)
	}
}

func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const h1 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	const h2 = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
	if _, err := db.CredentialHash("urn:a"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("CredentialHash on empty store err = %v", err)
	}
	if err := deleteCredential(db, "urn:a"); err != nil { // absent, bucket missing
		t.Errorf("deleting an absent credential = %v", err)
	}
	for _, id := range []string{"urn:a", "urn:b"} {
		if err := db.PutCredential(id, h1); err != nil {
			t.Fatal(err)
		}
	}
	if h, err := db.CredentialHash("urn:a"); err != nil || h != h1 {
		t.Errorf("CredentialHash(urn:a) = %q, %v", h, err)
	}
	if err := db.PutCredential("urn:a", h2); err != nil { // replace
		t.Fatal(err)
	}
	if h, err := db.CredentialHash("urn:a"); err != nil || h != h2 {
		t.Errorf("CredentialHash after replace = %q, %v", h, err)
	}
	if err := deleteCredential(db, "urn:b"); err != nil {
		t.Fatal(err)
	}
	_, err = db.CredentialHash("urn:b")
	var he *hub.Error
	if !errors.As(err, &he) || he.Code != hub.ENOTFOUND {
		t.Errorf("CredentialHash(deleted) err = %#v, want *hub.Error ENOTFOUND", err)
	}
	if err := deleteCredential(db, "urn:b"); err != nil { // again: absent is fine
		t.Errorf("deleting an absent credential = %v", err)
	}
	if err := deleteCredential(db, ""); err != nil {
		t.Errorf("deleting the credential of \"\" = %v", err)
	}
	for _, c := range [][2]string{{"", h1}, {"urn:c", ""}, {"", ""}} {
		if err := db.PutCredential(c[0], c[1]); hub.ErrorCode(err) != hub.EINVALID {
			t.Errorf("PutCredential(%q, %q) err = %v, want EINVALID", c[0], c[1], err)
		}
	}
	if _, err := db.CredentialHash("urn:c"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("invalid credential was stored: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openT(t, dir, Options{})
	if h, err := db.CredentialHash("urn:a"); err != nil || h != h2 {
		t.Errorf("CredentialHash after reopen = %q, %v", h, err)
	}
	if _, err := db.CredentialHash("urn:b"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("deleted credential back after reopen: %v", err)
	}
}

// TestOpenOldStoreWithoutNewBuckets opens a file laid out as by the version
// before broker state and credentials (schema 1, six buckets).
func TestOpenOldStoreWithoutNewBuckets(t *testing.T) {
	dir := t.TempDir()
	old, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	const hubID = "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"
	err = old.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"meta", "things", "thingmeta", "events", "tokens", "tokenhash"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		meta := tx.Bucket([]byte("meta"))
		if err := meta.Put([]byte("schema"), u64(1)); err != nil {
			return err
		}
		return meta.Put([]byte("hubid"), []byte(hubID))
	})
	if err != nil {
		t.Fatal(err)
	}
	old.Close()

	db := openT(t, dir, Options{})
	if db.HubID() != hubID {
		t.Errorf("HubID = %q, want %q", db.HubID(), hubID)
	}
	// Reads of the missing buckets see nothing; writes create them.
	checkBroker(t, db, "retained")
	if _, err := db.CredentialHash("urn:a"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("CredentialHash err = %v", err)
	}
	if err := deleteCredential(db, "urn:a"); err != nil {
		t.Errorf("deleting a credential = %v", err)
	}
	applyBroker(t, db, put("retained", "t", "v"), del("client", "c"))
	checkBroker(t, db, "retained", "t=v")
	checkBroker(t, db, "client")
	if err := db.PutCredential("urn:a", "h"); err != nil {
		t.Fatal(err)
	}
	if h, err := db.CredentialHash("urn:a"); err != nil || h != "h" {
		t.Errorf("CredentialHash = %q, %v", h, err)
	}
	commit(t, db, &hub.Batch{Puts: []hub.ThingRecord{rec("urn:a")}, Events: []hub.Event{ev(1, hub.EventCreated, "urn:a")}})
}

func TestBackupIncludesBrokerAndCredentials(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	applyBroker(t, db, put("retained", "lmos/a", "1"), put("client", "c1", "s"), put("subscription", "c1|#", "q"), put("inflight", "c1|1", "p"))
	if err := db.PutCredential("urn:a", "h"); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := db.Backup(&buf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	restored := openT(t, dir, Options{})
	checkBroker(t, restored, "retained", "lmos/a=1")
	checkBroker(t, restored, "client", "c1=s")
	checkBroker(t, restored, "subscription", "c1|#=q")
	checkBroker(t, restored, "inflight", "c1|1=p")
	if h, err := restored.CredentialHash("urn:a"); err != nil || h != "h" {
		t.Errorf("restored credential = %q, %v", h, err)
	}
}

// BenchmarkApplyBroker64 is 64 retained messages of ~200 bytes per durable
// commit, as the MQTT adapter's batched autosave writes them.
func BenchmarkApplyBroker64(b *testing.B) {
	db, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const topics, perCall = 1000, 64
	keys := make([]string, topics)
	values := make([][]byte, topics)
	for i := range topics {
		keys[i] = fmt.Sprintf("lmos/things/urn:dev:bench:%04d/properties/prop%02d", i/18, i%18)
		values[i] = fmt.Appendf(nil, `{"value":%d.5,"unit":"celsius","timestamp":"2025-01-02T03:04:05Z","source":"urn:dev:bench:%04d","quality":"good","note":%q}`, i, i/18, strings.Repeat("x", 76))
	}
	b.SetBytes(int64(len(values[0]) * perCall))
	b.ReportAllocs()
	recs := make([]brokerstate.Record, perCall)
	for i := 0; b.Loop(); i++ {
		for j := range recs {
			k := (i*perCall + j) % topics
			recs[j] = brokerstate.Record{Kind: "retained", Key: keys[k], Value: values[k]}
		}
		if err := db.ApplyBroker(recs); err != nil {
			b.Fatal(err)
		}
	}
}
