package dashboard

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestSize keeps the whole page within the budget: 150 KB
// uncompressed, 50 KB gzipped, every embedded file counted.
func TestSize(t *testing.T) {
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	plain, zipped := 0, 0
	for _, a := range d.files {
		plain, zipped = plain+len(a.body), zipped+len(a.gz())
	}
	t.Logf("%d files, %d bytes, %d gzipped", len(d.files), plain, zipped)
	if plain > 150_000 || zipped > 50_000 {
		t.Fatalf("the dashboard is %d bytes, %d gzipped", plain, zipped)
	}
}

// TestModulesResolve: every module a script imports (statically or
// dynamically, relative to /ui/<version>/) is an embedded file, and no
// script or style names anything outside the hub.
func TestModulesResolve(t *testing.T) {
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	imp := regexp.MustCompile(`(?:from|import)\s*\(?\s*'([^']+)'`)
	for name, a := range d.files {
		body := string(a.body)
		if strings.Contains(body, "http://") || strings.Contains(body, "https://") {
			t.Errorf("%s names an outside URL", name)
		}
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		if regexp.MustCompile(`\beval\(|new Function\(|innerHTML|outerHTML|insertAdjacentHTML|document\.write`).MatchString(body) {
			t.Errorf("%s uses eval or HTML insertion", name)
		}
		for _, m := range imp.FindAllStringSubmatch(body, -1) {
			target := strings.TrimPrefix(m[1], "./")
			if d.files[target] == nil {
				t.Errorf("%s imports %s, which is not embedded", name, m[1])
			}
		}
	}
}

// TestServeAsset: a versioned path is cached for good, an old version is
// not found (never served stale under a long cache).
func TestServeAsset(t *testing.T) {
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		code  int
		cache string
	}{
		{"/ui/" + d.Version() + "/app.js", 200, "public, max-age=31536000, immutable"},
		{"/ui/app.js", 200, "no-cache"},
		{"/ui/000000000000/app.js", 404, ""},
		{"/ui/index.html", 404, ""},
	} {
		w := httptest.NewRecorder()
		d.ServeAsset(w, httptest.NewRequest(http.MethodGet, c.path, nil))
		if w.Code != c.code || w.Header().Get("Cache-Control") != c.cache {
			t.Errorf("%s: %d %q, want %d %q", c.path, w.Code, w.Header().Get("Cache-Control"), c.code, c.cache)
		}
	}
}

// TestEncodingsHaveTheirOwnETags: the gzip and the plain body are two
// representations; a cache holding one never gets a 304 for the other.
func TestEncodingsHaveTheirOwnETags(t *testing.T) {
	d, err := New()
	if err != nil {
		t.Fatal(err)
	}
	get := func(enc, inm string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/ui/style.css", nil)
		if enc != "" {
			r.Header.Set("Accept-Encoding", enc)
		}
		if inm != "" {
			r.Header.Set("If-None-Match", inm)
		}
		w := httptest.NewRecorder()
		d.ServeAsset(w, r)
		return w
	}
	plain, zipped := get("", ""), get("gzip", "")
	pe, ze := plain.Header().Get("ETag"), zipped.Header().Get("ETag")
	if pe == "" || ze == "" || pe == ze || zipped.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("ETags %q and %q, Content-Encoding %q", pe, ze, zipped.Header().Get("Content-Encoding"))
	}
	if w := get("", ze); w.Code != http.StatusOK || w.Body.Len() != len(d.files["style.css"].body) {
		t.Fatalf("the gzip ETag answered a plain request with %d", w.Code)
	}
	if w := get("gzip", ze); w.Code != http.StatusNotModified {
		t.Fatalf("the gzip ETag: %d, want 304", w.Code)
	}
}
