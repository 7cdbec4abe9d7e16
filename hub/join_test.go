package hub_test

import (
	"context"
	"errors"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

func newAdmission(t *testing.T, s *gatedStore, r *hub.Registry, mode string, rate float64, burst int) *hub.Admission {
	t.Helper()
	a, err := hub.NewAdmission(r, s.DB, mode, rate, burst)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func register(t *testing.T, a *hub.Admission, r *hub.Registry, id string, origin hub.Origin, credHash string) {
	t.Helper()
	p, err := r.Prepare(testTD(id, "T"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(context.Background(), id, p, origin, credHash); err != nil {
		t.Fatal(err)
	}
}

// A join's credential is stored in the Thing's own commit: one commit
// writes both, and a failed commit writes neither.
func TestJoinCommitsCredentialWithThing(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "open", 0, 0)
	before := s.commits.Load()
	register(t, a, r, "urn:a", hub.Origin{Source: hub.SourceMQTT, Addr: "10.0.0.1"}, "hash-a")
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("the join took %d commits, want 1", n)
	}
	if h, err := s.CredentialHash("urn:a"); err != nil || h != "hash-a" {
		t.Fatalf("credential: %q, %v", h, err)
	}

	s.fail.Store(true)
	p, err := r.Prepare(testTD("urn:b", "B"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(context.Background(), "urn:b", p, hub.Origin{Source: hub.SourceMQTT}, "hash-b"); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("failed commit: %v", err)
	}
	s.fail.Store(false)
	if _, err := r.Get("urn:b"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("Thing stored by a failed commit: %v", err)
	}
	if _, err := s.CredentialHash("urn:b"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("credential stored by a failed commit: %v", err)
	}
}

// A holder's deregistration deletes the Thing and its credential in one
// commit, and a failed commit deletes neither. A credential whose Thing
// was deleted otherwise (HTTP, expiry: they keep it) is deleted alone.
func TestDeregisterCommitsCredentialWithThing(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "open", 0, 0)
	ctx := context.Background()
	for _, id := range []string{"urn:a", "urn:b", "urn:c"} {
		register(t, a, r, id, hub.Origin{Source: hub.SourceMQTT}, "hash-"+id)
	}
	joined := func(id string) (thing, cred bool) {
		t.Helper()
		_, err := r.Get(id)
		if err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Fatal(err)
		}
		_, cerr := s.CredentialHash(id)
		if cerr != nil && hub.ErrorCode(cerr) != hub.ENOTFOUND {
			t.Fatal(cerr)
		}
		return err == nil, cerr == nil
	}

	before := s.commits.Load()
	if err := a.Deregister(ctx, "urn:a"); err != nil {
		t.Fatal(err)
	}
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("the deregistration took %d commits, want 1", n)
	}
	if thing, cred := joined("urn:a"); thing || cred {
		t.Errorf("after the deregistration: Thing %v, credential %v; want neither", thing, cred)
	}

	s.fail.Store(true)
	if err := a.Deregister(ctx, "urn:b"); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("failed commit: %v", err)
	}
	s.fail.Store(false)
	if thing, cred := joined("urn:b"); !thing || !cred {
		t.Errorf("after a failed commit: Thing %v, credential %v; want both", thing, cred)
	}

	if err := r.Delete(ctx, "urn:c"); err != nil {
		t.Fatal(err)
	}
	if thing, cred := joined("urn:c"); thing || !cred {
		t.Fatalf("deleted by other means: Thing %v, credential %v; want the credential only", thing, cred)
	}
	s.fail.Store(true)
	if err := a.Deregister(ctx, "urn:c"); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("failed commit of the credential alone: %v", err)
	}
	s.fail.Store(false)
	if _, cred := joined("urn:c"); !cred {
		t.Error("credential deleted by a failed commit")
	}
	before = s.commits.Load()
	if err := a.Deregister(ctx, "urn:c"); err != nil {
		t.Fatal(err)
	}
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("deleting the credential alone took %d commits, want 1", n)
	}
	if _, cred := joined("urn:c"); cred {
		t.Error("the credential of a Thing already gone is kept")
	}
}

