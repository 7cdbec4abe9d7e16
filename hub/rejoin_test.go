package hub_test

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// signedPrep is the description of id signed by k at created, prepared.
func signedPrep(t *testing.T, r *hub.Registry, id string, k ed25519.PrivateKey, created time.Time) *hub.PreparedTD {
	t.Helper()
	doc, err := proof.SignMilli(testTD(id, "T"), k, created)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Prepare(doc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A Thing holding a credential is admitted without it only by a proof of
// the key its id is bound to (Verdict.ByKey); RegisterByKey replaces (or
// deletes) the credential in the description's commit, refuses a proof not
// fresher than the last (nothing changed), and a failed commit changes
// nothing; the revocation hook runs only after a stored change.
func TestRegisterByKey(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "closed", 0, 0)
	ctx := context.Background()
	_, owner, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	var revoked []string
	a.OnCredentialRevoked(func(id string) { revoked = append(revoked, id) })
	t0 := time.Now().Add(-time.Minute)
	first := signedPrep(t, r, "urn:k", owner, t0)
	if _, err := a.Register(ctx, "urn:k", first, hub.Origin{Source: hub.SourceMQTT}, "hash-1"); err != nil {
		t.Fatal(err)
	}
	register(t, a, r, "urn:u", hub.Origin{Source: hub.SourceMQTT}, "hash-u") // unsigned: no binding

	judge := func(id string, p *hub.PreparedTD) (hub.Verdict, error) {
		return a.AdmitJoin(hub.JoinRequest{ID: id, Door: hub.SourceMQTT, Addr: "10.0.0.7", TD: p.Raw()})
	}
	if v, err := judge("urn:k", signedPrep(t, r, "urn:k", owner, t0.Add(time.Second))); err != nil || !v.ByKey {
		t.Fatalf("the bound key's proof: %+v %v", v, err)
	}
	for name, c := range map[string]struct {
		id string
		p  *hub.PreparedTD
	}{
		"another key":                   {"urn:k", signedPrep(t, r, "urn:k", other, t0.Add(time.Second))},
		"an id bound to no key, signed": {"urn:u", signedPrep(t, r, "urn:u", owner, t0.Add(time.Second))},
	} {
		if v, err := judge(c.id, c.p); hub.ErrorCode(err) != hub.EFORBIDDEN || v.ByKey {
			t.Errorf("%s: %+v %v", name, v, err)
		}
	}
	if v, err := a.AdmitJoin(hub.JoinRequest{ID: "urn:k", Door: hub.SourceMQTT}); hub.ErrorCode(err) != hub.EFORBIDDEN || v.ByKey {
		t.Errorf("no description: %+v %v", v, err)
	}

	cred := func(id string) string {
		h, err := s.CredentialHash(id)
		if hub.ErrorCode(err) == hub.ENOTFOUND {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// The stored description again, or an older proof: a replay.
	for _, p := range []*hub.PreparedTD{first, signedPrep(t, r, "urn:k", owner, t0.Add(-time.Second))} {
		if _, err := a.RegisterByKey(ctx, "urn:k", p, hub.Origin{Source: hub.SourceMQTT}, "hash-x"); hub.ErrorCode(err) != hub.ECONFLICT {
			t.Fatalf("replay: %v", err)
		}
	}
	s.fail.Store(true)
	if _, err := a.RegisterByKey(ctx, "urn:k", signedPrep(t, r, "urn:k", owner, t0.Add(time.Second)), hub.Origin{Source: hub.SourceMQTT}, "hash-x"); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("failed commit: %v", err)
	}
	s.fail.Store(false)
	if cred("urn:k") != "hash-1" || len(revoked) != 0 {
		t.Fatalf("refused writes changed the credential %q or revoked %v", cred("urn:k"), revoked)
	}
	if _, err := a.RegisterByKey(ctx, "urn:k", signedPrep(t, r, "urn:k", owner, t0.Add(2*time.Second)), hub.Origin{Source: hub.SourceMQTT}, "hash-2"); err != nil {
		t.Fatal(err)
	}
	if cred("urn:k") != "hash-2" || len(revoked) != 1 {
		t.Fatalf("after the re-join: credential %q, revoked %v", cred("urn:k"), revoked)
	}
	// A door that issues none (WebSocket) deletes it.
	if _, err := a.RegisterByKey(ctx, "urn:k", signedPrep(t, r, "urn:k", owner, t0.Add(3*time.Second)), hub.Origin{Source: hub.SourceWS}, ""); err != nil {
		t.Fatal(err)
	}
	if cred("urn:k") != "" || len(revoked) != 2 {
		t.Fatalf("after a WebSocket re-join: credential %q, revoked %v", cred("urn:k"), revoked)
	}
	if th, err := r.Get("urn:k"); err != nil || th.Meta.Origin.Source != hub.SourceWS || th.Meta.Verified == "" {
		t.Fatalf("the Thing after the WebSocket re-join: %+v %v", th, err)
	}
}

// ResetCredential deletes a credential alone (the Thing stays), in one
// commit; a failed commit keeps it; a Thing without one is ENOTFOUND. The
// next join of the Thing is one without a credential: refused while
// joining is closed.
func TestResetCredential(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "closed", 0, 0)
	ctx := context.Background()
	var revoked []string
	a.OnCredentialRevoked(func(id string) { revoked = append(revoked, id) })
	register(t, a, r, "urn:a", hub.Origin{Source: hub.SourceMQTT}, "hash-a")
	register(t, a, r, "urn:h", hub.Origin{Source: hub.SourceHTTP}, "")

	for _, id := range []string{"urn:h", "urn:none"} {
		if err := a.ResetCredential(ctx, id); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Errorf("reset of %s: %v", id, err)
		}
	}
	if err := a.ResetCredential(ctx, "not an id"); hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("reset of an invalid id: %v", err)
	}
	s.fail.Store(true)
	if err := a.ResetCredential(ctx, "urn:a"); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("failed commit: %v", err)
	}
	s.fail.Store(false)
	if h, err := s.CredentialHash("urn:a"); err != nil || h != "hash-a" || len(revoked) != 0 {
		t.Fatalf("after a failed reset: %q %v, revoked %v", h, err, revoked)
	}
	before := s.commits.Load()
	if err := a.ResetCredential(ctx, "urn:a"); err != nil {
		t.Fatal(err)
	}
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("the reset took %d commits, want 1", n)
	}
	if _, err := s.CredentialHash("urn:a"); hub.ErrorCode(err) != hub.ENOTFOUND || len(revoked) != 1 {
		t.Fatalf("after the reset: %v, revoked %v", err, revoked)
	}
	if _, err := r.Get("urn:a"); err != nil {
		t.Fatalf("the reset removed the Thing: %v", err)
	}
	if _, err := a.Admit(hub.JoinRequest{ID: "urn:a", Door: hub.SourceMQTT}); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Fatalf("a join after the reset while joining is closed: %v", err)
	}
}
