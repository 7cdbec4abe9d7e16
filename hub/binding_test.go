package hub_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func didOf(priv ed25519.PrivateKey) string { return proof.DID(priv.Public().(ed25519.PublicKey)) }

// signTD signs doc with priv as of created.
func signTD(t testing.TB, doc []byte, priv ed25519.PrivateKey, created time.Time) []byte {
	t.Helper()
	out, err := proof.Sign(doc, priv, created)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// editJSON decodes doc, lets edit change it and encodes it again.
func editJSON(t testing.TB, doc []byte, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func editProof(t testing.TB, doc []byte, edit func(p map[string]any)) []byte {
	return editJSON(t, doc, func(m map[string]any) { edit(m["proof"].(map[string]any)) })
}

// state is what a refused write must leave alone: the stored document,
// its verification and the binding.
type state struct {
	raw      string
	verified string
	binding  hub.Binding
}

func stateOf(t *testing.T, r *hub.Registry, id string) state {
	t.Helper()
	raw, _ := r.Raw(id)
	th, _ := r.Get(id)
	b, _ := r.Binding(id)
	return state{raw: string(raw), verified: th.Meta.Verified, binding: b}
}

// The first signed description binds its id to the signer's DID in the
// same commit as the Thing; the Thing is shown verified, and the binding
// survives a restart.
func TestFirstSignedDescriptionBindsTheID(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	key := newKey(t)
	td := signTD(t, testTD("urn:b:1", "Lamp"), key, time.Now())
	before := s.commits.Load()
	if _, err := r.Put(context.Background(), "urn:b:1", td, hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("the signed write took %d commits, want 1 (Thing and binding together)", n)
	}
	b, err := r.Binding("urn:b:1")
	if err != nil || b.DID != didOf(key) {
		t.Fatalf("binding = %+v, %v; want %s", b, err, didOf(key))
	}
	th, _ := r.Get("urn:b:1")
	if th.Meta.Verified != didOf(key) {
		t.Errorf("Verified = %q", th.Meta.Verified)
	}
	enc, _, _, err := r.EnrichedTagged("urn:b:1")
	var doc map[string]any
	if err == nil {
		err = json.Unmarshal(enc, &doc)
	}
	if err != nil || doc["lmos:verified"] != didOf(key) {
		t.Errorf("enriched lmos:verified = %v, %v", doc["lmos:verified"], err)
	}
	r.Close()
	r2 := newRegistry(t, s, hub.RegistryOptions{})
	if b2, err := r2.Binding("urn:b:1"); err != nil || b2.DID != b.DID || !b2.Created.Equal(b.Created) {
		t.Errorf("after a restart: binding %+v, %v; want %+v", b2, err, b)
	}
}

// Every way to write a bound id without its key's fresh proof is refused
// with its own code, and leaves the Thing and the binding as they were.
func TestBoundIDRefusesWithoutItsKey(t *testing.T) {
	s := openStore(t)
	clock := &fakeClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock.Now})
	owner, other := newKey(t), newKey(t)
	id := "urn:b:bound"
	t0 := clock.Now().Add(-time.Minute)
	first := signTD(t, testTD(id, "First"), owner, t0)
	if _, err := r.Put(context.Background(), id, first, hub.Origin{Source: hub.SourceHTTP, Addr: "10.0.0.9"}); err != nil {
		t.Fatal(err)
	}
	// A second description by the owner: the first is now an old one.
	mid := signTD(t, testTD(id, "Mid"), owner, t0.Add(30*time.Second))
	if _, err := r.Put(context.Background(), id, mid, hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	newer := testTD(id, "Second")
	good := signTD(t, newer, owner, clock.Now())
	cases := []struct {
		name, code string
		doc        []byte
		admin      bool
	}{
		{"proof by another key", hub.EFORBIDDEN, signTD(t, newer, other, clock.Now()), false},
		{"proof by another key, admin", hub.EFORBIDDEN, signTD(t, newer, other, clock.Now()), true},
		{"tampered after signing", hub.EINVALID, editJSON(t, good, func(m map[string]any) { m["title"] = "Evil" }), false},
		{"unknown cryptosuite", hub.EINVALID, editProof(t, good, func(p map[string]any) { p["cryptosuite"] = "ecdsa-rdfc-2019" }), false},
		{"unknown proof type", hub.EINVALID, editProof(t, good, func(p map[string]any) { p["type"] = "Ed25519Signature2020" }), false},
		{"malformed multibase", hub.EINVALID, editProof(t, good, func(p map[string]any) { p["proofValue"] = "z0OIl" }), false},
		{"proofValue not multibase", hub.EINVALID, editProof(t, good, func(p map[string]any) { p["proofValue"] = "u" + strings.Repeat("A", 80) }), false},
		{"malformed did:key", hub.EINVALID, editProof(t, good, func(p map[string]any) { p["verificationMethod"] = "did:key:z6MkBAD#z6MkBAD" }), false},
		{"not did:key", hub.EINVALID, editProof(t, good, func(p map[string]any) { p["verificationMethod"] = "did:web:example.com#key-1" }), false},
		{"proof over proof.MaxProofBytes", hub.EINVALID, editProof(t, good, func(p map[string]any) { p["domain"] = strings.Repeat("x", proof.MaxProofBytes) }), false},
		{"proof not an object", hub.EINVALID, editJSON(t, good, func(m map[string]any) { m["proof"] = "yes" }), false},
		{"no created", hub.EINVALID, editProof(t, good, func(p map[string]any) { delete(p, "created") }), false},
		{"created beyond the skew", hub.EINVALID, signTD(t, newer, owner, clock.Now().Add(hub.DefaultMaxClockSkew+time.Minute)), false},
		{"replay of the older description", hub.ECONFLICT, first, false},
		{"older than the bound one", hub.ECONFLICT, signTD(t, newer, owner, t0.Add(10*time.Second)), false},
		{"same time as the bound one, another document", hub.ECONFLICT, signTD(t, newer, owner, t0.Add(30*time.Second)), false},
		{"unsigned", hub.EFORBIDDEN, newer, false},
	}
	want := stateOf(t, r, id)
	for _, c := range cases {
		_, err := r.Put(context.Background(), id, c.doc, hub.Origin{Source: hub.SourceMQTT, Addr: "10.0.0.66", Admin: c.admin})
		if hub.ErrorCode(err) != c.code {
			t.Errorf("%s: %v (code %q), want %s", c.name, err, hub.ErrorCode(err), c.code)
		}
		if got := stateOf(t, r, id); got != want {
			t.Errorf("%s changed the Thing or its binding: %+v, want %+v", c.name, got, want)
		}
	}
	// The owner's fresh proof is accepted; so is an admin's unsigned
	// override, which leaves the id bound but the Thing unverified.
	if _, err := r.Put(context.Background(), id, good, hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatalf("owner's newer description: %v", err)
	}
	if st := stateOf(t, r, id); st.verified != didOf(owner) || !st.binding.Created.Equal(clock.Now().Truncate(time.Second)) {
		t.Errorf("after the owner's update: %+v", st)
	}
	if _, err := r.Put(context.Background(), id, testTD(id, "Admin"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatalf("admin's unsigned override: %v", err)
	}
	if st := stateOf(t, r, id); st.verified != "" || st.binding.DID != didOf(owner) {
		t.Errorf("after the admin's override: %+v", st)
	}
}

// A binding outlives its Thing: once deleted, the id is still its key's,
// and the last signed description cannot bring it back either.
func TestBindingOutlivesTheThing(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	owner, other := newKey(t), newKey(t)
	id := "urn:b:gone"
	td := signTD(t, testTD(id, "T"), owner, time.Now().Add(-time.Hour))
	ctx := context.Background()
	if _, err := r.Put(ctx, id, td, hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatal(err)
	}
	// The same signed description again is no replay while it is the
	// one stored (an agent re-joining with it).
	if _, err := r.Put(ctx, id, td, hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatalf("the stored description sent again: %v", err)
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string][]byte{
		"another key":                           signTD(t, testTD(id, "T"), other, time.Now()),
		"unsigned":                              testTD(id, "T"),
		"the last signed description, replayed": td,
	} {
		if _, err := r.Put(ctx, id, doc, hub.Origin{Source: hub.SourceWS, Addr: "10.0.0.7"}); err == nil {
			t.Errorf("%s re-registered a deleted bound id", name)
		}
		if _, err := r.Get(id); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Errorf("%s: the Thing is back: %v", name, err)
		}
	}
	if _, err := r.Put(ctx, id, signTD(t, testTD(id, "T"), owner, time.Now()), hub.Origin{Source: hub.SourceWS}); err != nil {
		t.Errorf("the owner's fresh proof: %v", err)
	}
}

// Two keys racing for a new id in one batch: exactly one binds it.
func TestRacingKeysBindOnce(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a, b := newKey(t), newKey(t)
	id := "urn:b:race"
	put := func(k ed25519.PrivateKey) func() error {
		doc := signTD(t, testTD(id, "T"), k, time.Now())
		return func() error {
			_, err := r.Put(context.Background(), id, doc, hub.Origin{Source: hub.SourceMQTT})
			return err
		}
	}
	errs := queueBehindGate(t, s, r, put(a), put(b))
	if errs[1] != nil || hub.ErrorCode(errs[2]) != hub.EFORBIDDEN {
		t.Fatalf("first %v, second %v; want the first bound and the second refused", errs[1], errs[2])
	}
	if bd, _ := r.Binding(id); bd.DID != didOf(a) {
		t.Errorf("bound to %s, want %s", bd.DID, didOf(a))
	}
}

// security.requireSigned refuses unsigned descriptions (403, counted by
// the setting) on every write path, and stores nothing.
func TestRequireSigned(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{Security: hub.SecurityOptions{RequireSigned: true}})
	ctx := context.Background()
	check := func(name string, err error) {
		t.Helper()
		if hub.ErrorCode(err) != hub.EFORBIDDEN || hub.RefusalReason(err) != "security.requireSigned" {
			t.Errorf("%s: %v (reason %q)", name, err, hub.RefusalReason(err))
		}
	}
	_, err := r.Put(ctx, "urn:r:1", testTD("urn:r:1", "T"), hub.Origin{Source: hub.SourceHTTP, Admin: true})
	check("unsigned put by an admin", err)
	_, err = r.Prepare(testTD("urn:r:1", "T"))
	check("unsigned prepare", err)
	_, err = r.Create(ctx, []byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","title":"A","securityDefinitions":{"n":{"scheme":"nosec"}},"security":"n"}`), hub.Origin{Admin: true})
	check("unsigned create", err)
	if n := r.Count(); n != 0 {
		t.Errorf("%d Things stored", n)
	}
	key := newKey(t)
	if _, err := r.Put(ctx, "urn:r:1", signTD(t, testTD("urn:r:1", "T"), key, time.Now()), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatalf("signed put: %v", err)
	}
	// A patch leaves a document whose old proof no longer holds: refused;
	// removing the proof leaves it unsigned: refused too.
	if err := r.Patch(ctx, "urn:r:1", []byte(`{"title":"New"}`)); hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("patch under a stale proof: %v", err)
	}
	check("patch removing the proof", r.Patch(ctx, "urn:r:1", []byte(`{"proof":null}`)))
	if th, _ := r.Get("urn:r:1"); th.Summary.Title != "T" || th.Meta.Verified != didOf(key) {
		t.Errorf("refused patches changed the Thing: %q %q", th.Summary.Title, th.Meta.Verified)
	}
}

