package web_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

type groupJSON struct {
	ID, Title, Description string
	Members                []string
	RequireSigned          bool
	SelfJoin               bool
	Created, Modified      time.Time
	Memberships            []struct {
		Thing, DID string
		Since      time.Time
		Credential json.RawMessage
	}
}

func (d *directory) group(t *testing.T, gid string) groupJSON {
	t.Helper()
	var g groupJSON
	d.do("GET", "/api/groups/"+gid, "", "").want(t, "GET group "+gid, http.StatusOK).json(t, &g)
	return g
}

// scopedToken makes a token of scope through the API.
func (d *directory) scopedToken(t *testing.T, scope string) string {
	t.Helper()
	var tk tokenJSON
	d.do("POST", "/api/tokens", "application/json", `{"name":"`+scope+`","scope":"`+scope+`"}`).want(t, "create token", http.StatusCreated).json(t, &tk)
	return tk.Token
}

func (d *directory) things(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		d.do("PUT", "/things/"+id, tdType, thingTD(id, id)).want(t, "PUT "+id, http.StatusCreated)
	}
}

// refusedCount reads lmos_http_refused_total{reason}.
func (d *directory) refusedCount(t *testing.T, reason string) string {
	t.Helper()
	body := string(d.do("GET", "/metrics", "", "").want(t, "metrics", http.StatusOK).body)
	prefix := `lmos_http_refused_total{reason="` + reason + `"} `
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return v
		}
	}
	return "0"
}

func TestGroupsCRUD(t *testing.T) {
	d := newDirectory(t)
	d.things(t, "urn:example:a", "urn:example:b", "urn:example:c")

	// POST without id: the hub names it.
	r := d.do("POST", "/api/groups", "application/json", `{"title":"Living room","members":["urn:example:a","urn:example:b","urn:example:a"]}`).
		want(t, "POST", http.StatusCreated)
	var g groupJSON
	r.json(t, &g)
	if loc := r.header.Get("Location"); loc != "/api/groups/"+g.ID || hub.ValidateGroupID(g.ID) != nil {
		t.Fatalf("Location %q for id %q", loc, g.ID)
	}
	if g.Title != "Living room" || !slices.Equal(g.Members, []string{"urn:example:a", "urn:example:b"}) || g.Created.IsZero() ||
		len(g.Memberships) != 2 || g.Memberships[0].Thing != "urn:example:a" || g.Memberships[0].Credential != nil {
		t.Fatalf("created %s", r.body)
	}
	if got := d.group(t, g.ID); !slices.Equal(got.Members, g.Members) || !got.Modified.Equal(g.Modified) {
		t.Fatalf("GET %+v, want %+v", got, g)
	}

	// POST with an id; the same id again is a conflict that changes nothing.
	d.do("POST", "/api/groups", "application/json", `{"id":"kitchen","title":"Kitchen","selfJoin":true}`).want(t, "POST kitchen", http.StatusCreated)
	d.do("POST", "/api/groups", "application/json", `{"id":"kitchen","title":"Other","members":["urn:example:c"]}`).
		problem(t, "POST kitchen again", http.StatusConflict, lmos.CodeConflict)
	if k := d.group(t, "kitchen"); k.Title != "Kitchen" || len(k.Members) != 0 || !k.SelfJoin {
		t.Fatalf("kitchen after the conflict %+v", k)
	}

	// PUT creates, then replaces.
	d.do("PUT", "/api/groups/bedroom", "application/json", `{"title":"Bedroom","members":["urn:example:c"]}`).want(t, "PUT create", http.StatusCreated)
	r = d.do("PUT", "/api/groups/bedroom", "application/json", `{"title":"Bedroom 2","description":"upstairs","members":["urn:example:a"]}`).
		want(t, "PUT replace", http.StatusOK)
	r.json(t, &g)
	if g.Title != "Bedroom 2" || g.Description != "upstairs" || !slices.Equal(g.Members, []string{"urn:example:a"}) {
		t.Fatalf("replaced %s", r.body)
	}

	// PATCH: a merge patch over the group.
	r = d.do("PATCH", "/api/groups/bedroom", patchType, `{"description":null,"requireSigned":false,"members":["urn:example:a","urn:example:b"]}`).
		want(t, "PATCH", http.StatusOK)
	g = groupJSON{}
	r.json(t, &g)
	if g.Title != "Bedroom 2" || g.Description != "" || !slices.Equal(g.Members, []string{"urn:example:a", "urn:example:b"}) {
		t.Fatalf("patched %s", r.body)
	}

	// Members one by one.
	d.do("PUT", "/api/groups/kitchen/members/urn:example:c", "", "").want(t, "add c", http.StatusOK)
	d.do("PUT", "/api/groups/kitchen/members/urn:example:c", "", "").want(t, "add c again", http.StatusOK)
	if k := d.group(t, "kitchen"); !slices.Equal(k.Members, []string{"urn:example:c"}) {
		t.Fatalf("kitchen %+v", k)
	}
	d.do("DELETE", "/api/groups/kitchen/members/urn:example:c", "", "").want(t, "remove c", http.StatusNoContent)
	d.do("DELETE", "/api/groups/kitchen/members/urn:example:c", "", "").problem(t, "remove c again", http.StatusNotFound, lmos.CodeNotFound)
	d.do("PUT", "/api/groups/kitchen/members/urn:example:nobody", "", "").problem(t, "add an unknown Thing", http.StatusNotFound, lmos.CodeNotFound)
	d.do("PUT", "/api/groups/nope/members/urn:example:a", "", "").problem(t, "add to an unknown group", http.StatusNotFound, lmos.CodeNotFound)

	var list []groupJSON
	d.do("GET", "/api/groups", "", "").want(t, "list", http.StatusOK).json(t, &list)
	if len(list) != 3 || list[0].ID != "bedroom" || list[2].ID != "kitchen" || len(list[2].Members) != 0 || len(list[1].Members) != 2 {
		t.Fatalf("list %+v", list)
	}

	// Deleting a Thing takes it out of its groups.
	d.do("DELETE", "/things/urn:example:b", "", "").want(t, "DELETE b", http.StatusNoContent)
	if b := d.group(t, "bedroom"); !slices.Equal(b.Members, []string{"urn:example:a"}) {
		t.Fatalf("bedroom after b was deleted %+v", b)
	}

	d.do("DELETE", "/api/groups/bedroom", "", "").want(t, "dissolve", http.StatusNoContent)
	d.do("GET", "/api/groups/bedroom", "", "").problem(t, "GET dissolved", http.StatusNotFound, lmos.CodeNotFound)
	d.do("DELETE", "/api/groups/bedroom", "", "").problem(t, "dissolve again", http.StatusNotFound, lmos.CodeNotFound)
	d.do("PATCH", "/api/groups/bedroom", patchType, `{"title":"x"}`).problem(t, "PATCH dissolved", http.StatusNotFound, lmos.CodeNotFound)
}

