package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Conditional requests on /things/{id} (RFC 9110 §13, issue 11 point 7).

// condDo sends method path with the admin token and extra headers.
func (h *testHub) condDo(method, path, contentType string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	h.t.Helper()
	all := map[string]string{"Authorization": "Bearer " + testToken}
	if contentType != "" {
		all["Content-Type"] = contentType
	}
	for k, v := range hdr {
		all[k] = v
	}
	return h.send(method, path, body, all)
}

// stored returns the document as submitted and its strong ETag; ok is false
// when the Thing is absent.
func (h *testHub) stored(id string) (raw []byte, etag string, ok bool) {
	h.t.Helper()
	resp, b := h.condDo(http.MethodGet, "/things/"+pathEscape(id)+"?enriched=false", "", nil, nil)
	switch resp.StatusCode {
	case http.StatusOK:
		return b, resp.Header.Get("ETag"), true
	case http.StatusNotFound:
		return nil, "", false
	}
	h.t.Fatalf("GET %s: %d %s", id, resp.StatusCode, b)
	return nil, "", false
}

// wantPrecondition checks a 412 problem and that the Thing is unchanged.
func wantPrecondition(t *testing.T, h *testHub, resp *http.Response, body []byte, id string, before []byte, existed bool) {
	t.Helper()
	if resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("status %d, want 412: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem %s: %v", body, err)
	}
	if p.Type != "https://eclipse.dev/lmos/protocol/v1/errors#precondition-failed" || p.Status != 412 || p.Detail == "" {
		t.Errorf("problem %+v, want type …#precondition-failed, status 412 and a detail", p)
	}
	raw, _, ok := h.stored(id)
	if ok != existed || !bytes.Equal(raw, before) {
		t.Errorf("stored Thing changed: exists %v (want %v), document %s, want %s", ok, existed, raw, before)
	}
}

