package hub_test

import (
	"context"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// ThingMeta.Admitted marks the Things the hub picked, the only Things that
// count as authenticated consumers of secured Things (hub.Access): not one
// that joined by itself under join.mode open, but one that joined in a
// permit window of an approve or closed hub, one an admin approved, one an
// admin wrote. The Thing's own updates keep it; a takeover without the
// bound key's proof does not; it survives a restart.
func TestAdmittedMarksThingsTheHubPicked(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := hub.NewRegistry(db, hub.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	join := func(a *hub.Admission, id string, door hub.Source) {
		t.Helper()
		if _, err := a.Admit(hub.JoinRequest{ID: id, Door: door, Addr: "10.0.0.5"}); err != nil {
			t.Fatalf("admit %s: %v", id, err)
		}
		p, err := r.Prepare(testTD(id, "T"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Register(ctx, id, p, hub.Origin{Source: door, Addr: "10.0.0.5"}, ""); err != nil {
			t.Fatal(err)
		}
	}
	admitted := func(r *hub.Registry, id string) bool {
		t.Helper()
		th, err := r.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		return th.Meta.Admitted
	}
	open, err := hub.NewAdmission(r, db, "open", -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	join(open, "urn:self", hub.SourceMQTT)
	if admitted(r, "urn:self") {
		t.Fatal("a Thing that joined by itself under join.mode open is admitted")
	}
	join(open, "urn:self", hub.SourceMQTT) // its own update
	if admitted(r, "urn:self") {
		t.Fatal("a self-joined Thing's own update admitted it")
	}
	join(open, "urn:picked", hub.SourceMQTT)
	// An admin's merge patch (even an empty one) keeps the Thing's
	// origin, so its agent may still update it.
	if err := r.Patch(ctx, "urn:picked", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if !admitted(r, "urn:picked") {
		t.Fatal("an admin's patch did not admit the Thing")
	}
	join(open, "urn:picked", hub.SourceMQTT)
	if !admitted(r, "urn:picked") {
		t.Fatal("the admitted Thing's own update lost its admission")
	}
	join(open, "urn:put", hub.SourceMQTT)
	if _, err := r.Put(ctx, "urn:put", testTD("urn:put", "By the admin"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatal(err)
	}
	if !admitted(r, "urn:put") {
		t.Fatal("an admin's PUT did not admit the Thing")
	}
	// An anonymous HTTP write (no admin token) admits nothing.
	if _, err := r.Put(ctx, "urn:anon", testTD("urn:anon", "Anon"), hub.Origin{Source: hub.SourceHTTP, Addr: "10.0.0.6"}); err != nil {
		t.Fatal(err)
	}
	if admitted(r, "urn:anon") {
		t.Fatal("an anonymous HTTP write admitted the Thing")
	}

	approve, err := hub.NewAdmission(r, db, "approve", -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := approve.OpenPending(db); err != nil {
		t.Fatal(err)
	}
	if _, err := approve.Permit(60); err != nil {
		t.Fatal(err)
	}
	join(approve, "urn:window", hub.SourceWS)
	if !admitted(r, "urn:window") {
		t.Fatal("a Thing that joined in an approve hub's permit window is not admitted")
	}
	// Another socket takes the unsigned WebSocket Thing over: nothing
	// proves it is the Thing the hub picked.
	if _, err := r.Put(ctx, "urn:window", testTD("urn:window", "Taken"), hub.Origin{Source: hub.SourceWS, Addr: "10.0.0.7", Takeover: true}); err != nil {
		t.Fatal(err)
	}
	if admitted(r, "urn:window") {
		t.Fatal("a takeover without a proof kept the admission")
	}
	if _, err := approve.Permit(0); err != nil {
		t.Fatal(err)
	}
	if err := park(t, approve, r, "urn:approved", "10.0.0.8", hub.SourceMQTT, nil); err != nil {
		t.Fatal(err)
	}
	if err := approve.Approve(ctx, "urn:approved"); err != nil {
		t.Fatal(err)
	}
	if !admitted(r, "urn:approved") {
		t.Fatal("an approved Thing is not admitted")
	}

	r.Close()
	db.Close()
	db, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err = hub.NewRegistry(db, hub.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for id, want := range map[string]bool{"urn:self": false, "urn:picked": true, "urn:put": true, "urn:anon": false, "urn:window": false, "urn:approved": true} {
		if got := admitted(r, id); got != want {
			t.Errorf("after a restart %s admitted = %v, want %v", id, got, want)
		}
	}
}
