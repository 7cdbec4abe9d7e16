package hub_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
)

const testListURL = "http://127.0.0.1:8080/credentials/status/memberships"

type testClock struct{ ns atomic.Int64 }

func (c *testClock) now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *testClock) add(d time.Duration)  { c.ns.Add(int64(d)) }
func newClock(t time.Time) *testClock     { c := &testClock{}; c.ns.Store(t.UnixNano()); return c }
func hubKey() ed25519.PrivateKey          { return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)) }
func credDID(k ed25519.PrivateKey) string { return proof.DID(k.Public().(ed25519.PublicKey)) }

// A member's credential verifies against the hub's status list until it is
// removed; then the list, signed anew, revokes it everywhere.
func TestIssuedCredentialRevokedOnRemoval(t *testing.T) {
	ctx := context.Background()
	clock := newClock(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC))
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Issuer: iss, Now: clock.now})
	mustPut(t, r, "urn:a")
	mustPut(t, r, "urn:b")
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g1", Title: "Group one", Members: []string{"urn:a", "urn:b"}}); err != nil {
		t.Fatal(err)
	}
	cred, err := r.MemberCredential("g1", "urn:a")
	if err != nil {
		t.Fatal(err)
	}
	list, err := r.StatusListCredential()
	if err != nil {
		t.Fatal(err)
	}
	m, err := vc.VerifyMembership(cred, list, clock.now(), vc.ExpectIssuer(credDID(hubKey())))
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "urn:a" || m.Thing != "urn:a" || m.Group.Title != "Group one" || !m.ValidUntil.Equal(m.ValidFrom.Add(hub.DefaultCredentialValidity)) {
		t.Fatalf("membership %+v", m)
	}
	// Unchanged bits: the same signed bytes, not signed again.
	again, _ := r.StatusListCredential()
	if !bytes.Equal(again, list) || iss.StatusListsSigned() != 1 {
		t.Fatalf("the list was signed %d times", iss.StatusListsSigned())
	}

	clock.add(time.Minute)
	if _, err := r.RemoveMember(ctx, "g1", "urn:a"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.MemberCredential("g1", "urn:a"); code(err) != hub.ENOTFOUND {
		t.Fatalf("a removed member's credential: %v", err)
	}
	list2, err := r.StatusListCredential()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vc.VerifyMembership(cred, list2, clock.now()); !errors.Is(err, vc.ErrRevoked) {
		t.Fatalf("the removed member's credential: %v", err)
	}
	credB, _ := r.MemberCredential("g1", "urn:b")
	if _, err := vc.VerifyMembership(credB, list2, clock.now()); err != nil {
		t.Fatalf("the other member's credential: %v", err)
	}
	// Dissolving revokes the rest.
	if err := r.DissolveGroup(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	list3, _ := r.StatusListCredential()
	if _, err := vc.VerifyMembership(credB, list3, clock.now()); !errors.Is(err, vc.ErrRevoked) {
		t.Fatalf("after dissolution: %v", err)
	}
	if iss.StatusListsSigned() != 3 {
		t.Fatalf("the list was signed %d times, want 3", iss.StatusListsSigned())
	}
}

// An expired credential is renewed on read: a new one for the same status
// entry, valid from now; a revocation still revokes it.
func TestExpiredCredentialRenewedOnRead(t *testing.T) {
	ctx := context.Background()
	clock := newClock(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC))
	iss := hub.NewCredentialIssuer(hubKey(), time.Hour)
	iss.SetStatusListURL(testListURL)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Issuer: iss, Now: clock.now})
	mustPut(t, r, "urn:a")
	g, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g1", Title: "G", Members: []string{"urn:a"}})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := r.MemberCredential("g1", "urn:a")
	if !bytes.Equal(first, hub.StoredCredential(r, "g1", g.Members[0].Thing)) {
		t.Fatal("a valid credential is not the stored one")
	}
	clock.add(time.Hour)
	list, _ := r.StatusListCredential()
	if _, err := vc.VerifyMembership(first, list, clock.now()); !errors.Is(err, vc.ErrNotValid) {
		t.Fatalf("the first credential after an hour: %v", err)
	}
	renewed, err := r.MemberCredential("g1", "urn:a")
	if err != nil {
		t.Fatal(err)
	}
	m, err := vc.VerifyMembership(renewed, list, clock.now())
	if err != nil {
		t.Fatalf("the renewed credential: %v", err)
	}
	if m.StatusIndex != g.Members[0].StatusIndex || !m.ValidFrom.Equal(clock.now()) {
		t.Fatalf("renewed %+v", m)
	}
	// Read again (an MQTT member subscribing again, say): the same renewal,
	// not signed anew for each read (issue 15 review: every read signed).
	clock.add(time.Second)
	if again, _ := r.MemberCredential("g1", "urn:a"); !bytes.Equal(again, renewed) {
		t.Fatal("a second read of an expired credential signed it again")
	}
	// Another status list URL: renewed once more, naming it, then kept.
	iss.SetStatusListURL(testListURL + "2")
	moved, _ := r.MemberCredential("g1", "urn:a")
	if bytes.Equal(moved, renewed) || !bytes.Contains(moved, []byte(testListURL+"2")) {
		t.Fatalf("after the URL moved: %s", moved)
	}
	if again, _ := r.MemberCredential("g1", "urn:a"); !bytes.Equal(again, moved) {
		t.Fatal("a second read after the URL moved signed again")
	}
	// Renewed again once the renewal itself expires.
	clock.add(time.Hour)
	if later, _ := r.MemberCredential("g1", "urn:a"); bytes.Equal(later, moved) {
		t.Fatal("an expired renewal was answered")
	}
	iss.SetStatusListURL(testListURL)
	list, _ = r.StatusListCredential()
	renewed, _ = r.MemberCredential("g1", "urn:a")
	if _, err := r.RemoveMember(ctx, "g1", "urn:a"); err != nil {
		t.Fatal(err)
	}
	list, _ = r.StatusListCredential()
	if _, err := vc.VerifyMembership(renewed, list, clock.now()); !errors.Is(err, vc.ErrRevoked) {
		t.Fatalf("the renewed credential after removal: %v", err)
	}
}

