package web_test

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/web"
)

func TestStatusHealthAndMetrics(t *testing.T) {
	var broker error
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) {
		c.Checks = map[string]func() error{"store": func() error { return nil }, "broker": func() error { return broker }}
		c.StoreSize = func() int64 { return 4096 }
		c.Metrics = []func(io.Writer){func(w io.Writer) { fmt.Fprintln(w, "lmos_test_other_adapter 7") }}
	})
	_, key, _ := ed25519.GenerateKey(nil)
	signed, err := proof.Sign([]byte(thingTD("urn:example:a", "A")), key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d.do("PUT", "/things/urn:example:a", tdType, string(signed)).want(t, "PUT", http.StatusCreated)

	var st struct {
		Name, HubID, Version string
		Things               int
		Revision             uint64
		StoreBytes           int64
		Components           map[string]string
	}
	r := d.do("GET", "/api/status", "", "").want(t, "status", http.StatusOK)
	r.json(t, &st)
	if st.Name != "test-hub" || st.HubID == "" || st.Version != "test" || st.Things != 1 || st.Revision == 0 ||
		st.StoreBytes != 4096 || st.Components["store"] != "up" || st.Components["broker"] != "up" {
		t.Fatalf("status %s", r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != lmos.MediaJSON {
		t.Fatalf("status Content-Type %q", ct)
	}

	var health struct {
		Status     string
		Components map[string]string
	}
	d.do("GET", "/healthz", "", "", "Authorization", "").want(t, "healthz up", http.StatusOK).json(t, &health)
	if health.Status != "up" || len(health.Components) != 2 {
		t.Fatalf("healthz %+v", health)
	}
	broker = errors.New("not listening")
	d.do("GET", "/healthz", "", "").want(t, "healthz down", http.StatusServiceUnavailable).json(t, &health)
	if health.Status != "down" || health.Components["broker"] != "not listening" || health.Components["store"] != "up" {
		t.Fatalf("healthz with the broker down %+v", health)
	}

	r = d.do("GET", "/metrics", "", "", "Authorization", "").want(t, "metrics", http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Fatalf("metrics Content-Type %q", ct)
	}
	body := string(r.body)
	for _, line := range []string{"lmos_registry_things 1", "lmos_store_size_bytes 4096", "lmos_test_other_adapter 7",
		"lmos_verify_signatures_total 1", "lmos_verify_batched_total 0", "lmos_verify_batch_failures_total 0",
		`lmos_http_requests_total{route="PUT /things/{id}",code="201"} 1`} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Fatalf("metrics without %q:\n%s", line, grepLines(body, "lmos_"))
		}
	}
}

type tokenJSON struct{ ID, Name, Created, Revoked, Token string }

func (d *directory) tokens(t *testing.T) []tokenJSON {
	t.Helper()
	var all []tokenJSON
	d.do("GET", "/api/tokens", "", "").want(t, "list tokens", http.StatusOK).json(t, &all)
	return all
}

