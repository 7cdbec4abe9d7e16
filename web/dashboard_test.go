package web_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// wantCSP fails unless r carries the dashboard's strict policy: scripts
// and styles from the hub only, nothing inline, no eval.
func wantCSP(t *testing.T, what string, r response) {
	t.Helper()
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Fatalf("%s: Content-Security-Policy %q lacks %q", what, csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") || strings.Contains(csp, "http:") || strings.Contains(csp, "*") {
		t.Fatalf("%s: Content-Security-Policy %q allows too much", what, csp)
	}
	if r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("%s: no nosniff", what)
	}
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("bad gzip: %v", err)
	}
	return out
}

// TestDashboardPage: / serves the dashboard (not the old static table),
// without a token even on a private hub (the page holds no data and asks
// for a token itself), under a strict CSP; its assets come gzipped when
// asked, the versioned ones cached for good.
func TestDashboardPage(t *testing.T) {
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) { c.Access, _ = hub.NewAccess(hub.AnonymousNone, "open", nil) })
	d.do("PUT", "/things/urn:example:a", tdType, thingTD("urn:example:a", "<script>alert(1)</script>")).want(t, "PUT", http.StatusCreated)

	page := d.do("GET", "/", "", "", "Authorization", "").want(t, "GET /", http.StatusOK)
	wantCSP(t, "GET /", page)
	if ct := page.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("GET / Content-Type %q", ct)
	}
	body := string(page.body)
	for _, want := range []string{`data-testid="nav-things"`, `data-testid="token-dialog"`, `data-testid="error-banner"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("GET / lacks %s", want)
		}
	}
	// Nothing of the directory is in the page itself (the old page listed
	// titles server-side), and no inline script or style.
	if strings.Contains(body, "alert(1)") || strings.Contains(body, "urn:example:a") {
		t.Fatal("the page embeds directory data")
	}
	if regexp.MustCompile(`<script>|<script [^>]*>[^<]|<style|style=`).MatchString(body) {
		t.Fatalf("the page has inline script or style:\n%s", body)
	}
	m := regexp.MustCompile(`src="(/ui/[0-9a-f]{12}/app\.js)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("GET / names no versioned app.js:\n%s", body)
	}

	plain := d.do("GET", m[1], "", "", "Authorization", "", "Accept-Encoding", "identity").want(t, "app.js", http.StatusOK)
	wantCSP(t, "app.js", plain)
	if plain.header.Get("Content-Encoding") != "" || !bytes.Contains(plain.body, []byte("import")) {
		t.Fatalf("app.js plain: %q %.60s", plain.header.Get("Content-Encoding"), plain.body)
	}
	if ct := plain.header.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
		t.Fatalf("app.js Content-Type %q", ct)
	}
	if cc := plain.header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
		t.Fatalf("versioned asset Cache-Control %q", cc)
	}
	zipped := d.do("GET", m[1], "", "", "Authorization", "", "Accept-Encoding", "br, gzip").want(t, "app.js gzip", http.StatusOK)
	if zipped.header.Get("Content-Encoding") != "gzip" || !strings.Contains(zipped.header.Get("Vary"), "Accept-Encoding") {
		t.Fatalf("app.js gzip: Content-Encoding %q Vary %q", zipped.header.Get("Content-Encoding"), zipped.header.Get("Vary"))
	}
	if !bytes.Equal(gunzip(t, zipped.body), plain.body) || len(zipped.body) >= len(plain.body) {
		t.Fatal("the gzip body is not app.js compressed")
	}
	if d.do("GET", m[1], "", "", "Authorization", "", "Accept-Encoding", "gzip;q=0").header.Get("Content-Encoding") != "" {
		t.Fatal("gzip sent though refused with q=0")
	}

	// Unversioned: revalidated, and answered 304 on its ETag.
	css := d.do("GET", "/ui/style.css", "", "", "Authorization", "").want(t, "style.css", http.StatusOK)
	if css.header.Get("Cache-Control") != "no-cache" || css.header.Get("ETag") == "" {
		t.Fatalf("style.css Cache-Control %q ETag %q", css.header.Get("Cache-Control"), css.header.Get("ETag"))
	}
	d.do("GET", "/ui/style.css", "", "", "Authorization", "", "If-None-Match", css.header.Get("ETag")).want(t, "style.css 304", http.StatusNotModified)

	for _, p := range []string{"/ui/nope.js", "/ui/index.html", "/ui/0123456789ab/app.js", "/ui/../server.go", "/ui/"} {
		r := d.do("GET", p, "", "", "Authorization", "")
		if r.status != http.StatusNotFound || !strings.HasPrefix(r.header.Get("Content-Type"), lmos.MediaProblem) {
			t.Fatalf("GET %s: %d %q, want a 404 problem", p, r.status, r.header.Get("Content-Type"))
		}
	}
	d.do("POST", "/", "application/json", "{}", "Authorization", "").problem(t, "POST /", http.StatusMethodNotAllowed, "method")
	// The page is public, the data is not.
	d.do("GET", "/things", "", "", "Authorization", "").problem(t, "GET /things anonymous", http.StatusUnauthorized, "unauthorized")
}