// TestGroupBadBodies: every bad body is refused with its problem and field
// pointers, and nothing is stored.
func TestGroupBadBodies(t *testing.T) {
	d := newDirectory(t)
	d.things(t, "urn:example:a")
	d.do("PUT", "/api/groups/g1", "application/json", `{"title":"One","members":["urn:example:a"]}`).want(t, "PUT g1", http.StatusCreated)
	before := d.group(t, "g1")

	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		code                            string
		fields                          []string
	}{
		{"unknown member", "POST", "/api/groups", "application/json", `{"id":"g2","title":"T","members":["urn:example:a","urn:example:ghost"]}`, 400, lmos.CodeInvalid, []string{"/members/1"}},
		{"member not an id", "PUT", "/api/groups/g1", "application/json", `{"title":"T","members":["not an id",7]}`, 400, lmos.CodeInvalid, []string{"/members/0", "/members/1"}},
		{"no title", "POST", "/api/groups", "application/json", `{"id":"g2"}`, 400, lmos.CodeInvalid, []string{"/title"}},
		{"bad types", "POST", "/api/groups", "application/json", `{"id":"g2","title":5,"selfJoin":"yes","members":{}}`, 400, lmos.CodeInvalid, []string{"/members", "/selfJoin", "/title"}},
		{"unknown member of the body", "POST", "/api/groups", "application/json", `{"id":"g2","title":"T","owner":"me"}`, 400, lmos.CodeInvalid, []string{"/owner"}},
		{"bad id", "POST", "/api/groups", "application/json", `{"id":"a/b","title":"T"}`, 400, lmos.CodeInvalid, []string{"/id"}},
		{"id differs from the URL", "PUT", "/api/groups/g1", "application/json", `{"id":"g9","title":"T"}`, 400, lmos.CodeInvalid, []string{"/id"}},
		{"bad id in the URL", "PUT", "/api/groups/-x", "application/json", `{"title":"T"}`, 400, lmos.CodeInvalid, []string{"/id"}},
		{"duplicate member", "PUT", "/api/groups/g1", "application/json", `{"title":"T","title":"U"}`, 400, lmos.CodeInvalid, []string{"/title"}},
		{"not JSON", "PUT", "/api/groups/g1", "application/json", `{"title":`, 400, lmos.CodeInvalid, nil},
		{"not an object", "PUT", "/api/groups/g1", "application/json", `[1]`, 400, lmos.CodeInvalid, nil},
		{"wrong media type", "PUT", "/api/groups/g1", "text/plain", `{"title":"T"}`, 415, lmos.CodeUnsupported, nil},
		{"patch as JSON", "PATCH", "/api/groups/g1", "application/json", `{"title":"T"}`, 415, lmos.CodeUnsupported, nil},
		{"patch to a bad member", "PATCH", "/api/groups/g1", patchType, `{"members":["urn:example:ghost"]}`, 400, lmos.CodeInvalid, []string{"/members/0"}},
		{"patch removing the title", "PATCH", "/api/groups/g1", patchType, `{"title":null}`, 400, lmos.CodeInvalid, []string{"/title"}},
		{"too large", "PUT", "/api/groups/g1", "application/json", `{"title":"` + strings.Repeat("x", 300<<10) + `"}`, 413, lmos.CodeTooLarge, nil},
	}
	for _, c := range cases {
		p := d.do(c.method, c.path, c.ctype, c.body).problem(t, c.name, c.status, c.code)
		var got []string
		for _, f := range p.ValidationErrors {
			got = append(got, f.Field)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.fields) {
			t.Errorf("%s: fields %v, want %v (%+v)", c.name, got, c.fields, p)
		}
	}
	var list []groupJSON
	d.do("GET", "/api/groups", "", "").want(t, "list", http.StatusOK).json(t, &list)
	if len(list) != 1 || list[0].Title != "One" || !list[0].Modified.Equal(before.Modified) || !slices.Equal(list[0].Members, before.Members) {
		t.Fatalf("groups after the refusals %+v, want only %+v", list, before)
	}
}

