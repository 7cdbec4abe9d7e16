package hub_test

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// TestBindingsSurviveRestart: every way a binding is kept (its Thing
// registered; the Thing deleted, or purged on expiry; an admin's binding
// of an id never registered; a registered Thing re-bound by an admin) and
// removed (an admin's unbind of a registered Thing) holds after the hub
// restarts on the same store, with the replay order and the re-join rule:
// the store keeps a registered Thing's binding in its record and moves it
// out when the Thing goes.
func TestBindingsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	open := func() (*store.DB, *hub.Registry) {
		t.Helper()
		db, err := store.Open(dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := hub.NewRegistry(db, hub.RegistryOptions{Now: clock.Now})
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return db, r
	}
	ctx := context.Background()
	// The Thing's own MQTT client (its credential's holder): it may bind
	// an unbound registered Thing (PROTOCOL §6).
	mqtt := hub.Origin{Source: hub.SourceMQTT, Owner: true}
	keys := map[string]ed25519.PrivateKey{}
	for _, k := range []string{"kept", "deleted", "expired", "reserved", "unbound", "rotated", "rotatedTo", "other"} {
		keys[k] = newKey(t)
	}
	id := func(name string) string { return "urn:rs:" + name }
	signed := map[string][]byte{} // each id's last accepted description
	put := func(r *hub.Registry, name string, key ed25519.PrivateKey, created time.Time, extra ...string) error {
		doc := signTD(t, testTD(id(name), "T", extra...), key, created)
		_, err := r.Put(ctx, id(name), doc, mqtt)
		if err == nil {
			signed[name] = doc
		}
		return err
	}
	then := clock.Now().Add(-time.Hour)

	db, r := open()
	for _, name := range []string{"kept", "deleted", "unbound", "rotated"} {
		if err := put(r, name, keys[name], then); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := put(r, "expired", keys["expired"], then, "registration", `{"ttl": 60}`); err != nil {
		t.Fatal(err)
	}
	// A presence change and an admin's unsigned write rewrite kept's
	// record; its binding stays.
	if err := r.SetPresence(ctx, id("kept"), hub.PresenceOffline, hub.SourceMQTT); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(ctx, id("kept"), testTD(id("kept"), "by an admin"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, id("deleted")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Rebind(ctx, id("reserved"), didOf(keys["reserved"])); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Rebind(ctx, id("rotated"), didOf(keys["rotatedTo"])); err != nil {
		t.Fatal(err)
	}
	if err := r.Unbind(ctx, id("unbound")); err != nil {
		t.Fatal(err)
	}
	// Expire urn:rs:expired and wait for the purge (a write wakes the
	// loop, which re-arms its timer from the moved clock).
	sub, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if _, err := r.Put(ctx, "urn:rs:poke", testTD("urn:rs:poke", "poke"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.After(5 * time.Second); ; {
		select {
		case ev := <-sub.C:
			if ev.Type == hub.EventDeleted && ev.ID == id("expired") {
				goto purged
			}
		case <-deadline:
			t.Fatal("urn:rs:expired was never purged")
		}
	}
purged:
	sub.Cancel()
	want := map[string]string{"kept": "kept", "deleted": "deleted", "expired": "expired", "reserved": "reserved", "rotated": "rotatedTo"}
	check := func(r *hub.Registry, when string) {
		t.Helper()
		for name, key := range want {
			b, err := r.Binding(id(name))
			if err != nil || b.DID != didOf(keys[key]) {
				t.Errorf("%s: binding of %s = %+v, %v; want %s's key", when, name, b, err, key)
			}
			if name != "reserved" && name != "rotated" && !b.Created.Equal(then) {
				t.Errorf("%s: binding of %s was created %s, want %s", when, name, b.Created, then)
			}
		}
		if _, err := r.Binding(id("unbound")); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Errorf("%s: binding of unbound: %v", when, err)
		}
	}
	check(r, "before the restart")
	r.Close()
	db.Close()

	db, r = open()
	defer db.Close()
	defer r.Close()
	check(r, "after the restart")
	now := clock.Now()
	for _, name := range []string{"kept", "deleted", "expired", "reserved", "rotated"} {
		if err := put(r, name, keys["other"], now); hub.ErrorCode(err) != hub.EFORBIDDEN {
			t.Errorf("another key's description of %s after the restart: %v", name, err)
		}
	}
	// A deleted Thing's last description is a replay (the stored one sent
	// again is not: TestBindingOutlivesTheThing; kept's stored one is now
	// an admin's).
	if _, err := r.Put(ctx, id("deleted"), signed["deleted"], hub.Origin{Source: hub.SourceMQTT, JoinOpen: true}); hub.ErrorCode(err) != hub.ECONFLICT {
		t.Errorf("deleted's last description replayed: %v", err)
	}
	for name, key := range map[string]string{"kept": "kept", "rotated": "rotatedTo", "unbound": "other"} {
		if err := put(r, name, keys[key], now); err != nil {
			t.Errorf("%s by %s's key after the restart: %v", name, key, err)
		}
	}
	if b, err := r.Binding(id("unbound")); err != nil || b.DID != didOf(keys["other"]) {
		t.Errorf("unbound re-bound by its first signer: %+v, %v", b, err)
	}
}