// A signed description without an id cannot be created: the hub would
// insert an id its proof does not cover.
func TestSignedCreateRefused(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	doc := signTD(t, []byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","title":"A","securityDefinitions":{"n":{"scheme":"nosec"}},"security":"n"}`), newKey(t), time.Now())
	if _, err := r.Create(context.Background(), doc, hub.Origin{Admin: true}); hub.ErrorCode(err) != hub.EINVALID || r.Count() != 0 {
		t.Errorf("signed create: %v, %d Things", err, r.Count())
	}
}

// Verifications are rate-limited per source (security.verifyRate); an
// admin's (from "") are not, and unsigned writes cost nothing.
func TestVerificationRateLimitedPerSource(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Now: clock.Now, Security: hub.SecurityOptions{VerifyRate: 1, VerifyBurst: 2}})
	doc := signTD(t, testTD("urn:v:1", "T"), newKey(t), clock.Now())
	for i := range 2 {
		if _, err := r.PrepareFrom(doc, "10.0.0.1"); err != nil {
			t.Fatalf("verification %d within the burst: %v", i, err)
		}
	}
	if _, err := r.PrepareFrom(doc, "10.0.0.1"); hub.ErrorCode(err) != hub.ERATELIMIT || hub.RefusalReason(err) != "security.verifyRate" {
		t.Errorf("over the burst: %v", err)
	}
	if _, err := r.PrepareFrom(testTD("urn:v:2", "T"), "10.0.0.1"); err != nil {
		t.Errorf("an unsigned description is not verified, so not limited: %v", err)
	}
	if _, err := r.PrepareFrom(doc, "10.0.0.2"); err != nil {
		t.Errorf("another source: %v", err)
	}
	for range 5 {
		if _, err := r.PrepareFrom(doc, ""); err != nil {
			t.Fatalf("an unlimited writer: %v", err)
		}
	}
}

