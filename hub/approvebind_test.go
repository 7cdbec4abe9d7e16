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
	return a.Park(id, p.Raw(), hub.SourceMQTT, "10.0.0.9", nil)
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
