package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

const (
	thermostatID = "urn:uuid:0d9a6a53-5f43-4c4e-9a55-8f2f6c1b7a01"
	chatID       = "urn:uuid:9e4f1d2c-3b6a-4f8e-8c71-0a2b3c4d5e03"
	diagID       = "urn:uuid:5b3c2e1a-77d0-4a51-b1f6-2a9f0c6d8e02"
)

func TestDirectoryCRUD(t *testing.T) {
	h := startHub(t, nil)
	td := sample(t, "thermostat-agent.json")

	resp, body := h.do(http.MethodPut, "/things/"+pathEscape(thermostatID), "application/td+json", td, testToken)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("first PUT: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Location"); got != "/things/"+pathEscape(thermostatID) {
		t.Errorf("Location = %q", got)
	}
	// application/json is accepted as well, and a second PUT replaces.
	resp, body = h.do(http.MethodPut, "/things/"+pathEscape(thermostatID), "application/json", td, testToken)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("second PUT: %d %s", resp.StatusCode, body)
	}

	var got map[string]any
	resp = h.getJSON("/things/"+pathEscape(thermostatID), http.StatusOK, &got)
	if ct := resp.Header.Get("Content-Type"); ct != "application/td+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	ctx, _ := got["@context"].([]any)
	if len(ctx) < 2 || ctx[0] != "https://www.w3.org/2022/wot/td/v1.1" || !slices.Contains(ctx, any("https://www.w3.org/2022/wot/discovery")) {
		t.Errorf("@context = %v", got["@context"])
	}
	reg, _ := got["registration"].(map[string]any)
	for _, k := range []string{"created", "modified", "retrieved"} {
		s, _ := reg[k].(string)
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			t.Errorf("registration.%s = %v: %v", k, reg[k], err)
		}
	}
	if p, _ := got["lmos:presence"].(map[string]any); p["status"] != "unknown" || p["via"] != "http" {
		t.Errorf("lmos:presence = %v", got["lmos:presence"])
	}
	if o, _ := got["lmos:origin"].(map[string]any); o["source"] != "http" {
		t.Errorf("lmos:origin = %v", got["lmos:origin"])
	}
	if got["title"] != "Living room thermostat agent" {
		t.Errorf("title = %v", got["title"])
	}

	// The stored document is exactly what was submitted.
	resp, raw := h.do(http.MethodGet, "/things/"+pathEscape(thermostatID)+"?enriched=false", "", nil, "")
	if resp.StatusCode != 200 || !bytes.Equal(raw, td) {
		t.Errorf("enriched=false: %d, body equal to submitted: %v", resp.StatusCode, bytes.Equal(raw, td))
	}

	// HEAD answers like GET without a body.
	resp, body = h.do(http.MethodHead, "/things/"+pathEscape(thermostatID), "", nil, "")
	if resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get("Content-Type") != "application/td+json" {
		t.Errorf("HEAD: %d, %d body bytes, %q", resp.StatusCode, len(body), resp.Header.Get("Content-Type"))
	}
	for _, p := range []string{"/things", "/search/jsonpath?query=$", "/search/text?q=x", "/.well-known/wot", "/healthz", "/metrics", "/api/status"} {
		if resp, body := h.do(http.MethodHead, p, "", nil, ""); resp.StatusCode != 200 || len(body) != 0 {
			t.Errorf("HEAD %s: %d with %d body bytes", p, resp.StatusCode, len(body))
		}
	}

	// Anonymous create: the hub assigns urn:uuid and keeps the rest as sent.
	anon := bytes.Replace(sample(t, "diagnostics-tool.json"), []byte(`"id": "`+diagID+`",`), nil, 1)
	resp, body = h.do(http.MethodPost, "/things", "application/td+json", anon, testToken)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	loc := resp.Header.Get("Location")
	anonID, err := url.PathUnescape(strings.TrimPrefix(loc, "/things/"))
	if err != nil || !regexp.MustCompile(`^urn:uuid:[0-9a-f-]{36}$`).MatchString(anonID) {
		t.Fatalf("Location = %q", loc)
	}
	_, raw = h.do(http.MethodGet, loc+"?enriched=false", "", nil, "")
	var anonDoc map[string]any
	if err := json.Unmarshal(raw, &anonDoc); err != nil || anonDoc["id"] != anonID || anonDoc["title"] != "Press line diagnostics tool" {
		t.Errorf("anonymous stored doc: %s (%v)", raw, err)
	}

	// PATCH merges and re-validates.
	resp, body = h.do(http.MethodPatch, "/things/"+pathEscape(thermostatID), "application/merge-patch+json",
		[]byte(`{"title":"Kitchen thermostat","description":null}`), testToken)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PATCH: %d %s", resp.StatusCode, body)
	}
	got = nil
	h.getJSON("/things/"+pathEscape(thermostatID), 200, &got)
	if got["title"] != "Kitchen thermostat" || got["description"] != nil || got["actions"] == nil {
		t.Errorf("after PATCH: title %v, description %v", got["title"], got["description"])
	}

	// DELETE, then it is gone.
	if resp, body := h.do(http.MethodDelete, loc, "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	h.getJSON(loc, http.StatusNotFound, nil)
}