// A verified Thing's credential names its DID as the subject.
func TestCredentialSubjectIsTheVerifiedDID(t *testing.T) {
	ctx := context.Background()
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Issuer: iss})
	agent := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
	td, err := proof.Sign(testTD("urn:signed", "S"), agent, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(ctx, "urn:signed", td, hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", RequireSigned: true, Members: []string{"urn:signed"}}); err != nil {
		t.Fatal(err)
	}
	cred, _ := r.MemberCredential("g", "urn:signed")
	m, err := vc.ParseMembership(cred)
	if err != nil || m.Subject != credDID(agent) || m.Thing != "urn:signed" {
		t.Fatalf("%+v %v", m, err)
	}
}

// The issuer keeps at most 8 retired lists, dropping the oldest to make
// room. A generation older than every one it keeps (a request that read
// the current generation before more rotations came) was taken for the
// oldest to drop: nothing was dropped, and the loop spun forever holding
// the issuer's lock, so every later status list request hung.
func TestRetiredListOlderThanAllKept(t *testing.T) {
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL("http://hub.local/credentials/status/memberships")
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for gen := 12; gen < 20; gen++ {
		if _, err := iss.RetiredListCredential(gen, now); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := iss.RetiredListCredential(2, now)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a retired list older than every kept one never came back")
	}
	// The 8 kept stay served from what was signed: 9 signatures so far.
	for gen := 13; gen < 20; gen++ {
		if _, err := iss.RetiredListCredential(gen, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := iss.StatusListsSigned(); n != 9 {
		t.Errorf("%d lists signed for 9 generations", n)
	}
}
