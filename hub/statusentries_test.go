package hub_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// reopenable is a registry on a store in dir that the test closes and
// opens again, as a restart does.
type reopenable struct {
	t    *testing.T
	dir  string
	opts hub.RegistryOptions
	db   *store.DB
	r    *hub.Registry
}

func openReopenable(t *testing.T, opts hub.RegistryOptions) *reopenable {
	o := &reopenable{t: t, dir: t.TempDir(), opts: opts}
	o.open()
	t.Cleanup(o.close)
	return o
}

func (o *reopenable) open() {
	o.t.Helper()
	db, err := store.Open(o.dir, store.Options{})
	if err != nil {
		o.t.Fatal(err)
	}
	r, err := hub.NewRegistry(db, o.opts)
	if err != nil {
		db.Close()
		o.t.Fatal(err)
	}
	o.db, o.r = db, r
}

func (o *reopenable) close() {
	if o.r != nil {
		o.r.Close()
		o.db.Close()
		o.r, o.db = nil, nil
	}
}

func (o *reopenable) restart() {
	o.close()
	o.open()
}

// statusCode is the code and limit of a hub error.
func statusCode(err error) string {
	var he *hub.Error
	if errors.As(err, &he) {
		return he.Code + " " + he.Limit
	}
	return fmt.Sprint(err)
}

// Issue 24 point 3, at a capacity of 128 entries: adding and removing
// members in a loop used every entry for good — every later add, even an
// admin's, after dissolving the group and after a restart, was 507
// groups.statusList. Now a revoked entry comes back once every credential
// it served has expired, never before (a revoked credential must stay
// revoked), across a restart.
func TestStatusEntriesComeBack(t *testing.T) {
	ctx := context.Background()
	const capacity, validity = 128, 2 * time.Hour
	clock := newClock(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC))
	iss := hub.NewCredentialIssuer(hubKey(), validity)
	iss.SetStatusListURL(testListURL)
	h := openReopenable(t, hub.RegistryOptions{Issuer: iss, Now: clock.now,
		Memberships: hub.MembershipLimits{StatusEntries: capacity}})
	for i := range 64 {
		mustPut(t, h.r, fmt.Sprintf("urn:m%d", i))
	}
	if _, err := h.r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G"}); err != nil {
		t.Fatal(err)
	}
	// The burn loop: add and remove members until the list is full.
	var first []byte // a credential revoked early on
	added, firstIndex := 0, -1
	var err error
	for round := 0; round < 4 && err == nil; round++ {
		for i := 0; i < 64 && err == nil; i++ {
			id := fmt.Sprintf("urn:m%d", i)
			var g hub.Group
			if g, err = h.r.AddMember(ctx, "g", id); err == nil {
				added++
				if first == nil {
					first, _ = h.r.MemberCredential("g", id)
					m, _ := g.Member(id)
					firstIndex = m.StatusIndex
				}
				clock.add(time.Second)
				_, err = h.r.RemoveMember(ctx, "g", id)
			}
		}
	}
	if added != capacity || statusCode(err) != "full groups.statusList" {
		t.Fatalf("%d credentials issued, then %v; want %d, then full", added, err, capacity)
	}
	lastRevocation := clock.now()

	// Full: refused, nothing changed (the group, the list).
	refused := func(when string) {
		t.Helper()
		before := h.r.StatusList()
		_, err := h.r.AddMember(ctx, "g", "urn:m0")
		if statusCode(err) != "full groups.statusList" {
			t.Fatalf("%s: %v, want full", when, err)
		}
		g, _ := h.r.Group("g")
		after := h.r.StatusList()
		if len(g.Members) != 0 || !bytes.Equal(before.Bits, after.Bits) || before.Next != after.Next {
			t.Fatalf("%s: a refused add changed the group (%d members) or the list", when, len(g.Members))
		}
	}
	refused("full")
	if err := h.r.DissolveGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G"}); err != nil {
		t.Fatal(err)
	}
	// Before the last credential's validity has passed, no entry is
	// reused: not after a restart either.
	clock.add(validity - time.Minute)
	refused("before every credential expired")
	h.restart()
	refused("after a restart, before expiry")

	// Once the credentials have expired (plus the grace), every entry is
	// back, after a restart too.
	clock.ns.Store(lastRevocation.Add(validity + hub.StatusReuseGrace).UnixNano())
	h.restart()
	for i := range 64 {
		if _, err := h.r.AddMember(ctx, "g", fmt.Sprintf("urn:m%d", i)); err != nil {
			t.Fatalf("add %d after expiry: %v", i, err)
		}
	}
	g, _ := h.r.Group("g")
	reused := false
	for _, m := range g.Members {
		reused = reused || m.StatusIndex == firstIndex
	}
	if !reused {
		t.Fatalf("entry %d of the first credential was not reused", firstIndex)
	}
	// The reused entry's bit is 0 again, and the old credential on it
	// still does not verify: it has expired.
	list, err := h.r.StatusListCredential()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vc.VerifyMembership(first, list, clock.now()); !errors.Is(err, vc.ErrNotValid) {
		t.Fatalf("the old credential on a reused entry: %v, want ErrNotValid", err)
	}
	for _, m := range g.Members {
		cred, _ := h.r.MemberCredential("g", m.Thing)
		if _, err := vc.VerifyMembership(cred, list, clock.now()); err != nil {
			t.Fatalf("a new member's credential: %v", err)
		}
	}
}