// TestGroupAccess: operate and admin tokens manage groups; a read token,
// anonymous clients (even with access.anonymous operate) and bad tokens
// do not, and reading is a directory read.
func TestGroupAccess(t *testing.T) {
	d := newDirectory(t)
	d.things(t, "urn:example:a")
	operate, read := d.scopedToken(t, "operate"), d.scopedToken(t, "read")
	// An operate token bound to a Thing speaks for it: a Thing changes its
	// memberships only by its signed statement, where the group allows.
	var boundTk tokenJSON
	d.do("POST", "/api/tokens", "application/json", `{"name":"bound","scope":"operate","thing":"urn:example:b"}`).want(t, "create bound token", http.StatusCreated).json(t, &boundTk)
	bound := boundTk.Token
	d.things(t, "urn:example:b")
	d.do("PUT", "/api/groups/g1", "application/json", `{"title":"One"}`, "Authorization", "Bearer "+operate).want(t, "operate PUT", http.StatusCreated)
	d.do("PUT", "/api/groups/g1/members/urn:example:a", "", "", "Authorization", "Bearer "+operate).want(t, "operate add", http.StatusOK)
	before := d.group(t, "g1")

	refusals := []struct {
		name, method, path, ctype, body, auth string
		status                                int
		code                                  string
	}{
		{"anonymous POST", "POST", "/api/groups", "application/json", `{"id":"g2","title":"T"}`, "", 401, lmos.CodeUnauthorized},
		{"anonymous PUT", "PUT", "/api/groups/g1", "application/json", `{"title":"T"}`, "", 401, lmos.CodeUnauthorized},
		{"anonymous PATCH", "PATCH", "/api/groups/g1", patchType, `{"title":"T"}`, "", 401, lmos.CodeUnauthorized},
		{"anonymous DELETE", "DELETE", "/api/groups/g1", "", "", "", 401, lmos.CodeUnauthorized},
		{"anonymous remove member", "DELETE", "/api/groups/g1/members/urn:example:a", "", "", "", 401, lmos.CodeUnauthorized},
		{"read token PUT", "PUT", "/api/groups/g1", "application/json", `{"title":"T"}`, "Bearer " + read, 403, lmos.CodeForbidden},
		{"read token DELETE", "DELETE", "/api/groups/g1", "", "", "Bearer " + read, 403, lmos.CodeForbidden},
		{"read token remove member", "DELETE", "/api/groups/g1/members/urn:example:a", "", "", "Bearer " + read, 403, lmos.CodeForbidden},
		{"unknown token", "DELETE", "/api/groups/g1", "", "", "Bearer lmos_nope", 401, lmos.CodeUnauthorized},
		{"bound operate token POST", "POST", "/api/groups", "application/json", `{"id":"g2","title":"T","members":["urn:example:b"]}`, "Bearer " + bound, 403, lmos.CodeForbidden},
		{"bound operate token adds its Thing", "PUT", "/api/groups/g1/members/urn:example:b", "", "", "Bearer " + bound, 403, lmos.CodeForbidden},
		{"bound operate token PATCH", "PATCH", "/api/groups/g1", patchType, `{"members":["urn:example:a","urn:example:b"]}`, "Bearer " + bound, 403, lmos.CodeForbidden},
		{"bound operate token DELETE", "DELETE", "/api/groups/g1", "", "", "Bearer " + bound, 403, lmos.CodeForbidden},
	}
	for _, c := range refusals {
		r := d.do(c.method, c.path, c.ctype, c.body, "Authorization", c.auth)
		r.problem(t, c.name, c.status, c.code)
		if c.status == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", c.name, r.header.Get("WWW-Authenticate"))
		}
	}
	if after := d.group(t, "g1"); !after.Modified.Equal(before.Modified) || after.Title != "One" || !slices.Equal(after.Members, []string{"urn:example:a"}) {
		t.Fatalf("g1 after the refusals %+v", after)
	}
	d.do("GET", "/api/groups/g2", "", "").problem(t, "g2 was not created", http.StatusNotFound, lmos.CodeNotFound)
	if n := d.refusedCount(t, lmos.CodeUnauthorized); n != "6" {
		t.Fatalf("refused unauthorized %s, want 6", n)
	}
	if n := d.refusedCount(t, lmos.CodeForbidden); n != "7" {
		t.Fatalf("refused forbidden %s, want 7", n)
	}
	// Reading needs no token where access.anonymous allows reads.
	d.do("GET", "/api/groups", "", "", "Authorization", "").want(t, "anonymous list", http.StatusOK)
	d.do("GET", "/api/groups/g1", "", "", "Authorization", "").want(t, "anonymous GET", http.StatusOK)
	d.do("DELETE", "/api/groups/g1", "", "", "Authorization", "Bearer "+operate).want(t, "operate DELETE", http.StatusNoContent)
}

