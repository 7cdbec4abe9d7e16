package web_test

import (
	"net/http"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// With anonymous operate (the default), a page of another site must not
// invoke or write through a LAN browser (a bodiless POST is a "simple"
// request no CORS preflight stops): 403, and the Thing gets nothing. The
// hub's own pages, allowed origins, programs without Origin and requests
// with a token pass.
func TestAnonymousCrossSiteWritesRefused(t *testing.T) {
	d, lamp := newProxy(t)
	act, on := lampPath+"/actions/dim", lampPath+"/properties/on"
	for _, c := range []refusal{
		{what: "cross-site invocation", method: "POST", path: act, ctype: lmos.MediaJSON, body: "1",
			header: []string{"Authorization", "", "Origin", "http://evil.example"}, status: 403, code: hub.EFORBIDDEN},
		{what: "cross-site write", method: "PUT", path: on, ctype: lmos.MediaJSON, body: "true",
			header: []string{"Authorization", "", "Origin", "http://evil.example:8080"}, status: 403, code: hub.EFORBIDDEN},
	} {
		c.check(t, d)
	}
	if got := lamp.delivered(); len(got) != 0 {
		t.Fatalf("the Thing got %d refused interactions", len(got))
	}
	host := d.url[len("http://"):]
	d.do("POST", act, lmos.MediaJSON, "1", "Authorization", "", "Origin", "http://"+host).want(t, "same-origin anonymous invocation", http.StatusOK)
	d.do("POST", act, lmos.MediaJSON, "1", "Authorization", "").want(t, "anonymous invocation without Origin", http.StatusOK)
	d.do("POST", act, lmos.MediaJSON, "1", "Origin", "http://evil.example").want(t, "cross-site invocation with a token", http.StatusOK)
	if got := lamp.delivered(); len(got) != 3 {
		t.Fatalf("the Thing got %d invocations, want 3", len(got))
	}
}

// Only admin tokens manage tokens: a read or operate token is refused
// (403) and changes nothing; a bad scope or expiry is 400 and creates
// nothing.
func TestTokenAPIScopes(t *testing.T) {
	d := newDirectory(t)
	list := func() []map[string]any {
		var all []map[string]any
		d.do("GET", "/api/tokens", "", "").want(t, "list", http.StatusOK).json(t, &all)
		return all
	}
	var created struct{ ID, Token, Scope, Expires string }
	d.do("POST", "/api/tokens", lmos.MediaJSON, `{"name":"viewer","scope":"read","expires":"30d"}`).want(t, "create read", http.StatusCreated).json(t, &created)
	if created.Scope != "read" || created.Expires == "" || created.Token == "" {
		t.Fatalf("created %+v", created)
	}
	var op struct{ Token string }
	d.do("POST", "/api/tokens", lmos.MediaJSON, `{"scope":"operate"}`).want(t, "create operate", http.StatusCreated).json(t, &op)
	before := len(list())
	for _, c := range []refusal{
		{what: "create with a read token", method: "POST", path: "/api/tokens", ctype: lmos.MediaJSON, body: `{"scope":"admin"}`,
			header: []string{"Authorization", "Bearer " + created.Token}, status: 403, code: hub.EFORBIDDEN},
		{what: "create with an operate token", method: "POST", path: "/api/tokens", ctype: lmos.MediaJSON, body: `{"scope":"admin"}`,
			header: []string{"Authorization", "Bearer " + op.Token}, status: 403, code: hub.EFORBIDDEN},
		{what: "revoke with a read token", method: "DELETE", path: "/api/tokens/" + created.ID,
			header: []string{"Authorization", "Bearer " + created.Token}, status: 403, code: hub.EFORBIDDEN},
		{what: "list with a read token", method: "GET", path: "/api/tokens",
			header: []string{"Authorization", "Bearer " + created.Token}, status: 403, code: hub.EFORBIDDEN},
		{what: "unknown scope", method: "POST", path: "/api/tokens", ctype: lmos.MediaJSON, body: `{"scope":"root"}`, status: 400, code: hub.EINVALID},
		{what: "expiry in the past", method: "POST", path: "/api/tokens", ctype: lmos.MediaJSON, body: `{"expires":"2001-01-01T00:00:00Z"}`, status: 400, code: hub.EINVALID},
		{what: "expiry not a time", method: "POST", path: "/api/tokens", ctype: lmos.MediaJSON, body: `{"expires":"soon"}`, status: 400, code: hub.EINVALID},
	} {
		c.check(t, d)
	}
	all := list()
	if len(all) != before {
		t.Fatalf("%d tokens after the refusals, want %d", len(all), before)
	}
	for _, tk := range all {
		if tk["id"] == created.ID && tk["revoked"] != nil {
			t.Fatal("a read token revoked a token")
		}
	}
	// The read token still reads.
	d.do("GET", "/things", "", "", "Authorization", "Bearer "+created.Token).want(t, "read with the read token", http.StatusOK)
}