// An admin re-binds an id to a new key (rotation): the old key is refused
// from then on, the Thing loses lmos:verified until the new key signs, and
// the replay order starts afresh.
func TestRebind(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	ctx := context.Background()
	oldKey, newK := newKey(t), newKey(t)
	id := "urn:b:rot"
	if _, err := r.Put(ctx, id, signTD(t, testTD(id, "T"), oldKey, time.Now()), hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatal(err)
	}
	sub, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	if _, err := r.Rebind(ctx, id, "did:web:example.com"); hub.ErrorCode(err) != hub.EINVALID {
		t.Errorf("re-bind to a did:web: %v", err)
	}
	b, err := r.Rebind(ctx, id, didOf(newK))
	if err != nil || b.DID != didOf(newK) {
		t.Fatalf("re-bind: %+v, %v", b, err)
	}
	if ev := <-sub.C; ev.Type != hub.EventBinding || ev.ID != id || ev.DID != didOf(newK) {
		t.Errorf("event %+v", ev)
	}
	if th, _ := r.Get(id); th.Meta.Verified != "" {
		t.Errorf("still verified by the old key: %q", th.Meta.Verified)
	}
	if _, err := r.Put(ctx, id, signTD(t, testTD(id, "T2"), oldKey, time.Now().Add(time.Minute)), hub.Origin{Source: hub.SourceMQTT}); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Errorf("old key after re-bind: %v", err)
	}
	if _, err := r.Put(ctx, id, signTD(t, testTD(id, "T3"), newK, time.Now().Add(-time.Hour)), hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Errorf("new key: %v", err)
	}
	if th, _ := r.Get(id); th.Meta.Verified != didOf(newK) {
		t.Errorf("verified %q after the new key signed", th.Meta.Verified)
	}
	if err := r.Unbind(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Binding(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("binding after unbind: %v", err)
	}
	if err := r.Unbind(ctx, id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("unbind of an unbound id: %v", err)
	}
}