// TestGroupConditional: GET carries an ETag on the group's modified time;
// If-None-Match answers 304 and a stale If-Match refuses a write (412)
// without changing the group.
func TestGroupConditional(t *testing.T) {
	d := newDirectory(t)
	r := d.do("PUT", "/api/groups/g1", "application/json", `{"title":"One"}`).want(t, "PUT", http.StatusCreated)
	tag := r.header.Get("ETag")
	if tag == "" {
		t.Fatal("no ETag")
	}
	d.do("GET", "/api/groups/g1", "", "", "If-None-Match", tag).want(t, "If-None-Match", http.StatusNotModified)
	r = d.do("PATCH", "/api/groups/g1", patchType, `{"title":"Two"}`, "If-Match", tag).want(t, "PATCH If-Match", http.StatusOK)
	newTag := r.header.Get("ETag")
	if newTag == tag {
		t.Fatal("the ETag did not change")
	}
	d.do("PUT", "/api/groups/g1", "application/json", `{"title":"Three"}`, "If-Match", tag).problem(t, "stale If-Match", http.StatusPreconditionFailed, lmos.CodePrecondition)
	d.do("DELETE", "/api/groups/g1", "", "", "If-Match", tag).problem(t, "stale If-Match DELETE", http.StatusPreconditionFailed, lmos.CodePrecondition)
	d.do("PUT", "/api/groups/g1", "application/json", `{"title":"Three"}`, "If-None-Match", "*").problem(t, "If-None-Match *", http.StatusPreconditionFailed, lmos.CodePrecondition)
	if g := d.group(t, "g1"); g.Title != "Two" {
		t.Fatalf("title %q after refused writes", g.Title)
	}
	d.do("DELETE", "/api/groups/g1", "", "", "If-Match", newTag).want(t, "DELETE If-Match", http.StatusNoContent)
}