// A credential issued with a longer validity than the hub's now (the
// setting was lowered) keeps its entry until it has expired.
func TestStatusEntryWaitsForTheStoredCredential(t *testing.T) {
	ctx := context.Background()
	clock := newClock(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC))
	long := hub.NewCredentialIssuer(hubKey(), 48*time.Hour)
	long.SetStatusListURL(testListURL)
	h := openReopenable(t, hub.RegistryOptions{Issuer: long, Now: clock.now,
		Memberships: hub.MembershipLimits{StatusEntries: 8}})
	mustPut(t, h.r, "urn:a")
	if _, err := h.r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a"}}); err != nil {
		t.Fatal(err)
	}
	h.close()
	short := hub.NewCredentialIssuer(hubKey(), time.Hour)
	short.SetStatusListURL(testListURL)
	h.opts.Issuer = short
	h.open()
	if _, err := h.r.RemoveMember(ctx, "g", "urn:a"); err != nil {
		t.Fatal(err)
	}
	for i := range 7 { // the other 7 entries
		id := fmt.Sprintf("urn:x%d", i)
		mustPut(t, h.r, id)
		if _, err := h.r.AddMember(ctx, "g", id); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, h.r, "urn:late")
	clock.add(3 * time.Hour) // the short validity and the grace have passed, the stored 48 h not
	if _, err := h.r.AddMember(ctx, "g", "urn:late"); statusCode(err) != "full groups.statusList" {
		t.Fatalf("the entry of a 48 h credential reused after 3 h: %v", err)
	}
	clock.add(46 * time.Hour)
	if _, err := h.r.AddMember(ctx, "g", "urn:late"); err != nil {
		t.Fatalf("after the 48 h credential expired: %v", err)
	}
}