func TestRFC9110_ThingETagAndIfNoneMatch(t *testing.T) {
	h := startHub(t, nil)
	id := "urn:ex:etag"
	td := makeTD(id, "ETag")
	h.put(id, td)
	path := "/things/" + pathEscape(id)

	// The document as submitted: a strong tag over its exact bytes.
	raw, rawTag, _ := h.stored(id)
	if !bytes.Equal(raw, td) || !strings.HasPrefix(rawTag, `"`) || len(rawTag) < 3 {
		t.Fatalf("enriched=false: body %s, ETag %q; want the submitted bytes and a strong tag", raw, rawTag)
	}
	// The enriched TD carries registration.retrieved: a weak tag, the same
	// while the Thing is unchanged, and not the strong one.
	resp, _ := h.condDo(http.MethodGet, path, "", nil, nil)
	enrTag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || !strings.HasPrefix(enrTag, `W/"`) || enrTag == "W/"+rawTag {
		t.Fatalf("enriched: %d ETag %q, want 200 and a weak tag other than W/%s", resp.StatusCode, enrTag, rawTag)
	}
	if resp, _ := h.condDo(http.MethodGet, path, "", nil, nil); resp.Header.Get("ETag") != enrTag {
		t.Errorf("unchanged Thing: ETag %q then %q", enrTag, resp.Header.Get("ETag"))
	}

	for _, tc := range []struct {
		method, path, inm string
		want              int
		etag              string
	}{
		{"GET", path, enrTag, 304, enrTag},
		{"HEAD", path, enrTag, 304, enrTag},
		{"GET", path, strings.TrimPrefix(enrTag, "W/"), 304, enrTag}, // weak comparison
		{"GET", path, `"other", ` + enrTag, 304, enrTag},
		{"GET", path, "*", 304, enrTag},
		{"GET", path, rawTag, 200, enrTag}, // another representation
		{"GET", path + "?enriched=false", rawTag, 304, rawTag},
		{"HEAD", path + "?enriched=false", rawTag, 304, rawTag},
		{"GET", path + "?enriched=false", enrTag, 200, rawTag},
		{"GET", path + "?enriched=false", `"stale"`, 200, rawTag},
	} {
		resp, body := h.condDo(tc.method, tc.path, "", nil, map[string]string{"If-None-Match": tc.inm})
		if resp.StatusCode != tc.want || resp.Header.Get("ETag") != tc.etag {
			t.Errorf("%s %s If-None-Match %s: %d ETag %q, want %d %q", tc.method, tc.path, tc.inm, resp.StatusCode, resp.Header.Get("ETag"), tc.want, tc.etag)
		}
		if tc.want == 304 && len(body) != 0 {
			t.Errorf("%s %s If-None-Match %s: 304 with body %q", tc.method, tc.path, tc.inm, body)
		}
		if tc.want == 200 && tc.method == "GET" && len(body) == 0 {
			t.Errorf("%s %s If-None-Match %s: 200 without body", tc.method, tc.path, tc.inm)
		}
	}

	// A change gives both representations new tags; the old ones no longer match.
	resp, body := h.condDo(http.MethodPatch, path, "application/merge-patch+json", []byte(`{"title":"changed"}`), nil)
	if resp.StatusCode != 204 {
		t.Fatalf("PATCH: %d %s", resp.StatusCode, body)
	}
	resp, body = h.condDo(http.MethodGet, path, "", nil, map[string]string{"If-None-Match": enrTag})
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == enrTag || !bytes.Contains(body, []byte(`"changed"`)) {
		t.Errorf("after PATCH, old enriched tag: %d ETag %q %s", resp.StatusCode, resp.Header.Get("ETag"), body)
	}
	resp, _ = h.condDo(http.MethodGet, path+"?enriched=false", "", nil, map[string]string{"If-None-Match": rawTag})
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == rawTag {
		t.Errorf("after PATCH, old raw tag: %d ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
	// A presence change alters the enriched TD only.
	_, rawTag2, _ := h.stored(id)
	resp, _ = h.condDo(http.MethodGet, path, "", nil, nil)
	enrTag2 := resp.Header.Get("ETag")
	if err := h.Main.Registry.SetPresence(t.Context(), id, "online", "ws"); err != nil {
		t.Fatal(err)
	}
	if _, tag, _ := h.stored(id); tag != rawTag2 {
		t.Errorf("presence changed the raw tag: %q -> %q", rawTag2, tag)
	}
	resp, _ = h.condDo(http.MethodGet, path, "", nil, map[string]string{"If-None-Match": enrTag2})
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == enrTag2 {
		t.Errorf("after a presence change, old enriched tag: %d ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
	// Absent Thing: 404 whatever the condition.
	resp, _ = h.condDo(http.MethodGet, "/things/urn:ex:none", "", nil, map[string]string{"If-None-Match": "*"})
	if resp.StatusCode != 404 {
		t.Errorf("absent Thing with If-None-Match *: %d, want 404", resp.StatusCode)
	}
}

func TestRFC9110_ThingIfMatchWrites(t *testing.T) {
	h := startHub(t, nil)
	id := "urn:ex:ifmatch"
	path := "/things/" + pathEscape(id)
	td := makeTD(id, "v1")
	h.put(id, td)
	_, tag, _ := h.stored(id)
	resp, _ := h.condDo(http.MethodGet, path, "", nil, nil)
	weak := resp.Header.Get("ETag")
	v2 := makeTD(id, "v2")

	refused := []struct {
		name, method, ct string
		body             []byte
		hdr              map[string]string
	}{
		{"PUT stale If-Match", "PUT", "application/td+json", v2, map[string]string{"If-Match": `"stale"`}},
		{"PATCH stale If-Match", "PATCH", "application/merge-patch+json", []byte(`{"title":"x"}`), map[string]string{"If-Match": `"stale"`}},
		{"DELETE stale If-Match", "DELETE", "", nil, map[string]string{"If-Match": `"stale", "other"`}},
		{"PUT weak If-Match (strong comparison)", "PUT", "application/td+json", v2, map[string]string{"If-Match": "W/" + tag}},
		{"PATCH enriched tag", "PATCH", "application/merge-patch+json", []byte(`{"title":"x"}`), map[string]string{"If-Match": weak}},
		{"PUT If-None-Match * on existing", "PUT", "application/td+json", v2, map[string]string{"If-None-Match": "*"}},
		{"DELETE If-None-Match current", "DELETE", "", nil, map[string]string{"If-None-Match": tag}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.condDo(tc.method, path, tc.ct, tc.body, tc.hdr)
			wantPrecondition(t, h, resp, body, id, td, true)
		})
	}

	// A missing Thing: If-Match * creates nothing.
	missing := "urn:ex:missing"
	resp, body := h.condDo("PUT", "/things/"+pathEscape(missing), "application/td+json", makeTD(missing, "m"), map[string]string{"If-Match": "*"})
	wantPrecondition(t, h, resp, body, missing, nil, false)
	resp, body = h.condDo("DELETE", "/things/"+pathEscape(missing), "", nil, map[string]string{"If-Match": "*"})
	wantPrecondition(t, h, resp, body, missing, nil, false)
	// If-None-Match * on PUT creates.
	resp, body = h.condDo("PUT", "/things/"+pathEscape(missing), "application/td+json", makeTD(missing, "m"), map[string]string{"If-None-Match": "*"})
	if resp.StatusCode != 201 || resp.Header.Get("Location") == "" {
		t.Errorf("create-only PUT: %d %s", resp.StatusCode, body)
	}
	if raw, _, ok := h.stored(missing); !ok || !bytes.Equal(raw, makeTD(missing, "m")) {
		t.Errorf("create-only PUT stored %s", raw)
	}

	// The current tag lets each write through, and each write moves the tag.
	resp, body = h.condDo("PUT", path, "application/td+json", v2, map[string]string{"If-Match": `"stale", ` + tag})
	if resp.StatusCode != 204 || len(body) != 0 {
		t.Fatalf("PUT with the current tag: %d %s", resp.StatusCode, body)
	}
	raw, tag2, _ := h.stored(id)
	if !bytes.Equal(raw, v2) || tag2 == tag {
		t.Fatalf("after PUT: %s tag %q (was %q)", raw, tag2, tag)
	}
	resp, body = h.condDo("PATCH", path, "application/merge-patch+json", []byte(`{"title":"v3"}`), map[string]string{"If-Match": tag})
	wantPrecondition(t, h, resp, body, id, v2, true) // the tag before the PUT is stale now
	resp, body = h.condDo("PATCH", path, "application/merge-patch+json", []byte(`{"title":"v3"}`), map[string]string{"If-Match": tag2})
	if resp.StatusCode != 204 {
		t.Fatalf("PATCH with the current tag: %d %s", resp.StatusCode, body)
	}
	raw, tag3, _ := h.stored(id)
	if !bytes.Contains(raw, []byte(`"v3"`)) || tag3 == tag2 {
		t.Fatalf("after PATCH: %s tag %q", raw, tag3)
	}
	resp, body = h.condDo("DELETE", path, "", nil, map[string]string{"If-Match": tag3})
	if resp.StatusCode != 204 {
		t.Fatalf("DELETE with the current tag: %d %s", resp.StatusCode, body)
	}
	if _, _, ok := h.stored(id); ok {
		t.Error("Thing still there after DELETE with the current tag")
	}
}

// Two clients editing one TD: of two PATCHes carrying the same If-Match,
// exactly one is applied; the other gets 412 and its change is not stored.
func TestRFC9110_ThingConcurrentIfMatch(t *testing.T) {
	h := startHub(t, nil)
	id := "urn:ex:race"
	path := "/things/" + pathEscape(id)
	h.put(id, makeTD(id, "start"))
	for round := range 50 {
		_, tag, _ := h.stored(id)
		var wg sync.WaitGroup
		status := make([]int, 2)
		start := make(chan struct{})
		for i := range 2 {
			wg.Go(func() {
				<-start
				// Each round writes new bytes: a write that leaves the
				// document as it was keeps its tag, rightly.
				patch := fmt.Appendf(nil, `{"title":"writer%c%d"}`, 'A'+i, round)
				resp, _ := h.condDo("PATCH", path, "application/merge-patch+json", patch, map[string]string{"If-Match": tag})
				status[i] = resp.StatusCode
			})
		}
		close(start)
		wg.Wait()
		won := -1
		switch {
		case status[0] == 204 && status[1] == 412:
			won = 0
		case status[0] == 412 && status[1] == 204:
			won = 1
		default:
			t.Fatalf("round %d: statuses %v, want one 204 and one 412", round, status)
		}
		raw, _, _ := h.stored(id)
		var doc struct{ Title string }
		if err := json.Unmarshal(raw, &doc); err != nil || doc.Title != fmt.Sprintf("writer%c%d", 'A'+won, round) {
			t.Fatalf("round %d: stored title %q, want the winner's (writer%c%d)", round, doc.Title, 'A'+won, round)
		}
	}
}