// statement signs a self-join statement.
func statement(t *testing.T, priv ed25519.PrivateKey, gid, thing, action string, created time.Time) string {
	t.Helper()
	doc, _ := json.Marshal(map[string]string{"group": gid, "thing": thing, "action": action})
	out, err := proof.SignMilli(doc, priv, created)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// signedThing registers id with a TD signed by priv: its id is bound to
// the key.
func (d *directory) signedThing(t *testing.T, id string, priv ed25519.PrivateKey) {
	t.Helper()
	td, err := proof.Sign([]byte(thingTD(id, id)), priv, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	d.do("PUT", "/things/"+id, tdType, string(td)).want(t, "PUT signed "+id, http.StatusCreated)
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

// TestGroupSelfJoin: a Thing joins and leaves a selfJoin group by itself
// with a statement by its bound key; every other attempt is refused with
// its status and problem, counted, and changes nothing.
func TestGroupSelfJoin(t *testing.T) {
	d := newDirectory(t)
	key, other := newKey(t), newKey(t)
	d.signedThing(t, "urn:example:self", key)
	d.signedThing(t, "urn:example:peer", other)
	d.things(t, "urn:example:unbound")
	d.do("PUT", "/api/groups/open", "application/json", `{"title":"Open","selfJoin":true,"requireSigned":true}`).want(t, "PUT open", http.StatusCreated)
	d.do("PUT", "/api/groups/closed", "application/json", `{"title":"Closed"}`).want(t, "PUT closed", http.StatusCreated)
	path := "/api/groups/open/members/urn:example:self"
	// A minute ahead (within security.maxClockSkew): "now - 1s" is then
	// still after the hub started, which refuses older statements.
	now := time.Now().Add(time.Minute)
	anon := []string{"Authorization", ""}
	send := func(method, p, body string) response {
		t.Helper()
		ctype := ""
		if body != "" {
			ctype = "application/json"
		}
		return d.do(method, p, ctype, body, anon...)
	}

	join := statement(t, key, "open", "urn:example:self", "join", now)
	r := send("PUT", path, join).want(t, "self join", http.StatusOK)
	var g groupJSON
	r.json(t, &g)
	if !slices.Equal(g.Members, []string{"urn:example:self"}) || g.Memberships[0].DID != proof.DID(key.Public().(ed25519.PublicKey)) {
		t.Fatalf("after the join %s", r.body)
	}
	before := d.group(t, "open")

	refusals := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"no proof, no token", "PUT", path, "", 401, lmos.CodeUnauthorized},
		{"statement without proof", "PUT", path, `{"group":"open","thing":"urn:example:self","action":"join"}`, 401, lmos.CodeUnauthorized},
		{"replay", "PUT", path, join, 409, lmos.CodeConflict},
		{"leave replayed as older", "DELETE", path, statement(t, key, "open", "urn:example:self", "leave", now.Add(-time.Second)), 409, lmos.CodeConflict},
		{"stale", "DELETE", path, statement(t, key, "open", "urn:example:self", "leave", now.Add(-10*time.Minute)), 409, lmos.CodeConflict},
		{"future", "DELETE", path, statement(t, key, "open", "urn:example:self", "leave", now.Add(10*time.Minute)), 400, lmos.CodeInvalid},
		{"other key", "DELETE", path, statement(t, other, "open", "urn:example:self", "leave", now.Add(time.Second)), 403, lmos.CodeForbidden},
		{"unbound id", "PUT", "/api/groups/open/members/urn:example:unbound", statement(t, key, "open", "urn:example:unbound", "join", now.Add(time.Second)), 403, lmos.CodeForbidden},
		{"group not selfJoin", "PUT", "/api/groups/closed/members/urn:example:self", statement(t, key, "closed", "urn:example:self", "join", now.Add(time.Second)), 403, lmos.CodeForbidden},
		{"statement of another group", "DELETE", path, statement(t, key, "closed", "urn:example:self", "leave", now.Add(2*time.Second)), 400, lmos.CodeInvalid},
		{"join statement sent as leave", "DELETE", path, statement(t, key, "open", "urn:example:self", "join", now.Add(3*time.Second)), 400, lmos.CodeInvalid},
		{"tampered member", "DELETE", "/api/groups/open/members/urn:example:peer", strings.Replace(statement(t, key, "open", "urn:example:self", "leave", now.Add(5*time.Second)), "urn:example:self", "urn:example:peer", 1), 400, lmos.CodeInvalid},
		{"malformed proof", "DELETE", path, `{"group":"open","thing":"urn:example:self","action":"leave","proof":{"type":"DataIntegrityProof","cryptosuite":"eddsa-jcs-2022","proofPurpose":"assertionMethod","verificationMethod":"did:key:zNope","proofValue":"zzz"}}`, 400, lmos.CodeInvalid},
		{"extra member", "DELETE", path, `{"group":"open","thing":"urn:example:self","action":"leave","proof":{},"also":1}`, 400, lmos.CodeInvalid},
		{"unknown group", "PUT", "/api/groups/nope/members/urn:example:self", statement(t, key, "nope", "urn:example:self", "join", now.Add(6*time.Second)), 404, lmos.CodeNotFound},
	}
	for _, c := range refusals {
		send(c.method, c.path, c.body).problem(t, c.name, c.status, c.code)
		if after := d.group(t, "open"); !after.Modified.Equal(before.Modified) || !slices.Equal(after.Members, before.Members) {
			t.Fatalf("%s changed the group: %+v", c.name, after)
		}
	}
	if c := d.group(t, "closed"); len(c.Members) != 0 {
		t.Fatalf("closed group %+v", c)
	}
	d.do("DELETE", path, "text/plain", statement(t, key, "open", "urn:example:self", "leave", now.Add(7*time.Second)), anon...).
		problem(t, "statement as text/plain", http.StatusUnsupportedMediaType, lmos.CodeUnsupported)
	if n := d.refusedCount(t, "security.maxClockSkew"); n != "2" {
		t.Fatalf("refused by security.maxClockSkew %s, want 2", n)
	}

	// The Thing leaves by itself with a fresh statement.
	send("DELETE", path, statement(t, key, "open", "urn:example:self", "leave", now.Add(8*time.Second))).want(t, "self leave", http.StatusNoContent)
	if after := d.group(t, "open"); len(after.Members) != 0 {
		t.Fatalf("after the leave %+v", after)
	}
	// A token still manages a self-join group.
	d.do("PUT", path, "", "").want(t, "admin add", http.StatusOK)
}

// TestGroupPatchesDoNotUndoEachOther: merge patches of different members
// racing on one group all take effect: each is applied to the group as
// its write finds it, never to a stale read.
func TestGroupPatchesDoNotUndoEachOther(t *testing.T) {
	d := newDirectory(t)
	d.do("PUT", "/api/groups/g1", "application/json", `{"title":"One"}`).want(t, "PUT", http.StatusCreated)
	for round := range 5 {
		flag := round%2 == 0
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Go(func() {
				for i := range 10 {
					r := d.do("PATCH", "/api/groups/g1", patchType, fmt.Sprintf(`{"title":"T%d-%d"}`, w, i))
					if r.status != http.StatusOK {
						t.Errorf("title patch: %d %s", r.status, r.body)
					}
				}
			})
		}
		wg.Go(func() {
			r := d.do("PATCH", "/api/groups/g1", patchType, fmt.Sprintf(`{"selfJoin":%t}`, flag))
			if r.status != http.StatusOK {
				t.Errorf("selfJoin patch: %d %s", r.status, r.body)
			}
		})
		wg.Wait()
		if g := d.group(t, "g1"); g.SelfJoin != flag {
			t.Fatalf("round %d: selfJoin %v, want %v: a title patch undid it", round, g.SelfJoin, flag)
		}
	}
}
