package store

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	bolt "go.etcd.io/bbolt"
)

const testCred = `{"validUntil":"2026-12-01T04:00:00Z","credentialStatus":{"statusListCredential":"http://hub/credentials/status/memberships"}}`

// Membership credentials are stored and dropped in the order a batch
// names them, apart from their group's record.
func TestMemberCredentialsCommitted(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	g := hub.Group{ID: "g", Title: "G", Members: []hub.Member{{Thing: "urn:a", StatusIndex: 3}}}
	g.Members[0].SetCredential(json.RawMessage(testCred))
	if err := db.Commit(&hub.Batch{Groups: []hub.Group{g}, MemberCredentials: []hub.MemberCredential{
		{Group: "g", Thing: "urn:a", Credential: json.RawMessage(`{"old":1}`)},
		{Group: "g", Thing: "urn:b", Credential: json.RawMessage(`{"b":1}`)},
		{Group: "g", Thing: "urn:b"},
		{Group: "g", Thing: "urn:a", Credential: json.RawMessage(testCred)},
	}}); err != nil {
		t.Fatal(err)
	}
	if c, err := db.MemberCredential("g", "urn:a"); err != nil || string(c) != testCred {
		t.Fatalf("urn:a: %s, %v", c, err)
	}
	if c, err := db.MemberCredential("g", "urn:b"); err != nil || c != nil {
		t.Fatalf("urn:b: %s, %v", c, err)
	}
	if c, err := db.MemberCredential("h", "urn:a"); err != nil || c != nil {
		t.Fatalf("another group: %s, %v", c, err)
	}
	raw := rawGroup(t, db, "g")
	if bytes.Contains(raw, []byte(`"credential"`)) || !bytes.Contains(raw, []byte(`"credentialList":"http://hub/credentials/status/memberships"`)) {
		t.Fatalf("the group's record: %s", raw)
	}
	var loaded []hub.Group
	if err := db.LoadGroups(func(g hub.Group) error { loaded = append(loaded, g); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 1 || loaded[0].Members[0].CredentialList != "http://hub/credentials/status/memberships" ||
		!loaded[0].Members[0].CredentialUntil.Equal(time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)) {
		t.Fatalf("loaded %+v", loaded)
	}
	// A group id with '/' would make keys ambiguous: refused, nothing stored.
	if err := db.Commit(&hub.Batch{MemberCredentials: []hub.MemberCredential{{Group: "g/x", Thing: "urn:c", Credential: json.RawMessage(`{}`)}}}); err == nil {
		t.Fatal("a group id with '/' was stored")
	}
	if c, _ := db.MemberCredential("g/x", "urn:c"); c != nil {
		t.Fatalf("stored %s", c)
	}
}

// A store written by an older hub kept each credential in its group's
// record: loading moves them to their own bucket, once, and the members
// say what their credentials are.
func TestLegacyGroupCredentialsMoved(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	legacy := `{"id":"g","title":"G","requireSigned":false,"selfJoin":true,"created":"2026-11-24T04:00:00Z","modified":"2026-11-24T04:00:00Z","members":[` +
		`{"thing":"urn:a","since":"2026-11-24T04:00:00Z","statusIndex":7,"credential":` + testCred + `},` +
		`{"thing":"urn:b","since":"2026-11-24T04:00:00Z","statusIndex":8}]}`
	if err := db.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketGroups)
		if err != nil {
			return err
		}
		return b.Put([]byte("g"), []byte(legacy))
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second load finds them moved
		var loaded []hub.Group
		if err := db.LoadGroups(func(g hub.Group) error { loaded = append(loaded, g); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(loaded) != 1 || !loaded[0].SelfJoin || len(loaded[0].Members) != 2 {
			t.Fatalf("loaded %+v", loaded)
		}
		a, b := loaded[0].Members[0], loaded[0].Members[1]
		if a.Thing != "urn:a" || a.StatusIndex != 7 || a.CredentialList != "http://hub/credentials/status/memberships" ||
			!a.CredentialUntil.Equal(time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)) || b.Thing != "urn:b" || b.CredentialList != "" {
			t.Fatalf("members %+v", loaded[0].Members)
		}
		if c, err := db.MemberCredential("g", "urn:a"); err != nil || string(c) != testCred {
			t.Fatalf("urn:a: %s, %v", c, err)
		}
		if c, err := db.MemberCredential("g", "urn:b"); err != nil || c != nil {
			t.Fatalf("urn:b: %s, %v", c, err)
		}
		if raw := rawGroup(t, db, "g"); bytes.Contains(raw, []byte(`"credential"`)) {
			t.Fatalf("the group's record still holds a credential: %s", raw)
		}
	}
}

func rawGroup(t *testing.T, db *DB, id string) []byte {
	t.Helper()
	var raw []byte
	if err := db.db.View(func(tx *bolt.Tx) error {
		raw = bytes.Clone(tx.Bucket(bucketGroups).Get([]byte(id)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return raw
}