// A failed commit stores neither the Thing nor its binding: the id is
// still free, and the next signed description binds it.
func TestFailedCommitBindsNothing(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a, b := newKey(t), newKey(t)
	id := "urn:b:fail"
	s.fail.Store(true)
	if _, err := r.Put(context.Background(), id, signTD(t, testTD(id, "A"), a, time.Now()), hub.Origin{Source: hub.SourceMQTT}); hub.ErrorCode(err) != hub.EINTERNAL {
		t.Fatalf("put under a failing commit: %v", err)
	}
	s.fail.Store(false)
	if _, err := r.Binding(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("binding after a failed commit: %v", err)
	}
	if _, err := r.Put(context.Background(), id, signTD(t, testTD(id, "B"), b, time.Now()), hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatalf("another key after the failed commit: %v", err)
	}
	if bd, _ := r.Binding(id); bd.DID != didOf(b) {
		t.Errorf("bound to %s, want %s", bd.DID, didOf(b))
	}
}

// An expired registration keeps its binding: another key cannot take the
// id, nor can its last description be replayed; the owner's fresh one can.
func TestExpiryKeepsTheBinding(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Now: clock.Now})
	ctx := context.Background()
	owner, other := newKey(t), newKey(t)
	id := "urn:b:ttl"
	last := signTD(t, testTD(id, "T", "registration", `{"ttl": 60}`), owner, clock.Now())
	if _, err := r.Put(ctx, id, last, hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	if _, err := r.Get(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("not expired: %v", err)
	}
	if _, err := r.Put(ctx, id, signTD(t, testTD(id, "Evil"), other, clock.Now()), hub.Origin{Source: hub.SourceMQTT}); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Errorf("another key after expiry: %v", err)
	}
	if _, err := r.Put(ctx, id, last, hub.Origin{Source: hub.SourceMQTT}); hub.ErrorCode(err) != hub.ECONFLICT {
		t.Errorf("the expired description replayed: %v", err)
	}
	if _, err := r.Put(ctx, id, signTD(t, testTD(id, "T"), owner, clock.Now()), hub.Origin{Source: hub.SourceMQTT}); err != nil {
		t.Errorf("the owner's fresh description: %v", err)
	}
}