func TestTokensCreateListRevoke(t *testing.T) {
	d := newDirectory(t)
	var tok tokenJSON
	d.do("POST", "/api/tokens", lmos.MediaJSON, `{"name":"ci"}`).want(t, "create", http.StatusCreated).json(t, &tok)
	if tok.ID == "" || tok.Name != "ci" || tok.Token == "" || tok.Created == "" {
		t.Fatalf("created token %+v", tok)
	}
	all := d.tokens(t)
	if len(all) != 2 || all[0].Token != "" || all[1].Token != "" {
		t.Fatalf("list shows %+v; want two tokens and no secret", all)
	}
	// The new token may write.
	d.do("PUT", "/things/urn:example:a", tdType, thingTD("urn:example:a", "A"), "Authorization", "Bearer "+tok.Token).
		want(t, "PUT with the new token", http.StatusCreated)

	for _, c := range []refusal{
		{what: "create without token", method: "POST", path: "/api/tokens", ctype: lmos.MediaJSON, body: `{"name":"x"}`,
			header: []string{"Authorization", ""}, status: 401, code: hub.EUNAUTHORIZED},
		{what: "list without token", method: "GET", path: "/api/tokens", header: []string{"Authorization", ""}, status: 401, code: hub.EUNAUTHORIZED},
		{what: "create as text", method: "POST", path: "/api/tokens", ctype: "text/plain", body: `{"name":"x"}`, status: 415, code: hub.EUNSUPPORTED},
		{what: "create not JSON", method: "POST", path: "/api/tokens", ctype: lmos.MediaJSON, body: `{"name":`, status: 400, code: hub.EINVALID},
		{what: "revoke unknown", method: "DELETE", path: "/api/tokens/nope", status: 404, code: hub.ENOTFOUND},
	} {
		c.check(t, d)
	}
	if n := len(d.tokens(t)); n != 2 {
		t.Fatalf("%d tokens after the refusals, want 2", n)
	}

	d.do("DELETE", "/api/tokens/"+tok.ID, "", "").want(t, "revoke", http.StatusNoContent)
	r := d.do("PUT", "/things/urn:example:a", tdType, thingTD("urn:example:a", "A2"), "Authorization", "Bearer "+tok.Token)
	r.problem(t, "PUT with the revoked token", http.StatusUnauthorized, hub.EUNAUTHORIZED)
	if v := r.header.Get("WWW-Authenticate"); v != `Bearer realm="lmos-hub", error="invalid_token"` {
		t.Fatalf("WWW-Authenticate %q for a revoked token", v)
	}
	var td map[string]any
	d.do("GET", "/things/urn:example:a?enriched=false", "", "").want(t, "GET", http.StatusOK).json(t, &td)
	if td["title"] != "A" {
		t.Fatalf("a write with a revoked token changed the TD: %v", td)
	}
	for _, v := range d.tokens(t) {
		if v.ID == tok.ID && v.Revoked == "" {
			t.Fatalf("revoked token listed without revoked: %+v", v)
		}
	}
}

func TestPrivateHubWantsATokenForReads(t *testing.T) {
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) { c.Access, _ = hub.NewAccess(hub.AnonymousNone, "open", nil) })
	for _, path := range []string{"/things", "/events", "/api/status", "/.well-known/wot", "/search/text?q=x"} {
		r := refusal{what: "GET " + path + " without token", method: "GET", path: path, header: []string{"Authorization", ""},
			status: 401, code: hub.EUNAUTHORIZED}.check(t, d)
		if v := r.header.Get("WWW-Authenticate"); v != `Bearer realm="lmos-hub"` {
			t.Fatalf("%s: WWW-Authenticate %q", path, v)
		}
	}
	d.do("GET", "/things", "", "").want(t, "GET /things with the token", http.StatusOK)
	// Health and metrics stay open for monitors.
	d.do("GET", "/healthz", "", "", "Authorization", "").want(t, "healthz", http.StatusOK)
	d.do("GET", "/metrics", "", "", "Authorization", "").want(t, "metrics", http.StatusOK)
}

func TestWritesAreRateLimitedPerClient(t *testing.T) {
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) { c.WriteRate, c.WriteBurst = 0.001, 1 })
	d.do("PUT", "/things/urn:example:a", tdType, thingTD("urn:example:a", "A")).want(t, "first write", http.StatusCreated)
	r := d.do("PUT", "/things/urn:example:b", tdType, thingTD("urn:example:b", "B"))
	r.problem(t, "second write", http.StatusTooManyRequests, hub.ERATELIMIT)
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
		t.Fatalf("429: Retry-After %q", r.header.Get("Retry-After"))
	}
	// Even a guess at a token is limited; reads are not.
	d.do("DELETE", "/things/urn:example:a", "", "", "Authorization", "Bearer guess").problem(t, "token guess", http.StatusTooManyRequests, hub.ERATELIMIT)
	d.do("GET", "/things/urn:example:b", "", "").problem(t, "the refused write stored nothing", http.StatusNotFound, hub.ENOTFOUND)
	d.do("GET", "/things/urn:example:a", "", "").want(t, "the Thing the limit kept", http.StatusOK)
}

func TestMuxRefusalsAreProblems(t *testing.T) {
	d := newDirectory(t)
	d.do("GET", "/nowhere", "", "").problem(t, "no route", http.StatusNotFound, hub.ENOTFOUND)
	r := d.do("PATCH", "/things", patchType, "{}")
	r.problem(t, "PATCH /things", http.StatusMethodNotAllowed, hub.EMETHOD)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("405 Allow %q", allow)
	}
}