// Issuance is paced per manager (token) and per source address: one
// token's loop is refused with 429 groups.issueRate once its burst is
// spent, changing nothing, while another token, an admin and the hub
// itself go on; the bucket refills with time.
func TestIssuancePaced(t *testing.T) {
	clock := newClock(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC))
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Issuer: iss, Now: clock.now,
		Memberships: hub.MembershipLimits{IssueRate: 60, IssueBurst: 4}})
	for i := range 16 {
		mustPut(t, r, fmt.Sprintf("urn:m%d", i))
	}
	tok := hub.WithIssuance(context.Background(), hub.Issuance{Key: "token:one"})
	other := hub.WithIssuance(context.Background(), hub.Issuance{Key: "token:two"})
	admin := hub.WithIssuance(context.Background(), hub.Issuance{Key: "token:root", Admin: true})
	if _, err := r.CreateGroup(tok, hub.GroupSpec{ID: "g", Title: "G"}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := r.AddMember(tok, "g", fmt.Sprintf("urn:m%d", i)); err != nil {
			t.Fatalf("add %d within the burst: %v", i, err)
		}
	}
	before, _ := r.Group("g")
	list := r.StatusList()
	_, err := r.AddMember(tok, "g", "urn:m4")
	if statusCode(err) != "rate-limited groups.issueRate" {
		t.Fatalf("past the burst: %v", err)
	}
	// Removing is not issuing, and a refused add changed nothing.
	if after, _ := r.Group("g"); len(after.Members) != len(before.Members) || !bytes.Equal(r.StatusList().Bits, list.Bits) {
		t.Fatal("a refused add changed the group or the list")
	}
	if _, err := r.RemoveMember(tok, "g", "urn:m0"); err != nil {
		t.Fatal(err)
	}
	// A whole group counts: PUT with new members is refused too.
	if _, _, err := r.PutGroup(tok, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:m5", "urn:m6"}}); statusCode(err) != "rate-limited groups.issueRate" {
		t.Fatalf("a PUT past the burst: %v", err)
	}
	for ctx, id := range map[context.Context]string{other: "urn:m7", admin: "urn:m8", context.Background(): "urn:m9"} {
		if _, err := r.AddMember(ctx, "g", id); err != nil {
			t.Fatalf("another manager (%s): %v", id, err)
		}
	}
	// One credential a minute at 60 an hour.
	clock.add(time.Minute)
	if _, err := r.AddMember(tok, "g", "urn:m4"); err != nil {
		t.Fatalf("a minute later: %v", err)
	}
	if _, err := r.AddMember(tok, "g", "urn:m5"); statusCode(err) != "rate-limited groups.issueRate" {
		t.Fatalf("at once again: %v", err)
	}
	// A write may overdraw: 6 members at once with one credential left,
	// then six minutes to wait.
	clock.add(time.Minute)
	if _, _, err := r.PutGroup(tok, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:m10", "urn:m11", "urn:m12", "urn:m13", "urn:m14", "urn:m15"}}); err != nil {
		t.Fatal(err)
	}
	clock.add(5 * time.Minute)
	if _, err := r.AddMember(tok, "g", "urn:m1"); statusCode(err) != "rate-limited groups.issueRate" {
		t.Fatalf("after an overdraft: %v", err)
	}
}

// The last entries are kept: a manager's writes leave an eighth of the
// list, a self-join's a quarter, an admin's none — so a token (or
// anonymous self-joins) cannot lock an admin out.
func TestStatusReserve(t *testing.T) {
	const capacity = 64
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Issuer: iss,
		Memberships: hub.MembershipLimits{StatusEntries: capacity}})
	var ids []string
	for i := range capacity {
		ids = append(ids, fmt.Sprintf("urn:m%d", i))
		mustPut(t, r, ids[i])
	}
	anon := hub.WithIssuance(context.Background(), hub.Issuance{Key: "addr:10.0.0.1", Anonymous: true})
	tok := hub.WithIssuance(context.Background(), hub.Issuance{Key: "token:one"})
	admin := hub.WithIssuance(context.Background(), hub.Issuance{Key: "token:root", Admin: true})
	if _, err := r.CreateGroup(admin, hub.GroupSpec{ID: "g", Title: "G"}); err != nil {
		t.Fatal(err)
	}
	fill := func(ctx context.Context, from int) int {
		for i := from; i < capacity; i++ {
			if _, err := r.AddMember(ctx, "g", ids[i]); err != nil {
				if statusCode(err) != "full groups.statusList" {
					t.Fatalf("add %d: %v", i, err)
				}
				return i
			}
		}
		return capacity
	}
	n := fill(anon, 0)
	if n != capacity-capacity/4 {
		t.Fatalf("self-joins took %d entries, want %d", n, capacity-capacity/4)
	}
	n = fill(tok, n)
	if n != capacity-capacity/8 {
		t.Fatalf("a token took up to %d entries, want %d", n, capacity-capacity/8)
	}
	if n = fill(admin, n); n != capacity {
		t.Fatalf("an admin took up to %d entries, want %d", n, capacity)
	}
}

