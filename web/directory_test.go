package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/regtest"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// directory is the HTTP adapter alone over a real registry in a temp dir,
// served by httptest: the directory API's handlers without broker or app.
type directory struct {
	t     *testing.T
	url   string
	token string
	reg   *hub.Registry
	srv   *web.Server
}

// newDirectory starts the adapter; configure may change its Config (a
// Router for the proxy, limits) before it is built.
func newDirectory(t *testing.T, configure ...func(*web.Config, *hub.Registry)) *directory {
	t.Helper()
	reg, db := regtest.Open(t, hub.RegistryOptions{})
	tokens := hub.NewTokens(db, nil)
	secret, _, err := tokens.Create("test")
	if err != nil {
		t.Fatal(err)
	}
	cfg := web.Config{HubID: db.HubID(), HubName: "test-hub", Version: "test"}
	for _, c := range configure {
		c(&cfg, reg)
	}
	srv := web.New(reg, tokens, cfg)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.CloseStreams)
	return &directory{t: t, url: ts.URL, token: secret, reg: reg, srv: srv}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with the admin token (unless a header sets another
// Authorization) and reads the whole answer. A "Host" header sets the
// request's Host.
func (d *directory) do(method, path, contentType, body string, header ...string) response {
	d.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, d.url+path, rd)
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

// want fails unless r has status; it returns r for more checks.
func (r response) want(t *testing.T, what string, status int) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: %d %s, want %d", what, r.status, r.body, status)
	}
	return r
}

// problem fails unless r is a problem document of status whose type names
// code, and returns it.
func (r response) problem(t *testing.T, what string, status int, code string) lmos.Problem {
	t.Helper()
	r.want(t, what, status)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, lmos.MediaProblem) {
		t.Fatalf("%s: Content-Type %q, want %s", what, ct, lmos.MediaProblem)
	}
	var p lmos.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("%s: problem %s: %v", what, r.body, err)
	}
	if p.Status != status || p.Type != lmos.ErrorTypeBase+code || p.Title == "" {
		t.Fatalf("%s: problem %+v, want status %d and type …%s", what, p, status, code)
	}
	return p
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
}

func thingTD(id, title string) string {
	b, _ := json.Marshal(map[string]any{
		"@context":            "https://www.w3.org/2022/wot/td/v1.1",
		"id":                  id,
		"title":               title,
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
	})
	return string(b)
}

const (
	tdType    = "application/td+json"
	patchType = "application/merge-patch+json"
)

func TestPutThingCreatesThenReplaces(t *testing.T) {
	d := newDirectory(t)
	const id = "urn:example:lamp"
	r := d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp")).want(t, "first PUT", http.StatusCreated)
	if loc := r.header.Get("Location"); loc != "/things/"+id {
		t.Fatalf("Location %q", loc)
	}
	d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp 2")).want(t, "second PUT", http.StatusNoContent)
	var td map[string]any
	d.do("GET", "/things/"+id, "", "").want(t, "GET", http.StatusOK).json(t, &td)
	if td["title"] != "Lamp 2" {
		t.Fatalf("title %v after the replace", td["title"])
	}
}

func TestPutThingRefusals(t *testing.T) {
	d := newDirectory(t)
	const id = "urn:example:lamp"
	p := d.do("PUT", "/things/"+id, tdType, `{"id":"urn:example:lamp"}`).problem(t, "invalid TD", http.StatusBadRequest, hub.EINVALID)
	if len(p.ValidationErrors) == 0 {
		t.Fatalf("invalid TD: no validationErrors in %+v", p)
	}
	d.do("PUT", "/things/"+id, tdType, `{`).problem(t, "not JSON", http.StatusBadRequest, hub.EINVALID)
	d.do("PUT", "/things/"+id, "text/plain", thingTD(id, "Lamp")).problem(t, "wrong media type", http.StatusUnsupportedMediaType, hub.EUNSUPPORTED)
	d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp"), "Authorization", "").problem(t, "no token", http.StatusUnauthorized, hub.EUNAUTHORIZED)
	d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp"), "Authorization", "Bearer nope").problem(t, "bad token", http.StatusUnauthorized, hub.EUNAUTHORIZED)
	// None of them stored anything.
	d.do("GET", "/things/"+id, "", "").problem(t, "GET after refusals", http.StatusNotFound, hub.ENOTFOUND)
}

