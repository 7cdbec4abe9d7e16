package hub_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

func signStatement(t *testing.T, gid, thing, action string, created time.Time, key ed25519.PrivateKey) []byte {
	t.Helper()
	doc, _ := json.Marshal(map[string]string{"group": gid, "thing": thing, "action": action})
	return signTD(t, doc, key, created)
}

// TestSelfMembershipReplayAcrossRestart: the replay memory is in memory
// only, so a statement signed before the registry started is refused as
// stale — a statement accepted just before a restart cannot be replayed
// after it.
func TestSelfMembershipReplayAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var clock atomic.Int64
	clock.Store(time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	open := func() (*hub.Registry, func()) {
		db, err := store.Open(dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := hub.NewRegistry(db, hub.RegistryOptions{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return r, func() { r.Close(); db.Close() }
	}
	key := newKey(t)
	r, closeReg := open()
	if _, err := r.Put(ctx, "urn:self", signTD(t, testTD("urn:self", "S"), key, now()), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", SelfJoin: true}); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(time.Second))
	leave := signStatement(t, "g", "urn:self", hub.StatementLeave, now(), key)
	join := signStatement(t, "g", "urn:self", hub.StatementJoin, now(), key)
	if _, err := r.SelfMembership(ctx, "g", "urn:self", true, join, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SelfMembership(ctx, "g", "urn:self", true, join, "10.0.0.1"); code(err) != hub.ECONFLICT {
		t.Fatalf("replay before the restart: %v", err)
	}
	closeReg()

	clock.Add(int64(time.Second))
	r, closeReg = open()
	defer closeReg()
	// Signed before this start: refused, though within the skew window.
	if _, err := r.SelfMembership(ctx, "g", "urn:self", false, leave, "10.0.0.1"); code(err) != hub.ECONFLICT {
		t.Fatalf("statement from before the restart: %v", err)
	}
	if !r.IsMember("g", "urn:self") {
		t.Fatal("the stale leave removed the member")
	}
	clock.Add(int64(time.Second))
	fresh := signStatement(t, "g", "urn:self", hub.StatementLeave, now(), key)
	if _, err := r.SelfMembership(ctx, "g", "urn:self", false, fresh, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if r.IsMember("g", "urn:self") {
		t.Fatal("still a member after a fresh leave")
	}
}

// TestSelfMembershipChargesTheProofBudget: statements count against
// security.verifyRate per source like every proof.
func TestSelfMembershipChargesTheProofBudget(t *testing.T) {
	ctx := context.Background()
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Security: hub.SecurityOptions{VerifyRate: 0.001, VerifyBurst: 2}})
	key := newKey(t)
	if _, err := r.Put(ctx, "urn:self", signTD(t, testTD("urn:self", "S"), key, time.Now()), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", SelfJoin: true}); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(time.Minute)
	for i := range 3 {
		st := signStatement(t, "g", "urn:self", hub.StatementJoin, base.Add(time.Duration(i)*time.Second), key)
		_, err := r.SelfMembership(ctx, "g", "urn:self", true, st, "10.0.0.7")
		if i < 2 && err != nil {
			t.Fatalf("statement %d: %v", i, err)
		}
		if i == 2 && hub.RefusalReason(err) != "security.verifyRate" {
			t.Fatalf("third statement: %v, want security.verifyRate", err)
		}
	}
}

// TestGroupManageAccess: operate and admin tokens manage groups; a read
// token, anonymous clients and Things (even admitted ones, which operate
// other Things) do not.
func TestGroupManageAccess(t *testing.T) {
	a, err := hub.NewAccess(hub.AnonymousOperate, "open", nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := func(s hub.Scope) hub.Principal { return hub.TokenPrincipal(hub.Token{ID: string(s), Scope: s}, "") }
	for _, c := range []struct {
		p    hub.Principal
		want string
	}{
		{tok(hub.ScopeAdmin), ""},
		{tok(hub.ScopeOperate), ""},
		{tok(hub.ScopeRead), hub.EFORBIDDEN},
		{hub.AnonymousFrom("10.0.0.1"), hub.EUNAUTHORIZED},
		{hub.ThingPrincipal("urn:t", "10.0.0.1", true), hub.EFORBIDDEN},
		{hub.ThingPrincipal("urn:t", "10.0.0.1", false), hub.EFORBIDDEN},
	} {
		if got := code(a.Allow(c.p, hub.OpManageGroups, nil)); got != c.want {
			t.Errorf("%s: %q, want %q", c.p, got, c.want)
		}
	}
}

// TestPutGroupIfRefusesAChangedGroup: a conditional write fails when the
// group changed after it was read, and changes nothing.
func TestPutGroupIfRefusesAChangedGroup(t *testing.T) {
	ctx := context.Background()
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	g, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.PutGroup(ctx, hub.GroupSpec{ID: "g", Title: "Changed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.PutGroupIf(ctx, hub.GroupSpec{ID: "g", Title: "Stale"}, g.Modified); code(err) != hub.EPRECONDITION {
		t.Fatalf("stale write: %v", err)
	}
	if err := r.DissolveGroupIf(ctx, "g", g.Modified); code(err) != hub.EPRECONDITION {
		t.Fatalf("stale dissolve: %v", err)
	}
	if now, _ := r.Group("g"); now.Title != "Changed" {
		t.Fatalf("title %q", now.Title)
	}
}

// A Thing joins a group by itself at most MaxSelfJoinsPerHour times within
// an hour: each join takes a status list entry for good (a revocation is
// final), so a join/leave loop would otherwise use the hub's 131,072 up and
// no Thing could join any group again. The refused join changes nothing
// and spends no entry; an hour later the Thing joins again.
func TestSelfJoinsPerHourBounded(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Now: now, Issuer: iss})
	key := newKey(t)
	if _, err := r.Put(ctx, "urn:self", signTD(t, testTD("urn:self", "S"), key, now()), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", SelfJoin: true}); err != nil {
		t.Fatal(err)
	}
	step := func(join bool) error {
		clock.Add(int64(time.Second))
		action := hub.StatementLeave
		if join {
			action = hub.StatementJoin
		}
		_, err := r.SelfMembership(ctx, "g", "urn:self", join, signStatement(t, "g", "urn:self", action, now(), key), "")
		return err
	}
	for i := range hub.MaxSelfJoinsPerHour {
		if err := step(true); err != nil {
			t.Fatalf("join %d: %v", i+1, err)
		}
		if err := step(false); err != nil {
			t.Fatalf("leave %d: %v", i+1, err)
		}
	}
	next := r.StatusList().Next
	if err := step(true); code(err) != hub.ERATELIMIT {
		t.Fatalf("join %d within the hour: %v", hub.MaxSelfJoinsPerHour+1, err)
	}
	if r.IsMember("g", "urn:self") || r.StatusList().Next != next {
		t.Fatalf("the refused join changed something: member %v, next entry %d (was %d)", r.IsMember("g", "urn:self"), r.StatusList().Next, next)
	}
	clock.Add(int64(time.Hour))
	if err := step(true); err != nil || !r.IsMember("g", "urn:self") {
		t.Fatalf("a join an hour later: %v", err)
	}
}
