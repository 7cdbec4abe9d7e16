package hub_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// A registered Thing without a key binding is someone's: a description
// signed by a key it never carried binds it only when its owner (the
// holder of its credential, its own live connection, its mDNS instance)
// or an admin writes it (PROTOCOL §6, issue 24). From anyone else the
// write is refused (403) and leaves the document, the (absent) binding,
// the admission and the group membership as they were. A new Thing is
// still bound by its first signed description, whoever registers it.
func TestFirstBindingOfARegisteredThingNeedsItsOwner(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{Issuer: &countingIssuer{}})
	ctx := t.Context()
	id := "urn:claim:f"
	if _, err := r.Put(ctx, id, testTD(id, "Thermostat"), hub.Origin{Source: hub.SourceWS, Admitted: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "home", Title: "Home", Members: []string{id}}); err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, r, id)
	admitted := func() bool { th, _ := r.Get(id); return th.Meta.Admitted }
	if !admitted() {
		t.Fatal("the Thing is not admitted to begin with")
	}
	thief := newKey(t)
	for _, c := range []struct {
		name   string
		origin hub.Origin
	}{
		{"another WebSocket connection", hub.Origin{Source: hub.SourceWS, Addr: "192.0.2.9", Takeover: true}},
		{"its connection, not proven (an unsigned takeover's)", hub.Origin{Source: hub.SourceWS, Addr: "192.0.2.9"}},
		{"an anonymous MQTT join", hub.Origin{Source: hub.SourceMQTT, Addr: "192.0.2.9"}},
		{"an mDNS instance not its own", hub.Origin{Source: hub.SourceMDNS, Addr: "192.0.2.9"}},
		{"a permit window's join", hub.Origin{Source: hub.SourceWS, Addr: "192.0.2.9", Admitted: true}},
	} {
		doc := signTD(t, testTD(id, "Evil"), thief, time.Now())
		_, err := r.Put(ctx, id, doc, c.origin)
		if hub.ErrorCode(err) != hub.EFORBIDDEN || !strings.Contains(err.Error(), "without a key binding") {
			t.Errorf("%s: %v, want forbidden", c.name, err)
		}
		if p := hub.ProblemOf(err); p.Status != 403 || !strings.Contains(p.Detail, "PUT /api/things/{id}/binding") {
			t.Errorf("%s: problem %+v", c.name, p)
		}
		if got := stateOf(t, r, id); got != before {
			t.Errorf("%s changed the Thing: %+v, want %+v", c.name, got, before)
		}
		if !admitted() || !slices.Equal(r.GroupsOf(id), []string{"home"}) {
			t.Errorf("%s: admitted %v, groups %v", c.name, admitted(), r.GroupsOf(id))
		}
	}
	if _, err := r.Binding(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("binding after the refusals: %v", err)
	}
	// CheckBindingOf (a parked join of a new Thing) is not affected.
	if err := r.CheckBindingOf(id, &hub.Signer{DID: didOf(thief), Created: time.Now()}); err != nil {
		t.Errorf("CheckBindingOf: %v", err)
	}

	// Its owner binds it, and keeps what it had.
	owner := newKey(t)
	if _, err := r.Put(ctx, id, signTD(t, testTD(id, "Thermostat"), owner, time.Now()), hub.Origin{Source: hub.SourceWS, Owner: true}); err != nil {
		t.Fatalf("the owner's signed description: %v", err)
	}
	if b, err := r.Binding(id); err != nil || b.DID != didOf(owner) {
		t.Errorf("binding after the owner's write: %+v %v", b, err)
	}
	if th, _ := r.Get(id); th.Meta.Verified != didOf(owner) || !th.Meta.Admitted {
		t.Errorf("after the owner's write: %+v", th.Meta)
	}

	// An admin binds another registered Thing by writing it signed.
	if _, err := r.Put(ctx, "urn:claim:g", testTD("urn:claim:g", "G"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	admin := newKey(t)
	if _, err := r.Put(ctx, "urn:claim:g", signTD(t, testTD("urn:claim:g", "G"), admin, time.Now()), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatalf("an admin's signed description: %v", err)
	}
	if b, err := r.Binding("urn:claim:g"); err != nil || b.DID != didOf(admin) {
		t.Errorf("binding after the admin's write: %+v %v", b, err)
	}

	// A new Thing binds to its first signer, owner or not.
	if _, err := r.Put(ctx, "urn:claim:new", signTD(t, testTD("urn:claim:new", "N"), thief, time.Now()), hub.Origin{Source: hub.SourceMQTT, Addr: "192.0.2.9"}); err != nil {
		t.Fatalf("a new Thing's signed join: %v", err)
	}
	if b, err := r.Binding("urn:claim:new"); err != nil || b.DID != didOf(thief) {
		t.Errorf("binding of the new Thing: %+v %v", b, err)
	}
}