func TestGetThingEnrichedRawAndConditional(t *testing.T) {
	d := newDirectory(t)
	const id = "urn:example:lamp"
	d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp")).want(t, "PUT", http.StatusCreated)

	r := d.do("GET", "/things/"+id, "", "").want(t, "GET", http.StatusOK)
	if ct := r.header.Get("Content-Type"); ct != tdType {
		t.Fatalf("Content-Type %q", ct)
	}
	var td map[string]any
	r.json(t, &td)
	if td["id"] != id || td["registration"] == nil {
		t.Fatalf("enriched TD without its id or registration: %s", r.body)
	}
	tag := r.header.Get("ETag")
	if !strings.HasPrefix(tag, `W/"`) {
		t.Fatalf("enriched ETag %q is not weak", tag)
	}
	d.do("GET", "/things/"+id, "", "", "If-None-Match", tag).want(t, "GET If-None-Match", http.StatusNotModified)

	raw := d.do("GET", "/things/"+id+"?enriched=false", "", "").want(t, "GET raw", http.StatusOK)
	var rawTD map[string]any
	raw.json(t, &rawTD)
	if rawTD["registration"] != nil || rawTD["title"] != "Lamp" {
		t.Fatalf("raw TD %s", raw.body)
	}
	rawTag := raw.header.Get("ETag")
	if strings.HasPrefix(rawTag, "W/") || rawTag == "" {
		t.Fatalf("raw ETag %q is not strong", rawTag)
	}
	d.do("GET", "/things/"+id+"?enriched=false", "", "", "If-None-Match", rawTag).want(t, "GET raw If-None-Match", http.StatusNotModified)
	d.do("GET", "/things/"+id+"?enriched=maybe", "", "").problem(t, "enriched=maybe", http.StatusBadRequest, hub.EINVALID)
	d.do("GET", "/things/urn:example:nobody", "", "").problem(t, "unknown id", http.StatusNotFound, hub.ENOTFOUND)

	// A write under a stale tag is refused; under the current one it passes.
	d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp 2"), "If-Match", `"stale"`).problem(t, "PUT If-Match stale", http.StatusPreconditionFailed, lmos.CodePrecondition)
	d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp 2"), "If-Match", rawTag).want(t, "PUT If-Match current", http.StatusNoContent)
}

func TestPatchThing(t *testing.T) {
	d := newDirectory(t)
	const id = "urn:example:lamp"
	d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp")).want(t, "PUT", http.StatusCreated)
	d.do("PATCH", "/things/"+id, patchType, `{"title":"Patched","description":"d"}`).want(t, "PATCH", http.StatusNoContent)
	var td map[string]any
	d.do("GET", "/things/"+id+"?enriched=false", "", "").want(t, "GET", http.StatusOK).json(t, &td)
	if td["title"] != "Patched" || td["description"] != "d" || td["security"] != "nosec_sc" {
		t.Fatalf("patched TD %v", td)
	}
	d.do("PATCH", "/things/"+id, tdType, `{"title":"X"}`).problem(t, "PATCH as td+json", http.StatusUnsupportedMediaType, hub.EUNSUPPORTED)
	d.do("PATCH", "/things/"+id, patchType, `{"title":null}`).problem(t, "PATCH removing the title", http.StatusBadRequest, hub.EINVALID)
	d.do("PATCH", "/things/"+id, patchType, `{"id":"urn:example:other"}`).want(t, "PATCH changing the id", http.StatusBadRequest)
	d.do("PATCH", "/things/urn:example:nobody", patchType, `{"title":"X"}`).problem(t, "PATCH unknown", http.StatusNotFound, hub.ENOTFOUND)
	d.do("GET", "/things/"+id+"?enriched=false", "", "").want(t, "GET", http.StatusOK).json(t, &td)
	if td["title"] != "Patched" {
		t.Fatalf("a refused patch changed the TD: %v", td)
	}
}

func TestDeleteThing(t *testing.T) {
	d := newDirectory(t)
	const id = "urn:example:lamp"
	d.do("PUT", "/things/"+id, tdType, thingTD(id, "Lamp")).want(t, "PUT", http.StatusCreated)
	d.do("DELETE", "/things/"+id, "", "", "Authorization", "").problem(t, "DELETE without token", http.StatusUnauthorized, hub.EUNAUTHORIZED)
	d.do("DELETE", "/things/"+id, "", "").want(t, "DELETE", http.StatusNoContent)
	d.do("GET", "/things/"+id, "", "").problem(t, "GET after DELETE", http.StatusNotFound, hub.ENOTFOUND)
	d.do("DELETE", "/things/"+id, "", "").problem(t, "second DELETE", http.StatusNotFound, hub.ENOTFOUND)
}

