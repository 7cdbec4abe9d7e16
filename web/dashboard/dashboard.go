// Package dashboard is the hub's LAN dashboard (PROTOCOL §3.6): plain HTML,
// CSS and JavaScript modules embedded in the binary, served with a strict
// Content-Security-Policy and gzip. The page speaks only the hub's public
// APIs; this package serves the files and nothing else.
package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
)

//go:embed assets
var assets embed.FS

// CSP is the dashboard's Content-Security-Policy: scripts and styles from
// the hub only, no inline code, no eval, no frames, connections to the hub
// only (TD text is inserted as text; this is the second wall).
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Prefix is the path the assets are served under.
const Prefix = "/ui/"

// asset is one embedded file, with its gzip form made once, when first
// asked for: a hub nobody visits never holds it, nor the compressor's
// megabyte of state.
type asset struct {
	body  []byte
	gz    func() []byte
	ctype string
	etag  string
}

// Dashboard serves the page and its assets.
type Dashboard struct {
	files map[string]*asset
	// version names this build's assets: index.html refers to
	// /ui/<version>/…, which may be cached for good.
	version string
	index   *asset
}

// Load returns the dashboard, its files loaded once per process (every
// web.Server shares them).
var Load = sync.OnceValues(New)

// New loads the embedded assets (each is compressed when first asked for
// with gzip).
func New() (*Dashboard, error) {
	d := &Dashboard{files: map[string]*asset{}}
	sum := sha256.New()
	err := fs.WalkDir(assets, "assets", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return fmt.Errorf("cannot read %s: %w", p, err)
		}
		name := strings.TrimPrefix(p, "assets/")
		fmt.Fprintf(sum, "%s\x00%d\x00", name, len(b))
		sum.Write(b)
		d.files[name] = &asset{body: b}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot load the dashboard: %w", err)
	}
	d.version = hex.EncodeToString(sum.Sum(nil))[:12]
	for name, a := range d.files {
		if name == "index.html" {
			a.body = bytes.ReplaceAll(a.body, []byte("{{V}}"), []byte(d.version))
		}
		if err := a.prepare(name); err != nil {
			return nil, err
		}
	}
	d.index = d.files["index.html"]
	if d.index == nil {
		return nil, fmt.Errorf("cannot load the dashboard: no index.html")
	}
	return d, nil
}

func (a *asset) prepare(name string) error {
	a.ctype = mime.TypeByExtension(path.Ext(name))
	switch path.Ext(name) { // not left to the system's mime tables
	case ".js":
		a.ctype = "text/javascript; charset=utf-8"
	case ".css":
		a.ctype = "text/css; charset=utf-8"
	case ".html":
		a.ctype = "text/html; charset=utf-8"
	case ".svg":
		a.ctype = "image/svg+xml"
	}
	if a.ctype == "" {
		a.ctype = "application/octet-stream"
	}
	body := a.body
	a.gz = sync.OnceValue(func() []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		// Writes to a bytes.Buffer do not fail.
		_, _ = zw.Write(body)
		_ = zw.Close()
		return buf.Bytes()
	})
	s := sha256.Sum256(a.body)
	a.etag = `"` + hex.EncodeToString(s[:8]) + `"`
	return nil
}

// Version names this build's assets.
func (d *Dashboard) Version() string { return d.version }

// ServeIndex answers / with the page; it is never cached, so a new build's
// assets are picked up at the next load.
func (d *Dashboard) ServeIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	d.serve(w, r, d.index)
}

// ServeAsset answers GET /ui/{path...}: /ui/<version>/<file> may be kept for
// a year (the version changes with any file), /ui/<file> is revalidated.
func (d *Dashboard) ServeAsset(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	cache := "no-cache"
	if v, rest, ok := strings.Cut(name, "/"); ok && v == d.version {
		name, cache = rest, "public, max-age=31536000, immutable"
	}
	a := d.files[name]
	if a == nil || name == "index.html" {
		http.Error(w, "not found", http.StatusNotFound) // the server turns it into a problem
		return
	}
	w.Header().Set("Cache-Control", cache)
	d.serve(w, r, a)
}

func (d *Dashboard) serve(w http.ResponseWriter, r *http.Request, a *asset) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Type", a.ctype)
	h.Set("Vary", "Accept-Encoding")
	// Each encoding is its own representation, with its own strong ETag.
	body, etag := a.body, a.etag
	gz := acceptsGzip(r)
	if gz {
		body, etag = a.gz(), strings.TrimSuffix(a.etag, `"`)+`-gz"`
	}
	h.Set("ETag", etag)
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// acceptsGzip reports whether Accept-Encoding names gzip with a q above 0.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.TrimSpace(coding) != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