func TestListPagingAndCollection(t *testing.T) {
	h := startHub(t, nil)
	var ids []string
	for i := range 7 {
		id := fmt.Sprintf("urn:example:thing:%02d", 6-i) // put in reverse order
		ids = append(ids, id)
		h.put(id, makeTD(id, "thing "+id))
	}
	slices.Sort(ids)

	var all []map[string]any
	resp := h.getJSON("/things", 200, &all)
	if ct := resp.Header.Get("Content-Type"); ct != "application/ld+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if len(all) != 7 {
		t.Fatalf("got %d things", len(all))
	}
	for i, d := range all {
		if d["id"] != ids[i] {
			t.Errorf("position %d: %v, want %s (id order)", i, d["id"], ids[i])
		}
	}
	canon := regexp.MustCompile(`^</things>; rel="canonical"; etag="(\d+)"$`)
	links := resp.Header.Values("Link")
	if len(links) != 1 || !canon.MatchString(links[0]) {
		t.Errorf("Link without limit = %q", links)
	}
	etag := canon.FindStringSubmatch(links[0])[1]

	// Follow rel="next" pages of 3.
	var seen []string
	next := "/things?limit=3"
	for pages := 0; next != ""; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		var page []map[string]any
		resp := h.getJSON(next, 200, &page)
		for _, d := range page {
			seen = append(seen, d["id"].(string))
		}
		next = ""
		hasCanon := false
		for _, l := range resp.Header.Values("Link") {
			if m := regexp.MustCompile(`^<([^>]+)>; rel="next"$`).FindStringSubmatch(l); m != nil {
				next = m[1]
			}
			if m := canon.FindStringSubmatch(l); m != nil && m[1] == etag {
				hasCanon = true
			}
		}
		if !hasCanon {
			t.Errorf("page %d Link = %q: no canonical link with etag %s", pages, resp.Header.Values("Link"), etag)
		}
	}
	if !slices.Equal(seen, ids) {
		t.Errorf("paged ids = %v, want %v", seen, ids)
	}

	var coll map[string]any
	h.getJSON("/things?format=collection&offset=2&limit=2", 200, &coll)
	members, _ := coll["members"].([]any)
	if coll["@type"] != "ThingCollection" || coll["total"] != float64(7) || len(members) != 2 ||
		members[0].(map[string]any)["id"] != ids[2] || coll["next"] != "/things?offset=4&limit=2&format=collection" {
		t.Errorf("collection = %v", coll)
	}

	// A write changes the etag.
	h.put(ids[0], makeTD(ids[0], "renamed"))
	resp = h.getJSON("/things", 200, nil)
	if m := canon.FindStringSubmatch(resp.Header.Get("Link")); m == nil || m[1] == etag {
		t.Errorf("etag after a write: %q (was %s)", resp.Header.Get("Link"), etag)
	}
}