func TestCreateThingAssignsAnID(t *testing.T) {
	d := newDirectory(t)
	r := d.do("POST", "/things", tdType, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","title":"Anon",`+
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`).want(t, "POST", http.StatusCreated)
	loc := r.header.Get("Location")
	if !strings.HasPrefix(loc, "/things/urn:uuid:") {
		t.Fatalf("Location %q", loc)
	}
	var td map[string]any
	d.do("GET", loc, "", "").want(t, "GET Location", http.StatusOK).json(t, &td)
	if "/things/"+td["id"].(string) != loc || td["title"] != "Anon" {
		t.Fatalf("TD at Location: %v", td)
	}
}

func TestListThingsPagesAndFormats(t *testing.T) {
	d := newDirectory(t)
	for _, id := range []string{"urn:example:a", "urn:example:b", "urn:example:c"} {
		d.do("PUT", "/things/"+id, tdType, thingTD(id, id)).want(t, "PUT "+id, http.StatusCreated)
	}
	var all []map[string]any
	r := d.do("GET", "/things", "", "").want(t, "list", http.StatusOK)
	r.json(t, &all)
	if len(all) != 3 || r.header.Get("Content-Type") != "application/ld+json" {
		t.Fatalf("list: %d Things, Content-Type %q", len(all), r.header.Get("Content-Type"))
	}

	// Pages follow their next links and together hold every Thing once.
	seen := map[string]int{}
	path := "/things?limit=2"
	for pages := 0; path != ""; pages++ {
		if pages == 3 {
			t.Fatal("more pages than Things")
		}
		r := d.do("GET", path, "", "").want(t, path, http.StatusOK)
		var page []map[string]any
		r.json(t, &page)
		for _, td := range page {
			seen[td["id"].(string)]++
		}
		path = ""
		for _, l := range r.header.Values("Link") {
			if target, ok := strings.CutSuffix(l, `>; rel="next"`); ok {
				path = strings.TrimPrefix(target, "<")
			}
		}
	}
	if len(seen) != 3 || seen["urn:example:a"] != 1 || seen["urn:example:b"] != 1 || seen["urn:example:c"] != 1 {
		t.Fatalf("pages held %v", seen)
	}

	var coll struct {
		Type    string           `json:"@type"`
		Total   int              `json:"total"`
		Members []map[string]any `json:"members"`
		Next    string           `json:"next"`
	}
	d.do("GET", "/things?format=collection&limit=1", "", "").want(t, "collection", http.StatusOK).json(t, &coll)
	if coll.Type != "ThingCollection" || coll.Total != 3 || len(coll.Members) != 1 || !strings.Contains(coll.Next, "offset=1") {
		t.Fatalf("collection %+v", coll)
	}
	d.do("GET", "/things?format=xml", "", "").problem(t, "format=xml", http.StatusBadRequest, hub.EINVALID)
	d.do("GET", "/things?offset=-1", "", "").problem(t, "offset=-1", http.StatusBadRequest, hub.EINVALID)
	d.do("GET", "/things?limit=x", "", "").problem(t, "limit=x", http.StatusBadRequest, hub.EINVALID)
}

func TestSearchAnswersAndProblems(t *testing.T) {
	d := newDirectory(t)
	d.do("PUT", "/things/urn:example:lamp", tdType, thingTD("urn:example:lamp", "Kitchen lamp")).want(t, "PUT", http.StatusCreated)
	d.do("PUT", "/things/urn:example:fan", tdType, thingTD("urn:example:fan", "Ceiling fan")).want(t, "PUT", http.StatusCreated)

	var titles []any
	d.do("GET", "/search/jsonpath?query="+url.QueryEscape(`$[?(@.title=='Ceiling fan')].id`), "", "").
		want(t, "jsonpath", http.StatusOK).json(t, &titles)
	if len(titles) != 1 || titles[0] != "urn:example:fan" {
		t.Fatalf("jsonpath answered %v", titles)
	}
	d.do("GET", "/search/jsonpath?query="+url.QueryEscape(`$[?(@.title==`), "", "").problem(t, "bad jsonpath", http.StatusBadRequest, hub.EINVALID)
	d.do("GET", "/search/jsonpath", "", "").want(t, "jsonpath without a query", http.StatusBadRequest)

	var hits []map[string]any
	d.do("GET", "/search/text?q=kitchen", "", "").want(t, "text", http.StatusOK).json(t, &hits)
	if len(hits) != 1 {
		t.Fatalf("text search for kitchen: %v", hits)
	}
	d.do("GET", "/search/text?q=kitchen&limit=x", "", "").problem(t, "text limit=x", http.StatusBadRequest, hub.EINVALID)
}