// A signed description with a member name twice in one object is refused
// as an unsigned one is: 400 naming the second occurrence, whatever else is
// wrong with it (the hub leaves finding it to the proof's canonicalization
// and looks for it itself only once the description is refused).
func TestSignedDuplicateMemberRefused(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{Security: hub.SecurityOptions{RequireSigned: true}})
	key := newKey(t)
	signed := string(signTD(t, testTD("urn:d:1", "T"), key, time.Now()))
	if _, err := r.Prepare([]byte(signed)); err != nil {
		t.Fatalf("the signed description itself: %v", err)
	}
	for _, c := range []struct{ name, doc, field string }{
		{"top level", strings.Replace(signed, `"title":"T"`, `"title":"T","title":"T"`, 1), "/title"},
		{"in the proof", strings.Replace(signed, `"type":"DataIntegrityProof"`, `"type":"DataIntegrityProof","type":"DataIntegrityProof"`, 1), "/proof/type"},
		{"nested", strings.Replace(signed, `"securityDefinitions":{`, `"securityDefinitions":{"x":{"scheme":"nosec"},"x":{"scheme":"nosec"},`, 1), "/securityDefinitions/x"},
		{"and an invalid TD", strings.Replace(signed, `"title":"T"`, `"title":7,"title":7`, 1), "/title"},
	} {
		if c.doc == signed {
			t.Fatalf("%s: the edit changed nothing", c.name)
		}
		_, err := r.Prepare([]byte(c.doc))
		if f := hub.ErrorFields(err); hub.ErrorCode(err) != hub.EINVALID || len(f) != 1 || f[0].Field != c.field ||
			!strings.Contains(err.Error(), "occurs twice") {
			t.Errorf("%s: %v %v, want the duplicate at %s", c.name, err, f, c.field)
		}
	}
}

// A JSONPath query may select Things by their proof (here, those signed
// by one key): the Summary's prefilter must hold the proof's strings too,
// or it skips every signed Thing such a query asks for.
func TestJSONPathSelectsByProof(t *testing.T) {
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	k1, k2 := newKey(t), newKey(t)
	now := time.Now()
	for _, w := range []struct {
		id  string
		doc []byte
	}{
		{"urn:p:1", signTD(t, testTD("urn:p:1", "One"), k1, now)},
		{"urn:p:2", signTD(t, testTD("urn:p:2", "Two"), k2, now)},
		{"urn:p:3", signTD(t, testTD("urn:p:3", "Three"), k1, now)},
		{"urn:p:4", testTD("urn:p:4", "Four")},
	} {
		if _, err := r.Put(context.Background(), w.id, w.doc, hub.Origin{Source: hub.SourceHTTP}); err != nil {
			t.Fatalf("%s: %v", w.id, err)
		}
	}
	vm := proof.VerificationMethod(k1.Public().(ed25519.PublicKey))
	for q, want := range map[string]string{
		"$[?@.proof.verificationMethod=='" + vm + "'].id": `["urn:p:1","urn:p:3"]`,
		"$[?@.proof.cryptosuite=='eddsa-jcs-2022'].id":    `["urn:p:1","urn:p:2","urn:p:3"]`,
		"$[?@.title=='Four'].id":                          `["urn:p:4"]`,
	} {
		got, err := r.SearchJSONPath(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		gj, _ := json.Marshal(got)
		var ids []string
		_ = json.Unmarshal(gj, &ids)
		slices.Sort(ids)
		if gs, _ := json.Marshal(ids); string(gs) != want {
			t.Errorf("%s = %s, want %s", q, gs, want)
		}
	}
}