func TestSearch(t *testing.T) {
	h := startHub(t, nil)
	h.put(thermostatID, sample(t, "thermostat-agent.json"))
	h.put(chatID, sample(t, "chat-agent.json"))
	h.put(diagID, sample(t, "diagnostics-tool.json"))

	var titles []string
	h.getJSON("/search/jsonpath?query="+url.QueryEscape(`$[?@["@type"]=='lmos:Agent'].title`), 200, &titles)
	if !slices.Equal(titles, []string{"Living room thermostat agent", "Service desk chat agent"}) {
		t.Errorf("agents' titles = %v", titles)
	}
	// The query runs over enriched TDs: hub extensions are searchable.
	var origins []string
	h.getJSON("/search/jsonpath?query="+url.QueryEscape(`$[*]['lmos:origin'].source`), 200, &origins)
	if len(origins) != 3 || origins[0] != "http" {
		t.Errorf("origins = %v", origins)
	}
	var none []any
	resp := h.getJSON("/search/jsonpath?query="+url.QueryEscape(`$[?@.title=='nothing']`), 200, &none)
	if none == nil || len(none) != 0 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("no match: %v %q", none, resp.Header.Get("Content-Type"))
	}

	type hit struct {
		ID      string
		Title   string
		Score   float64
		Matches []string
	}
	var hits []hit
	h.getJSON("/search/text?q="+url.QueryEscape("set temperature"), 200, &hits)
	if len(hits) != 1 || hits[0].ID != thermostatID || hits[0].Score <= 0 ||
		!slices.Contains(hits[0].Matches, "/lmos:capabilities/0/name") {
		t.Errorf("text search = %+v", hits)
	}
	h.getJSON("/search/text?q=agent", 200, &hits)
	if len(hits) != 2 {
		t.Errorf("q=agent: %+v", hits)
	}
	h.getJSON("/search/text?q=wear&type=Tool", 200, &hits)
	if len(hits) != 1 || hits[0].ID != diagID {
		t.Errorf("q=wear&type=Tool: %+v", hits)
	}
	h.getJSON("/search/text?q=wear&type=Agent", 200, &hits)
	if len(hits) != 0 {
		t.Errorf("q=wear&type=Agent: %+v", hits)
	}
	h.getJSON("/search/text?q=agent&limit=1", 200, &hits)
	if len(hits) != 1 {
		t.Errorf("limit=1: %+v", hits)
	}
}

