// Package faultproxy puts a reverse proxy in front of a real server (a
// remote directory) that injects faults: error statuses, requests held
// until the client gives up, and the listener closed and opened again on
// the same port (the remote down, then up).
package faultproxy

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// Fault is what the proxy answers instead of the remote (status 0: pass).
type Fault struct {
	Status int
	Header map[string]string
	Hang   bool // hold the request until the client gives up
}

// Proxy stands in front of a real remote directory and injects
// faults; Down closes its listener, Up opens it again on the same port.
type Proxy struct {
	tb     testing.TB
	rp     *httputil.ReverseProxy
	addr   string
	mu     sync.Mutex
	srv    *http.Server
	inject func(r *http.Request) Fault
	log    []string // "PUT id", "DELETE id" the remote answered 2xx
	seen   int      // requests that reached the proxy
}

// New starts a proxy to target on 127.0.0.1, closed when the test ends.
func New(tb testing.TB, target string) *Proxy {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // a cut request is the test's doing
	p := &Proxy{tb: tb, rp: rp}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	tb.Cleanup(p.Down)
	return p
}

// URL is the proxy's base URL.
func (p *Proxy) URL() string { return "http://" + p.addr }

func (p *Proxy) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(p.handle)}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go srv.Serve(ln)
}

func (p *Proxy) handle(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen++
	inject := p.inject
	p.mu.Unlock()
	if inject != nil {
		if f := inject(r); f.Status != 0 || f.Hang {
			if f.Hang {
				select {
				case <-r.Context().Done():
				case <-time.After(time.Minute):
				}
				return
			}
			for k, v := range f.Header {
				w.Header().Set(k, v)
			}
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(f.Status)
			fmt.Fprintf(w, `{"title":"injected","status":%d,"detail":"injected fault %d"}`, f.Status, f.Status)
			return
		}
	}
	rec := &statusRecorder{ResponseWriter: w}
	p.rp.ServeHTTP(rec, r)
	if rec.status >= 200 && rec.status < 300 && strings.HasPrefix(r.URL.Path, "/things/") {
		id, _ := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/things/"))
		p.mu.Lock()
		p.log = append(p.log, r.Method+" "+id)
		p.mu.Unlock()
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
	if strings.HasPrefix(s.Header().Get("Content-Type"), "text/event-stream") {
		// An event stream's head goes at once, as the remote sent it,
		// not with its first event.
		_ = http.NewResponseController(s.ResponseWriter).Flush()
	}
}

// Unwrap lets the reverse proxy flush the stream it copies.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Inject sets what the proxy answers each request with (nil: pass all).
func (p *Proxy) Inject(f func(r *http.Request) Fault) {
	p.mu.Lock()
	p.inject = f
	p.mu.Unlock()
}

// Log lists the writes the remote accepted, in order: "PUT id",
// "DELETE id".
func (p *Proxy) Log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// Seen counts the requests that reached the proxy.
func (p *Proxy) Seen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// Down closes the listener and every connection: the remote is gone.
func (p *Proxy) Down() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Up listens again on the same address.
func (p *Proxy) Up() {
	var ln net.Listener
	testwait.Eventually(p.tb, time.Minute, "listen again on "+p.addr, func() bool {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err == nil
	})
	p.serve(ln)
}