// A list burnt by an older hub (its entries revoked without a bound on
// their credentials, issued for up to its default 365 days) is not reused
// before that bound: only then do its entries come back.
func TestStatusEntriesOfAnOlderHub(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)
	clock := newClock(t0.Add(30 * 24 * time.Hour))
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := hub.StatusList{Next: 8, Bits: make([]byte, hub.MaxStatusListEntries/8), Modified: t0}
	old.Bits[0] = 0xff // the 8 entries of a capacity of 8, all revoked
	if err := db.Commit(&hub.Batch{StatusList: &old}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	h := &reopenable{t: t, dir: dir, opts: hub.RegistryOptions{Issuer: iss, Now: clock.now,
		Memberships: hub.MembershipLimits{StatusEntries: 8}}}
	h.open()
	t.Cleanup(h.close)
	mustPut(t, h.r, "urn:a")
	if _, err := h.r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a"}}); statusCode(err) != "full groups.statusList" {
		t.Fatalf("30 days after an older hub's last revocation: %v", err)
	}
	clock.ns.Store(t0.Add(365*24*time.Hour + hub.StatusReuseGrace).UnixNano())
	h.restart()
	if _, err := h.r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a"}}); err != nil {
		t.Fatalf("a year later: %v", err)
	}
}

// Issue 24 point 4: the status list had no validUntil, so a copy fetched
// before a removal (served again by anyone on a plain-HTTP path) verified
// the removed member's credential for good. Now a list is valid for
// groups.statusListValidity; the hub signs it again when half of that has
// passed, so a reader always gets one valid for at least half of it.
func TestStaleStatusListExpires(t *testing.T) {
	ctx := context.Background()
	clock := newClock(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC))
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Issuer: iss, Now: clock.now})
	mustPut(t, r, "urn:a")
	mustPut(t, r, "urn:b")
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a", "urn:b"}}); err != nil {
		t.Fatal(err)
	}
	credA, _ := r.MemberCredential("g", "urn:a")
	credB, _ := r.MemberCredential("g", "urn:b")
	old, err := r.StatusListCredential()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RemoveMember(ctx, "g", "urn:a"); err != nil {
		t.Fatal(err)
	}
	current, _ := r.StatusListCredential()
	if _, err := vc.VerifyMembership(credA, current, clock.now()); !errors.Is(err, vc.ErrRevoked) {
		t.Fatalf("the current list: %v", err)
	}
	// The old copy: accepted within its validity (the bound a verifier
	// relies on), refused from its validUntil on.
	clock.add(hub.DefaultStatusListValidity - time.Second)
	if _, err := vc.VerifyMembership(credA, old, clock.now()); err != nil {
		t.Fatalf("the old list within its validity: %v", err)
	}
	clock.add(time.Second)
	if _, err := vc.VerifyMembership(credA, old, clock.now()); !errors.Is(err, vc.ErrStatusList) {
		t.Fatalf("the old list past its validity: %v, want ErrStatusList", err)
	}
	// The hub's own list, unchanged bits, is signed anew and verifies.
	fresh, _ := r.StatusListCredential()
	if bytes.Equal(fresh, current) {
		t.Fatal("the list was not signed again after half its validity")
	}
	if _, err := vc.VerifyMembership(credB, fresh, clock.now()); err != nil {
		t.Fatalf("a member against the hub's list: %v", err)
	}
	sl, err := vc.VerifyStatusList(fresh, clock.now())
	if err != nil || sl.ValidUntil.Sub(sl.ValidFrom) != hub.DefaultStatusListValidity || sl.TTL != hub.StatusListTTL {
		t.Fatalf("validity %s, ttl %s: %v", sl.ValidUntil.Sub(sl.ValidFrom), sl.TTL, err)
	}
}