func TestDirectoryTD(t *testing.T) {
	h := startHub(t, nil)
	var td map[string]any
	h.getJSON("/.well-known/wot", 200, &td)
	hubID := h.Main.DB.HubID()
	if fmt.Sprint(td["@type"]) != "[ThingDirectory]" || td["id"] != "urn:uuid:"+hubID || td["title"] != "test-hub" ||
		td["base"] != h.URL+"/" {
		t.Errorf("directory TD head: type %v id %v title %v base %v", td["@type"], td["id"], td["title"], td["base"])
	}
	props, _ := td["properties"].(map[string]any)
	actions, _ := td["actions"].(map[string]any)
	events, _ := td["events"].(map[string]any)
	if props["things"] == nil {
		t.Error("no things property")
	}
	for _, a := range []string{"createThing", "createAnonymousThing", "retrieveThing", "updateThing", "partiallyUpdateThing", "deleteThing", "searchJSONPath"} {
		if actions[a] == nil {
			t.Errorf("no %s action", a)
		}
	}
	// The affordance names are the W3C directory Thing Model's; the forms
	// point at the SSE event types on the wire, which stay thing_created/….
	if len(events) != 3 {
		t.Errorf("events %v, want thingCreated, thingUpdated, thingDeleted", events)
	}
	for _, a := range [][2]string{{"thingCreated", "thing_created"}, {"thingUpdated", "thing_updated"}, {"thingDeleted", "thing_deleted"}} {
		name, wire := a[0], a[1] // in this order: each step causes the next event
		ev, _ := events[name].(map[string]any)
		forms, _ := ev["forms"].([]any)
		if len(forms) != 1 || forms[0].(map[string]any)["subprotocol"] != "sse" || forms[0].(map[string]any)["href"] != "events/"+wire+"{?diff}" {
			t.Errorf("event %s: %v", name, ev)
			continue
		}
		// The form leads to a stream whose events carry that type.
		s := h.openSSE("/events/"+wire, "")
		if wire == "thing_created" {
			h.put("urn:ex:dir-td", makeTD("urn:ex:dir-td", "one"))
		} else if wire == "thing_updated" {
			h.put("urn:ex:dir-td", makeTD("urn:ex:dir-td", "two"))
		} else if resp, body := h.do(http.MethodDelete, "/things/urn:ex:dir-td", "", nil, testToken); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
		}
		if ev := s.next(5 * time.Second); ev.Type != wire {
			t.Errorf("form of %s: event type %q, want %q", name, ev.Type, wire)
		}
		s.Close()
	}
	// The things property describes both shapes format chooses, and each
	// answer matches the schema its format names.
	things, _ := props["things"].(map[string]any)
	shapes, _ := things["oneOf"].([]any)
	if things["type"] != nil || len(shapes) != 2 {
		t.Fatalf("things property: %v, want oneOf array and collection", things)
	}
	arr, _ := shapes[0].(map[string]any)
	coll, _ := shapes[1].(map[string]any)
	if arr["type"] != "array" || coll["type"] != "object" ||
		fmt.Sprint(coll["required"]) != "[@type total members]" {
		t.Errorf("things shapes: %v", shapes)
	}
	var list []any
	h.getJSON("/things", 200, &list)
	var page map[string]any
	h.getJSON("/things?format=collection", 200, &page)
	if page["@type"] != "ThingCollection" || page["total"] == nil || page["members"] == nil {
		t.Errorf("format=collection answered %v", page)
	}
	for k := range page {
		if _, ok := coll["properties"].(map[string]any)[k]; !ok {
			t.Errorf("collection member %q is not in the things property's collection schema", k)
		}
	}
	// The broker is linked at the host the request came to.
	links, _ := td["links"].([]any)
	_, mqttPort, _ := net.SplitHostPort(h.Main.MQTTAddr.String())
	if len(links) == 0 || fmt.Sprint(links[0]) != fmt.Sprintf("map[href:mqtt://127.0.0.1:%s rel:lmos:broker]", mqttPort) {
		t.Errorf("links %v, want lmos:broker mqtt://127.0.0.1:%s first", links, mqttPort)
	}
	// The hub id is stable across restarts.
	h.Close()
	h2 := startHubIn(t, h.Dir, nil)
	h2.getJSON("/.well-known/wot", 200, &td)
	if td["id"] != "urn:uuid:"+hubID {
		t.Errorf("id after restart = %v, want urn:uuid:%s", td["id"], hubID)
	}
}

