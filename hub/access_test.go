package hub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// securedTD is a TD whose security names a basic scheme: only
// authenticated consumers may interact with it.
func securedTD(id string) []byte {
	return []byte(fmt.Sprintf(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":"Lock",
"securityDefinitions":{"nosec_sc":{"scheme":"nosec"},"basic_sc":{"scheme":"basic"}},"security":["basic_sc"],
"properties":{"locked":{"type":"boolean","forms":[{"href":"x"}]}},"actions":{"open":{"forms":[{"href":"y"}]}}}`, id))
}

// accessFixture is a registry with a nosec Thing and a secured one, and
// tokens of each scope (plus an expired and a revoked one).
type accessFixture struct {
	open, secured hub.Thing
	tokens        *hub.Tokens
	tok           map[string]hub.Token
	now           *time.Time
}

func newAccessFixture(t testing.TB) *accessFixture {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r, err := hub.NewRegistry(db, hub.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	if _, err := r.Put(ctx, "urn:t:lamp", testTD("urn:t:lamp", "Lamp", "actions", `{"toggle":{"forms":[{"href":"t"}]}}`), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(ctx, "urn:t:lock", securedTD("urn:t:lock"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	f := &accessFixture{tok: map[string]hub.Token{}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.now = &now
	f.tokens = hub.NewTokens(db, func() time.Time { return *f.now })
	if f.open, err = r.Get("urn:t:lamp"); err != nil {
		t.Fatal(err)
	}
	if f.secured, err = r.Get("urn:t:lock"); err != nil {
		t.Fatal(err)
	}
	for _, sc := range hub.Scopes {
		_, tk, err := f.tokens.CreateScoped(string(sc), sc, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		f.tok[string(sc)] = tk
	}
	_, tk, err := f.tokens.CreateScoped("short", hub.ScopeAdmin, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f.tok["expiring"] = tk
	_, tk, err = f.tokens.CreateScoped("gone", hub.ScopeAdmin, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tokens.Revoke(tk.ID); err != nil {
		t.Fatal(err)
	}
	f.tok["revoked"] = tk
	return f
}

func TestSecuredFlagFollowsTheTDSecurity(t *testing.T) {
	f := newAccessFixture(t)
	if f.open.Summary.Secured() {
		t.Error("a nosec TD is marked secured")
	}
	if !f.secured.Summary.Secured() {
		t.Error("a TD with a basic scheme is not marked secured")
	}
	// The flag survives a restart (it is stored with the summary).
	db := openStore(t)
	r := newRegistry(t, db, hub.RegistryOptions{})
	if _, err := r.Put(context.Background(), "urn:t:lock", securedTD("urn:t:lock"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r = newRegistry(t, db, hub.RegistryOptions{})
	if th, err := r.Get("urn:t:lock"); err != nil || !th.Summary.Secured() {
		t.Fatalf("after a restart: %+v, err %v; want it secured", th.Summary, err)
	}
}

// The policy table: each (principal, op, thing) has one answer, with the
// code a door turns into its status.
func TestAccessPolicyTable(t *testing.T) {
	f := newAccessFixture(t)
	type principal struct {
		name string
		p    hub.Principal
	}
	anon := principal{"anonymous", hub.AnonymousFrom("10.0.0.9")}
	read := principal{"read", hub.TokenPrincipal(f.tok["read"], "")}
	operate := principal{"operate", hub.TokenPrincipal(f.tok["operate"], "")}
	admin := principal{"admin", hub.TokenPrincipal(f.tok["admin"], "")}
	thing := principal{"thing", hub.ThingPrincipal("urn:t:other", "", true)}
	// A Thing that joined itself under join.mode open: the hub did not
	// pick it, so it has an anonymous client's rights.
	selfJoined := principal{"self-joined thing", hub.ThingPrincipal("urn:t:stranger", "10.0.0.8", false)}
	revoked := principal{"revoked", hub.TokenPrincipal(f.tok["revoked"], "")}
	const ok, e401, e403 = "", hub.EUNAUTHORIZED, hub.EFORBIDDEN
	cases := []struct {
		anonymous, mode string
		who             principal
		op              hub.Op
		secured         bool
		want            string
	}{
		// Default: anonymous operate on Things that do not require security.
		{"operate", "open", anon, hub.OpInvokeAction, false, ok},
		{"operate", "open", anon, hub.OpWriteProperty, false, ok},
		{"operate", "open", anon, hub.OpObserveProperty, false, ok},
		{"operate", "open", anon, hub.OpReadDirectory, false, ok},
		{"operate", "open", anon, hub.OpManage, false, e401},
		// A Thing that requires security: only authenticated operators.
		{"operate", "open", anon, hub.OpInvokeAction, true, e401},
		{"operate", "open", anon, hub.OpWriteProperty, true, e401},
		{"operate", "open", anon, hub.OpObserveProperty, true, e401},
		{"operate", "open", anon, hub.OpReadProperty, true, e401},
		{"operate", "open", anon, hub.OpSubscribeEvent, true, e401},
		{"operate", "open", anon, hub.OpReadDirectory, true, ok}, // its TD stays listed
		{"operate", "open", read, hub.OpInvokeAction, true, e403},
		{"operate", "open", read, hub.OpReadProperty, true, e403},
		{"operate", "open", operate, hub.OpInvokeAction, true, ok},
		{"operate", "open", thing, hub.OpInvokeAction, true, ok},
		{"operate", "open", thing, hub.OpManage, false, e403},
		{"none", "open", thing, hub.OpReadProperty, false, ok},
		{"none", "open", thing, hub.OpInvokeAction, false, ok},
		// A self-joined Thing: what anonymous clients may, and no more.
		{"operate", "open", selfJoined, hub.OpInvokeAction, false, ok},
		{"operate", "open", selfJoined, hub.OpObserveProperty, false, ok},
		{"operate", "open", selfJoined, hub.OpInvokeAction, true, e403},
		{"operate", "open", selfJoined, hub.OpWriteProperty, true, e403},
		{"operate", "open", selfJoined, hub.OpObserveProperty, true, e403},
		{"operate", "open", selfJoined, hub.OpSubscribeEvent, true, e403},
		{"operate", "open", selfJoined, hub.OpReadDirectory, true, ok},
		{"operate", "open", selfJoined, hub.OpManage, false, e403},
		{"none", "open", selfJoined, hub.OpReadDirectory, false, e403},
		{"none", "open", selfJoined, hub.OpReadProperty, false, e403},
		{"read", "open", selfJoined, hub.OpReadProperty, false, ok},
		{"read", "open", selfJoined, hub.OpInvokeAction, false, e403},
		{"operate", "open", admin, hub.OpObserveProperty, true, ok},
		// Scopes.
		{"none", "open", read, hub.OpInvokeAction, false, e403},
		{"none", "open", read, hub.OpReadProperty, false, ok},
		{"none", "open", read, hub.OpReadDirectory, false, ok},
		{"none", "open", operate, hub.OpManage, false, e403},
		{"none", "open", admin, hub.OpManage, false, ok},
		// A read token does not gain what anonymous clients may do: its
		// scope is what it was created for.
		{"operate", "open", read, hub.OpInvokeAction, false, e403},
		// A revoked token is refused whatever it asks.
		{"operate", "open", revoked, hub.OpReadDirectory, false, e401},
		// access.anonymous none and read.
		{"none", "open", anon, hub.OpReadDirectory, false, e401},
		{"none", "open", anon, hub.OpReadProperty, false, e401},
		{"read", "open", anon, hub.OpReadProperty, false, ok},
		{"read", "open", anon, hub.OpInvokeAction, false, e401},
		// approve and closed cap anonymous at read.
		{"operate", "approve", anon, hub.OpInvokeAction, false, e401},
		{"operate", "closed", anon, hub.OpWriteProperty, false, e401},
		{"operate", "closed", anon, hub.OpReadProperty, false, ok},
		{"none", "closed", anon, hub.OpReadProperty, false, e401},
	}
	for _, c := range cases {
		a, err := hub.NewAccess(c.anonymous, c.mode, f.tokens)
		if err != nil {
			t.Fatal(err)
		}
		th := &f.open
		if c.secured {
			th = &f.secured
		}
		err = a.Allow(c.who.p, c.op, th)
		if got := hub.ErrorCode(err); (err == nil && c.want != ok) || (err != nil && got != c.want) {
			t.Errorf("anonymous=%s mode=%s %s %s secured=%v: got %v, want %q", c.anonymous, c.mode, c.who.name, c.op, c.secured, err, c.want)
		}
	}
}

// A token that expires stops working at its expiry, on Verify (a new
// request) and on a principal that was accepted before (an open
// connection).
func TestExpiredTokenIsRefused(t *testing.T) {
	f := newAccessFixture(t)
	a, err := hub.NewAccess("none", "open", f.tokens)
	if err != nil {
		t.Fatal(err)
	}
	p := hub.TokenPrincipal(f.tok["expiring"], "")
	if err := a.Allow(p, hub.OpManage, nil); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	*f.now = f.now.Add(time.Hour)
	if err := a.Allow(p, hub.OpReadDirectory, nil); hub.ErrorCode(err) != hub.EUNAUTHORIZED {
		t.Fatalf("after expiry: got %v, want unauthorized", err)
	}
	all, _ := f.tokens.List()
	for _, tk := range all {
		if tk.ID == f.tok["expiring"].ID && tk.Expires.IsZero() {
			t.Fatal("the expiry was not stored")
		}
	}
	if _, _, err := f.tokens.CreateScoped("past", hub.ScopeRead, f.now.Add(-time.Second)); hub.ErrorCode(err) != hub.EINVALID {
		t.Fatalf("a token that expires in the past: got %v, want invalid", err)
	}
	if _, _, err := f.tokens.CreateScoped("bad", hub.Scope("root"), time.Time{}); hub.ErrorCode(err) != hub.EINVALID {
		t.Fatalf("unknown scope: got %v, want invalid", err)
	}
}

// Tokens stored before scopes existed were admin tokens and stay so.
func TestTokenWithoutScopeIsAdmin(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PutToken(hub.Token{ID: "old", Hash: hub.HashToken("lmos_an-old-admin-token"), Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tokens := hub.NewTokens(db, nil)
	tk, err := tokens.Verify("lmos_an-old-admin-token")
	if err != nil {
		t.Fatal(err)
	}
	a := hub.OpenAccess()
	if err := a.Allow(hub.TokenPrincipal(tk, ""), hub.OpManage, nil); err != nil {
		t.Fatalf("an old token cannot manage: %v", err)
	}
}

// BenchmarkAccessAllow is the cost of one decision: what every MQTT
// PUBLISH, SUBSCRIBE and (for Things not open to all) delivery, and every
// HTTP and WebSocket interaction pays. A token principal rereads its token
// from the store (revocation and expiry take effect at once).
func BenchmarkAccessAllow(b *testing.B) {
	f := newAccessFixture(b)
	a, err := hub.NewAccess("read", "open", f.tokens)
	if err != nil {
		b.Fatal(err)
	}
	anon := hub.AnonymousFrom("10.0.0.1")
	for _, c := range []struct {
		name  string
		p     hub.Principal
		op    hub.Op
		thing *hub.Thing
	}{
		{"anonymous-read-allowed", anon, hub.OpObserveProperty, &f.open},
		{"anonymous-invoke-refused", anon, hub.OpInvokeAction, &f.secured},
		{"thing-invoke-secured", hub.ThingPrincipal("urn:t:x", "", true), hub.OpInvokeAction, &f.secured},
		{"token-invoke-secured", hub.TokenPrincipal(f.tok["operate"], ""), hub.OpInvokeAction, &f.secured},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_ = a.Allow(c.p, c.op, c.thing)
			}
		})
	}
}