// An admin recovers a list whose entries are all revoked and not yet
// reusable (the case of a hub that used them up before entries came
// back): a rotation starts a new generation at a new URL. Every
// credential issued before it is revoked by the old URL's list (a current
// member's too, until it reads its renewed one), current members get
// fresh entries, and the hub issues again at once; after a restart too.
func TestStatusListRotation(t *testing.T) {
	ctx := context.Background()
	const capacity = 16
	clock := newClock(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC))
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	h := openReopenable(t, hub.RegistryOptions{Issuer: iss, Now: clock.now,
		Memberships: hub.MembershipLimits{StatusEntries: capacity}})
	for i := range 4 {
		mustPut(t, h.r, fmt.Sprintf("urn:m%d", i))
	}
	if _, err := h.r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:m0"}}); err != nil {
		t.Fatal(err)
	}
	keptOld, _ := h.r.MemberCredential("g", "urn:m0")
	var removed []byte
	for i := 0; ; i++ {
		id := fmt.Sprintf("urn:m%d", 1+i%3)
		if _, err := h.r.AddMember(ctx, "g", id); err != nil {
			if statusCode(err) != "full groups.statusList" {
				t.Fatal(err)
			}
			break
		}
		if removed == nil {
			removed, _ = h.r.MemberCredential("g", id)
		}
		if _, err := h.r.RemoveMember(ctx, "g", id); err != nil {
			t.Fatal(err)
		}
	}
	rot, err := h.r.RotateStatusList(ctx)
	if err != nil || rot.Generation != 1 || rot.Members != 1 {
		t.Fatalf("rotation %+v %v", rot, err)
	}
	newURL := testListURL + "/1"
	if h.r.StatusListURL() != newURL {
		t.Fatalf("the list is at %q, want %q", h.r.StatusListURL(), newURL)
	}
	h.restart()
	// The hub issues again at once.
	for _, id := range []string{"urn:m1", "urn:m2"} {
		if _, err := h.r.AddMember(ctx, "g", id); err != nil {
			t.Fatalf("after the rotation: %v", err)
		}
	}
	oldList, err := h.r.StatusListCredentialOf(0)
	if err != nil {
		t.Fatal(err)
	}
	current, err := h.r.StatusListCredential()
	if err != nil {
		t.Fatal(err)
	}
	// Every credential of the old generation is revoked by its list,
	// the removed member's and the kept member's alike.
	for name, cred := range map[string][]byte{"removed": removed, "kept, old credential": keptOld} {
		if _, err := vc.VerifyMembership(cred, oldList, clock.now()); !errors.Is(err, vc.ErrRevoked) {
			t.Fatalf("%s against the old URL's list: %v", name, err)
		}
		if _, err := vc.VerifyMembership(cred, current, clock.now()); !errors.Is(err, vc.ErrStatusList) {
			t.Fatalf("%s against the new list: %v (another list)", name, err)
		}
	}
	// The members' credentials, renewed on read, name the new list.
	g, _ := h.r.Group("g")
	seen := map[int]bool{}
	for _, m := range g.Members {
		cred, err := h.r.MemberCredential("g", m.Thing)
		if err != nil {
			t.Fatal(err)
		}
		pm, err := vc.VerifyMembership(cred, current, clock.now())
		if err != nil || pm.StatusListURL != newURL || pm.StatusIndex != m.StatusIndex || seen[m.StatusIndex] {
			t.Fatalf("%s: %+v %v", m.Thing, pm, err)
		}
		seen[m.StatusIndex] = true
	}
	// Removing a member revokes it on the new list.
	if _, err := h.r.RemoveMember(ctx, "g", "urn:m0"); err != nil {
		t.Fatal(err)
	}
	renewed, _ := vc.ParseMembership(keptOld)
	current, _ = h.r.StatusListCredential()
	sl, _ := vc.VerifyStatusList(current, clock.now())
	if sl.ID != newURL || sl.Bits[0] == 0 {
		t.Fatalf("the removal is not on the new list (%s, %x); old index %d", sl.ID, sl.Bits[:2], renewed.StatusIndex)
	}
	if _, err := h.r.StatusListCredentialOf(2); code(err) != hub.ENOTFOUND {
		t.Fatalf("a generation that never was: %v", err)
	}
}

