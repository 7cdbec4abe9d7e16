package hub_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Join approval meets key-bound ids (PROTOCOL §4.4, §6): an approved
// signed join binds its id as an open join would, and the binding is
// checked when a join is parked and again when it is approved.

// approvalHub is a registry with join mode approve and a durable pending
// list.
func approvalHub(t *testing.T) (*gatedStore, *hub.Registry, *hub.Admission) {
	t.Helper()
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "approve", -1, 0)
	if err := a.OpenPending(s.DB); err != nil {
		t.Fatal(err)
	}
	return s, r, a
}

// parkDoc runs doc's join through Admit and Park as a door does.
func parkDoc(t *testing.T, a *hub.Admission, r *hub.Registry, id string, doc []byte) error {
	t.Helper()
	if _, err := a.Admit(hub.JoinRequest{ID: id, Door: hub.SourceMQTT, Addr: "10.0.0.9"}); !errors.Is(err, hub.ErrJoinPending) {
		t.Fatalf("admit %s: %v, want ErrJoinPending", id, err)
	}
	p, err := r.PrepareFrom(doc, "10.0.0.9")
	if err != nil {
		t.Fatal(err)
	}
	return a.Park(id, p, hub.SourceMQTT, "10.0.0.9", nil)
}

// An approved signed join binds the id to its key and shows the Thing
// verified, in the approval's commit: otherwise the id stays unbound and
// the first other key to sign it later takes it (trust on first use
// would trust the wrong one).
func TestApproveOfSignedJoinBindsTheID(t *testing.T) {
	s, r, a := approvalHub(t)
	key, other := newKey(t), newKey(t)
	id := "urn:ab:1"
	if err := parkDoc(t, a, r, id, signTD(t, testTD(id, "Lamp"), key, time.Now())); err != nil {
		t.Fatal(err)
	}
	before := s.commits.Load()
	if err := a.Approve(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("the approval took %d commits, want 1", n)
	}
	if b, err := r.Binding(id); err != nil || b.DID != didOf(key) {
		t.Fatalf("binding after approval = %+v, %v; want %s", b, err, didOf(key))
	}
	if th, _ := r.Get(id); th.Meta.Verified != didOf(key) {
		t.Errorf("Verified = %q, want %s", th.Meta.Verified, didOf(key))
	}
	// Another key cannot take the approved id over.
	if _, err := r.Put(context.Background(), id, signTD(t, testTD(id, "Mine"), other, time.Now()), hub.Origin{Source: hub.SourceWS, Addr: "10.0.0.66"}); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Fatalf("another key's description of the approved id: %v, want forbidden", err)
	}
}

// A bound id (its Thing deleted: the binding outlives it) parks only a
// join signed by its key with a fresh proof: another key's, an unsigned
// or a replayed description is refused at once with the code a write
// would get, so no attacker's TD waits on the pending list for an admin
// to approve under the owner's id. The owner's fresh join parks, and its
// approval registers the Thing verified.
func TestParkChecksTheBinding(t *testing.T) {
	_, r, a := approvalHub(t)
	owner, other := newKey(t), newKey(t)
	id := "urn:ab:bound"
	ctx := context.Background()
	last := signTD(t, testTD(id, "T"), owner, time.Now().Add(-time.Hour))
	if _, err := r.Put(ctx, id, last, hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		doc  []byte
		code string
	}{
		{"another key", signTD(t, testTD(id, "Evil"), other, time.Now()), hub.EFORBIDDEN},
		{"unsigned", testTD(id, "Evil"), hub.EFORBIDDEN},
		{"the last signed description, replayed", last, hub.ECONFLICT},
	} {
		if err := parkDoc(t, a, r, id, c.doc); hub.ErrorCode(err) != c.code {
			t.Errorf("%s: park = %v, want %s", c.name, err, c.code)
		}
		if n := a.PendingCount(); n != 0 {
			t.Fatalf("%s: %d joins pending, want none", c.name, n)
		}
	}
	if err := parkDoc(t, a, r, id, signTD(t, testTD(id, "T"), owner, time.Now())); err != nil {
		t.Fatalf("the owner's fresh join: %v", err)
	}
	if err := a.Approve(ctx, id); err != nil {
		t.Fatalf("approving the owner's join: %v", err)
	}
	if th, err := r.Get(id); err != nil || th.Meta.Verified != didOf(owner) {
		t.Fatalf("approved Thing: %+v %v", th.Meta, err)
	}
}

// A join parked while its id was free is checked again at approval: an
// admin who re-bound the id to another key meanwhile wins, nothing is
// registered and the entry stays for a decision.
func TestApproveChecksTheBindingAgain(t *testing.T) {
	_, r, a := approvalHub(t)
	k1, k2 := newKey(t), newKey(t)
	id := "urn:ab:race"
	if err := parkDoc(t, a, r, id, signTD(t, testTD(id, "T"), k1, time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Rebind(context.Background(), id, didOf(k2)); err != nil {
		t.Fatal(err)
	}
	if err := a.Approve(context.Background(), id); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Fatalf("approve after a re-bind to another key: %v, want forbidden", err)
	}
	if _, err := r.Get(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("the Thing was registered: %v", err)
	}
	if b, _ := r.Binding(id); b.DID != didOf(k2) {
		t.Fatalf("binding = %s, want %s", b.DID, didOf(k2))
	}
	if a.PendingCount() != 1 {
		t.Fatalf("the entry is gone")
	}
}

// A Thing deleted over HTTP keeps its MQTT credential (so that an agent
// whose Thing expired can come back), but its return is a new Thing's
// join: under join mode closed it is refused and under approve it waits
// for approval like any new Thing, or an admin could never evict a member
// from a hub that picks its members. A registered member's updates and
// every deregistration stay its own.
func TestHolderOfDeletedThingPassesTheJoinMode(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	open := newAdmission(t, s, r, "open", -1, 0)
	register(t, open, r, "urn:evicted", hub.Origin{Source: hub.SourceMQTT}, "h")
	register(t, open, r, "urn:member", hub.Origin{Source: hub.SourceMQTT}, "h2")
	if err := r.Delete(context.Background(), "urn:evicted"); err != nil {
		t.Fatal(err)
	}
	closed := newAdmission(t, s, r, "closed", -1, 0)
	approve := newAdmission(t, s, r, "approve", -1, 0)
	rejoin := hub.JoinRequest{ID: "urn:evicted", Door: hub.SourceMQTT, Holder: true, Addr: "10.0.0.5"}
	if _, err := closed.Admit(rejoin); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Errorf("an evicted member re-joining a closed hub: %v, want forbidden", err)
	}
	if _, err := approve.Admit(rejoin); !errors.Is(err, hub.ErrJoinPending) {
		t.Errorf("an evicted member re-joining under approve: %v, want ErrJoinPending", err)
	}
	if _, err := open.Admit(rejoin); err != nil {
		t.Errorf("an evicted member re-joining an open hub: %v", err)
	}
	if _, err := closed.Admit(hub.JoinRequest{ID: "urn:member", Door: hub.SourceMQTT, Holder: true}); err != nil {
		t.Errorf("a registered member's update under closed: %v", err)
	}
	del := rejoin
	del.Deregister = true
	if _, err := closed.Admit(del); err != nil {
		t.Errorf("an evicted member deleting its credential under closed: %v", err)
	}
}