// The rules both doors apply: a credential's Thing only for its holder,
// no anonymous takeover of a Thing registered by other means, a WebSocket
// agent resuming its own Thing whatever the mode, and the join mode for
// new Things.
func TestAdmitRules(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	open := newAdmission(t, s, r, "open", -1, 0)
	register(t, open, r, "urn:member", hub.Origin{Source: hub.SourceMQTT}, "h")
	register(t, open, r, "urn:http", hub.Origin{Source: hub.SourceHTTP}, "")
	register(t, open, r, "urn:ws", hub.Origin{Source: hub.SourceWS}, "")
	closed := newAdmission(t, s, r, "closed", -1, 0)
	approve := newAdmission(t, s, r, "approve", -1, 0)
	for _, c := range []struct {
		name string
		a    *hub.Admission
		req  hub.JoinRequest
		code string
		cred bool
	}{
		{"holder replaces", closed, hub.JoinRequest{ID: "urn:member", Door: hub.SourceMQTT, Holder: true}, "", true},
		{"holder deregisters", closed, hub.JoinRequest{ID: "urn:member", Door: hub.SourceMQTT, Holder: true, Deregister: true}, "", true},
		{"other client", open, hub.JoinRequest{ID: "urn:member", Door: hub.SourceMQTT}, hub.EFORBIDDEN, true},
		{"ws agent on a member", open, hub.JoinRequest{ID: "urn:member", Door: hub.SourceWS}, hub.EFORBIDDEN, true},
		{"mqtt on http's", open, hub.JoinRequest{ID: "urn:http", Door: hub.SourceMQTT}, hub.EFORBIDDEN, false},
		{"ws on http's", open, hub.JoinRequest{ID: "urn:http", Door: hub.SourceWS}, hub.EFORBIDDEN, false},
		{"mqtt on ws's", open, hub.JoinRequest{ID: "urn:ws", Door: hub.SourceMQTT}, hub.EFORBIDDEN, false},
		{"ws agent back, closed", closed, hub.JoinRequest{ID: "urn:ws", Door: hub.SourceWS}, "", false},
		{"mqtt on http's, approve", approve, hub.JoinRequest{ID: "urn:http", Door: hub.SourceMQTT}, hub.EFORBIDDEN, false},
		{"deregister unknown, approve", approve, hub.JoinRequest{ID: "urn:new", Door: hub.SourceMQTT, Deregister: true}, hub.ENOTFOUND, false},
		{"ws, takeover decides first", approve, hub.JoinRequest{ID: "urn:http", Door: hub.SourceWS}, hub.EFORBIDDEN, false},
		{"new, closed", closed, hub.JoinRequest{ID: "urn:new", Door: hub.SourceWS}, hub.EFORBIDDEN, false},
		{"new, open", open, hub.JoinRequest{ID: "urn:new", Door: hub.SourceMQTT}, "", false},
		{"deregister unknown", open, hub.JoinRequest{ID: "urn:new", Door: hub.SourceMQTT, Deregister: true}, hub.ENOTFOUND, false},
	} {
		cred, err := c.a.Admit(c.req)
		if hub.ErrorCode(err) != c.code || cred != c.cred {
			t.Errorf("%s: credentialed %v, %v; want %v, code %q", c.name, cred, err, c.cred, c.code)
		}
	}
	// A new Thing under approve is parked by its door, on either door.
	for _, door := range []hub.Source{hub.SourceMQTT, hub.SourceWS} {
		if _, err := approve.Admit(hub.JoinRequest{ID: "urn:new", Door: door}); !errors.Is(err, hub.ErrJoinPending) {
			t.Errorf("new over %s, approve: %v, want ErrJoinPending", door, err)
		}
	}
}

// One budget of anonymous joins per source, whichever door they use; a
// holder's joins and another source's are not charged.
func TestAdmitRateSharedByDoors(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "open", 0.001, 2)
	register(t, a, r, "urn:member", hub.Origin{Source: hub.SourceMQTT}, "h")
	for i, door := range []hub.Source{hub.SourceMQTT, hub.SourceWS} {
		if _, err := a.Admit(hub.JoinRequest{ID: "urn:n" + string(rune('0'+i)), Door: door, Addr: "10.0.0.1"}); err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
	}
	if _, err := a.Admit(hub.JoinRequest{ID: "urn:n9", Door: hub.SourceWS, Addr: "10.0.0.1"}); hub.ErrorCode(err) != hub.ERATELIMIT {
		t.Errorf("third join from one address: %v, want rate-limited", err)
	}
	if _, err := a.Admit(hub.JoinRequest{ID: "urn:member", Door: hub.SourceMQTT, Holder: true, Addr: "10.0.0.1"}); err != nil {
		t.Errorf("holder: %v", err)
	}
	if _, err := a.Admit(hub.JoinRequest{ID: "urn:n9", Door: hub.SourceMQTT, Addr: "10.0.0.2"}); err != nil {
		t.Errorf("other address: %v", err)
	}
}