// Credentials are short lived now, so the hub renews a member's stored
// credential once half its validity has passed (same membership, entry
// and list, valid from then), stores it and tells the doors, which push
// it to the member: a member connected longer than the validity never
// holds an expired one. A removed member's is not renewed; one naming a
// retired list is.
func TestCredentialsRenewedBeforeExpiry(t *testing.T) {
	ctx := context.Background()
	const validity = 2 * time.Hour
	clock := newClock(time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC))
	iss := hub.NewCredentialIssuer(hubKey(), validity)
	iss.SetStatusListURL(testListURL)
	h := openReopenable(t, hub.RegistryOptions{Issuer: iss, Now: clock.now})
	var pushed []hub.MembershipChange
	h.r.OnMembershipChange(func(c hub.MembershipChange) { pushed = append(pushed, c) })
	mustPut(t, h.r, "urn:a")
	mustPut(t, h.r, "urn:b")
	if _, err := h.r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a", "urn:b"}}); err != nil {
		t.Fatal(err)
	}
	stored := func(thing string) vc.Membership {
		t.Helper()
		g, _ := h.r.Group("g")
		m, ok := g.Member(thing)
		if !ok {
			t.Fatalf("%s is not a member", thing)
		}
		pm, err := vc.ParseMembership(hub.StoredCredential(h.r, "g", thing))
		if err != nil || pm.StatusIndex != m.StatusIndex {
			t.Fatalf("%s: %+v %v", thing, pm, err)
		}
		return pm
	}
	first := stored("urn:a")
	pushed = nil
	clock.add(validity/2 - time.Minute)
	if n, err := h.r.RenewCredentials(ctx); n != 0 || err != nil || len(pushed) != 0 {
		t.Fatalf("before half the validity: %d renewed, %v, %d pushed", n, err, len(pushed))
	}
	if _, err := h.r.RemoveMember(ctx, "g", "urn:b"); err != nil {
		t.Fatal(err)
	}
	pushed = nil
	clock.add(2 * time.Minute)
	if n, err := h.r.RenewCredentials(ctx); n != 1 || err != nil {
		t.Fatalf("past half the validity: %d renewed, %v", n, err)
	}
	if len(pushed) != 1 || pushed[0] != (hub.MembershipChange{Group: "g", Thing: "urn:a", Added: true, Batch: pushed[0].Batch}) {
		t.Fatalf("doors told %+v", pushed)
	}
	renewed := stored("urn:a")
	if !renewed.ValidFrom.Equal(clock.now().Truncate(time.Second)) || !renewed.ValidUntil.Equal(renewed.ValidFrom.Add(validity)) ||
		renewed.StatusIndex != first.StatusIndex || renewed.ID == first.ID {
		t.Fatalf("renewed %+v, first %+v", renewed, first)
	}
	if n, _ := h.r.RenewCredentials(ctx); n != 0 {
		t.Fatalf("renewed %d again at once", n)
	}
	// Stored: after a restart, the renewed one is the member's.
	h.restart()
	cred, _ := h.r.MemberCredential("g", "urn:a")
	clock.add(validity - time.Minute) // the first one has expired, the renewed one not
	list, _ := h.r.StatusListCredential()
	if m, err := vc.VerifyMembership(cred, list, clock.now()); err != nil || m.ID != renewed.ID {
		t.Fatalf("after a restart: %+v %v", m, err)
	}
	// After a rotation, a credential naming the retired list is due.
	if _, err := h.r.RotateStatusList(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := h.r.RenewCredentials(ctx); n != 1 || err != nil {
		t.Fatalf("after a rotation: %d, %v", n, err)
	}
	if m := stored("urn:a"); m.StatusListURL != testListURL+"/1" {
		t.Fatalf("renewed on %s", m.StatusListURL)
	}
}

// The hub serves the lists of the last 8 retired generations, each signed
// once however often it is read; an older one is gone (a credential naming
// it fails to verify all the same).
func TestRetiredListsBounded(t *testing.T) {
	ctx := context.Background()
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Issuer: iss})
	for range 10 {
		if _, err := r.RotateStatusList(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		for gen := 0; gen <= 10; gen++ {
			b, err := r.StatusListCredentialOf(gen)
			switch {
			case gen < 2:
				if code(err) != hub.ENOTFOUND {
					t.Fatalf("generation %d: %v", gen, err)
				}
			case err != nil:
				t.Fatalf("generation %d: %v", gen, err)
			default:
				sl, err := vc.VerifyStatusList(b, time.Now())
				if err != nil || sl.ID != iss.ListURL(gen) || (gen < 10 && bytes.Count(sl.Bits, []byte{0xff}) != len(sl.Bits)) {
					t.Fatalf("generation %d: %s %v", gen, sl.ID, err)
				}
			}
		}
	}
	if n := iss.StatusListsSigned(); n != 1+8 {
		t.Fatalf("lists signed %d times in three rounds, want 9: each once", n)
	}
}