func TestHealthMetricsStatus(t *testing.T) {
	h := startHub(t, nil)
	h.put(thermostatID, sample(t, "thermostat-agent.json"))
	var health map[string]any
	h.getJSON("/healthz", 200, &health)
	if health["status"] != "up" {
		t.Errorf("healthz = %v", health)
	}
	var st map[string]any
	h.getJSON("/api/status", 200, &st)
	if st["things"] != float64(1) || st["hubId"] != h.Main.DB.HubID() || st["version"] == "" {
		t.Errorf("status = %v", st)
	}
	if m, _ := st["mdns"].(map[string]any); m["state"] != "off" {
		t.Errorf("status mdns = %v, want state off (startHub turns mDNS off)", st["mdns"])
	}
	// A refused request is counted by reason (here the problem code).
	if resp, _ := h.do(http.MethodGet, "/things/urn:none", "", nil, ""); resp.StatusCode != 404 {
		t.Fatalf("GET absent: %d", resp.StatusCode)
	}
	resp, body := h.do(http.MethodGet, "/metrics", "", nil, "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"lmos_registry_things 1", `lmos_http_requests_total{route="PUT /things/{id}",code="201"} 1`,
		`lmos_http_refused_total{reason="not-found"} 1`,
		"lmos_http_request_duration_seconds_bucket", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// expectProblem checks status, problem body and a detail fragment, and
// returns the problem for more checks.
func expectProblem(t *testing.T, resp *http.Response, body []byte, status int, detail string) lmos.Problem {
	t.Helper()
	var p lmos.Problem
	if resp.StatusCode != status {
		t.Errorf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Status != status || p.Title == "" || !strings.HasPrefix(p.Type, "https://") || !strings.Contains(p.Detail, detail) {
		t.Errorf("problem = %+v, want status %d and detail containing %q", p, status, detail)
	}
	return p
}

// snapshot is the observable state that a rejected request must not change.
func (h *testHub) snapshot() string {
	h.t.Helper()
	var st map[string]any
	h.getJSON("/api/status", 200, &st)
	_, list := h.do(http.MethodGet, "/things", "", nil, "")
	list = regexp.MustCompile(`"retrieved":"[^"]+"`).ReplaceAll(list, nil)
	return fmt.Sprintf("rev=%v things=%v list=%s", st["revision"], st["things"], list)
}

func TestRejections(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.MaxBodyBytes = 8 << 10 })
	h.put(thermostatID, sample(t, "thermostat-agent.json"))
	revoked := "revoked-token-0123456789"
	tok, err := h.Main.Tokens.Install(revoked, "to revoke")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Main.Tokens.Revoke(tok.ID); err != nil {
		t.Fatal(err)
	}
	valid := string(makeTD("urn:example:new", "new"))
	without := func(member string) string {
		var m map[string]any
		_ = json.Unmarshal([]byte(valid), &m)
		delete(m, member)
		b, _ := json.Marshal(m)
		return string(b)
	}
	huge := `{"title":"` + strings.Repeat("x", 9<<10) + `"}`
	thermo := "/things/" + pathEscape(thermostatID)
	cases := []struct {
		name, method, path, ctype, body, token string
		status                                 int
		detail                                 string
		fields                                 []string
	}{
		{"invalid JSON", "PUT", "/things/urn:example:new", "application/td+json", `{"title": `, testToken, 400, "invalid JSON", nil},
		{"not an object", "PUT", "/things/urn:example:new", "application/td+json", `[1,2]`, testToken, 400, "JSON object", nil},
		{"missing title", "PUT", "/things/urn:example:new", "application/td+json", without("title"), testToken, 400, "invalid Thing Description", []string{"/title"}},
		{"missing security", "PUT", "/things/urn:example:new", "application/td+json", without("security"), testToken, 400, "invalid Thing Description", []string{"/security"}},
		{"missing securityDefinitions", "PUT", "/things/urn:example:new", "application/td+json", without("securityDefinitions"), testToken, 400, "invalid Thing Description", []string{"/securityDefinitions"}},
		{"sample without security", "PUT", "/things/" + pathEscape("urn:uuid:11111111-2222-4333-8444-555555555555"), "application/td+json",
			string(sample(t, "invalid-missing-security.json")), testToken, 400, "invalid Thing Description", []string{"/security", "/securityDefinitions"}},
		{"security names undefined scheme", "PUT", "/things/" + pathEscape("urn:uuid:11111111-2222-4333-8444-666666666666"), "application/td+json",
			string(sample(t, "invalid-undefined-security.json")), testToken, 400, "invalid Thing Description", []string{"/security"}},
		{"POST with id", "POST", "/things", "application/td+json", valid, testToken, 400, "must not have an id", []string{"/id"}},
		{"PUT id differs from path", "PUT", "/things/urn:example:other", "application/td+json", valid, testToken, 400, "must equal the id", []string{"/id"}},
		{"PUT without id in body", "PUT", "/things/urn:example:new", "application/td+json", without("id"), testToken, 400, "must equal the id", []string{"/id"}},
		{"wrong content type", "PUT", "/things/urn:example:new", "text/plain", valid, testToken, 415, "Content-Type text/plain", nil},
		{"no content type", "POST", "/things", "", valid, testToken, 415, "Content-Type none", nil},
		{"PATCH as JSON", "PATCH", thermo, "application/json", `{"title":"x"}`, testToken, 415, "merge-patch", nil},
		{"PATCH breaks TD", "PATCH", thermo, "application/merge-patch+json", `{"security":"nope"}`, testToken, 400, "invalid Thing Description", []string{"/security"}},
		{"PATCH changes id", "PATCH", thermo, "application/merge-patch+json", `{"id":"urn:example:x"}`, testToken, 400, "must not change", []string{"/id"}},
		{"PATCH unknown", "PATCH", "/things/urn:example:none", "application/merge-patch+json", `{}`, testToken, 404, "no Thing", nil},
		{"body over limit", "PUT", "/things/urn:example:new", "application/td+json", huge, testToken, 413, "limit of 8192 bytes", nil},
		{"bad JSONPath", "GET", "/search/jsonpath?query=" + url.QueryEscape("$[?@.x=="), "", "", "", 400, "invalid JSONPath", nil},
		{"missing JSONPath", "GET", "/search/jsonpath", "", "", "", 400, "query parameter", nil},
		{"empty text query", "GET", "/search/text?q=%20", "", "", "", 400, "at least one word", nil},
		{"bad limit", "GET", "/things?limit=-1", "", "", "", 400, "non-negative integer", nil},
		{"bad format", "GET", "/things?format=xml", "", "", "", 400, "format", nil},
		{"unknown id", "GET", "/things/urn:example:none", "", "", "", 404, "no Thing", nil},
		{"delete unknown", "DELETE", "/things/urn:example:none", "", "", testToken, 404, "no Thing", nil},
		{"write without token", "PUT", "/things/urn:example:new", "application/td+json", valid, "", 401, "bearer token is required", nil},
		{"write with bad token", "DELETE", thermo, "", "", "not-a-real-token-1234", 401, "not valid", nil},
		{"write with revoked token", "PUT", "/things/urn:example:new", "application/td+json", valid, revoked, 401, "revoked", nil},
		{"id with NUL", "PUT", "/things/urn:example:a%00b", "application/td+json", valid, testToken, 400, "invalid Thing id", nil},
		{"id with control character", "PUT", "/things/urn:example:a%01b", "application/td+json", valid, testToken, 400, "invalid Thing id", nil},
		{"id with DEL", "DELETE", "/things/urn:example:a%7Fb", "", "", testToken, 400, "invalid Thing id", nil},
		{"relative id", "PUT", "/things/just-a-name", "application/td+json", valid, testToken, 400, "invalid Thing id", nil},
		{"unknown event type", "GET", "/events/thing_exploded", "", "", "", 404, "no event type", nil},
		{"bad Last-Event-ID", "GET", "/events", "", "", "", 400, "Last-Event-ID", nil},
		{"unknown path", "GET", "/nothing/here", "", "", "", 404, "no resource", nil},
		{"wrong method on a Thing", "POST", thermo, "application/td+json", valid, testToken, 405, "POST is not allowed", nil},
		{"wrong method on the collection", "DELETE", "/things", "", "", testToken, 405, "DELETE is not allowed", nil},
		{"read of an id with a control character", "GET", "/things/urn:example:a%01b", "", "", "", 400, "invalid Thing id", nil},
		{"duplicate member name", "PUT", "/things/urn:example:new", "application/td+json",
			strings.Replace(valid, `"title":"new"`, `"title":"new","id":"urn:example:new","id":"urn:example:victim"`, 1), testToken, 400, "occurs twice", []string{"/id"}},
		{"expires in the past", "PUT", "/things/urn:example:new", "application/td+json",
			strings.Replace(valid, `"title":"new"`, `"title":"new","registration":{"expires":"2001-01-01T00:00:00Z"}`, 1), testToken, 400, "already expired", []string{"/registration/expires"}},
		{"PATCH with an array", "PATCH", thermo, "application/merge-patch+json", `[1]`, testToken, 400, "merge patch for a Thing Description must be a JSON object", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.snapshot()
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			req, _ := http.NewRequest(c.method, h.URL+c.path, bytes.NewReader(body))
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			if c.name == "bad Last-Event-ID" {
				req.Header.Set("Last-Event-ID", "yesterday")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			rb := readBody(t, resp)
			p := expectProblem(t, resp, rb, c.status, c.detail)
			var fields []string
			for _, v := range p.ValidationErrors {
				fields = append(fields, v.Field)
				if v.Description == "" {
					t.Errorf("field %s has no description", v.Field)
				}
			}
			for _, f := range c.fields {
				if !slices.Contains(fields, f) {
					t.Errorf("validationErrors fields %v lack %s", fields, f)
				}
			}
			if c.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
			if c.status == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q", resp.Header.Get("WWW-Authenticate"))
			}
			if after := h.snapshot(); after != before {
				t.Errorf("state changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func readBody(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestWriteRateLimit(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.WriteRate = 0.5; c.HTTP.WriteBurst = 2 })
	h.put("urn:example:a", makeTD("urn:example:a", "a"))
	h.put("urn:example:b", makeTD("urn:example:b", "b"))
	before := h.snapshot()
	resp, body := h.do(http.MethodPut, "/things/urn:example:c", "application/td+json", makeTD("urn:example:c", "c"), testToken)
	expectProblem(t, resp, body, http.StatusTooManyRequests, "too many writes")
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 2 {
		t.Errorf("Retry-After = %q", resp.Header.Get("Retry-After"))
	}
	if after := h.snapshot(); after != before {
		t.Errorf("state changed by a rate-limited write")
	}
	// Reads are not limited.
	for range 5 {
		h.getJSON("/things", 200, nil)
	}
}

func TestPrivateReads(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.Private = true })
	resp, body := h.do(http.MethodGet, "/things", "", nil, "")
	expectProblem(t, resp, body, http.StatusUnauthorized, "bearer token")
	if resp, _ := h.do(http.MethodGet, "/things", "", nil, testToken); resp.StatusCode != 200 {
		t.Errorf("read with token: %d", resp.StatusCode)
	}
	if resp, _ := h.do(http.MethodGet, "/healthz", "", nil, ""); resp.StatusCode != 200 {
		t.Errorf("healthz stays open: %d", resp.StatusCode)
	}
}

func TestRestartKeepsEverything(t *testing.T) {
	h := startHub(t, nil)
	h.put(thermostatID, sample(t, "thermostat-agent.json"))
	h.put(chatID, sample(t, "chat-agent.json"))
	if resp, _ := h.do(http.MethodDelete, "/things/"+pathEscape(chatID), "", nil, testToken); resp.StatusCode != 204 {
		t.Fatal("delete failed")
	}
	var st1 map[string]any
	h.getJSON("/api/status", 200, &st1)
	h.Close()

	h2 := startHubIn(t, h.Dir, nil)
	var st2 map[string]any
	h2.getJSON("/api/status", 200, &st2)
	if st2["revision"] != st1["revision"] || st2["things"] != float64(1) {
		t.Errorf("after restart: %v, before: %v", st2, st1)
	}
	_, raw := h2.do(http.MethodGet, "/things/"+pathEscape(thermostatID)+"?enriched=false", "", nil, "")
	if !bytes.Equal(raw, sample(t, "thermostat-agent.json")) {
		t.Error("stored document changed across restart")
	}
	h2.getJSON("/things/"+pathEscape(chatID), 404, nil)
	// New events continue the sequence.
	h2.put(chatID, sample(t, "chat-agent.json"))
	var st3 map[string]any
	h2.getJSON("/api/status", 200, &st3)
	if st3["revision"].(float64) != st1["revision"].(float64)+1 {
		t.Errorf("revision after restart and one write = %v, want %v+1", st3["revision"], st1["revision"])
	}
}

func TestDataDirInUse(t *testing.T) {
	h := startHub(t, nil)
	cfg := h.Main.Config
	m := app.NewMain(cfg, nil, nil)
	err := m.Run(t.Context())
	if err == nil {
		_ = m.Close(t.Context())
		t.Fatal("a second hub opened the same data directory")
	}
	if !strings.Contains(err.Error(), "in use by another lmos-hub process") {
		t.Errorf("error = %v", err)
	}
}

func TestHealthzReportsDownComponent(t *testing.T) {
	h := startHub(t, nil)
	// Stop the registry underneath the running HTTP server.
	if err := h.Main.Registry.Close(); err != nil {
		t.Fatal(err)
	}
	var health map[string]any
	h.getJSON("/healthz", http.StatusServiceUnavailable, &health)
	comps, _ := health["components"].(map[string]any)
	if health["status"] != "down" || comps["store"] != "up" || !strings.Contains(fmt.Sprint(comps["registry"]), "stopped") {
		t.Errorf("healthz = %v", health)
	}
	resp, body := h.do(http.MethodPut, "/things/urn:example:x", "application/td+json", makeTD("urn:example:x", "x"), testToken)
	expectProblem(t, resp, body, http.StatusServiceUnavailable, "shutting down")
}

// TestLargeListStreams lists more Things than one encoding chunk holds.
func TestLargeListStreams(t *testing.T) {
	h := startHub(t, nil)
	const n = 300
	for i := range n {
		id := fmt.Sprintf("urn:example:many:%03d", i)
		if _, err := h.Main.Registry.Put(t.Context(), id, makeTD(id, "many"), hubOrigin()); err != nil {
			t.Fatal(err)
		}
	}
	var all []map[string]any
	h.getJSON("/things", 200, &all)
	if len(all) != n {
		t.Fatalf("%d Things listed, want %d", len(all), n)
	}
	for i, d := range all {
		if want := fmt.Sprintf("urn:example:many:%03d", i); d["id"] != want || d["registration"] == nil {
			t.Fatalf("position %d: %v", i, d["id"])
		}
	}
	var coll struct {
		Total   int              `json:"total"`
		Members []map[string]any `json:"members"`
		Next    string           `json:"next"`
	}
	h.getJSON("/things?format=collection&limit=200&offset=50", 200, &coll)
	if coll.Total != n || len(coll.Members) != 200 || coll.Members[0]["id"] != "urn:example:many:050" ||
		coll.Next != "/things?offset=250&limit=200&format=collection" {
		t.Errorf("collection: total %d, %d members, first %v, next %q", coll.Total, len(coll.Members), coll.Members[0]["id"], coll.Next)
	}
}

func TestListHugeLimitAndFullRegistry(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Registry.MaxThings = 1 })
	h.put("urn:example:a", makeTD("urn:example:a", "a"))
	var list []any
	h.getJSON("/things?offset=0&limit=9223372036854775807", 200, &list)
	if len(list) != 1 {
		t.Errorf("%d Things", len(list))
	}
	before := h.snapshot()
	resp, body := h.do(http.MethodPut, "/things/urn:example:b", "application/td+json", makeTD("urn:example:b", "b"), testToken)
	expectProblem(t, resp, body, http.StatusInsufficientStorage, "registry is full")
	if resp.Header.Get("Retry-After") != "" {
		t.Error("a lasting condition must not invite retries")
	}
	if h.snapshot() != before {
		t.Error("state changed")
	}
}
