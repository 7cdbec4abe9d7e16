package dirsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// wait is the generous deadline of every poll: a loaded 2-core machine
// may be slow, never this slow.
const wait = 60 * time.Second

// fakeClock is a Clock moved by the test.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
	asked   []time.Duration
}

type fakeWaiter struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.asked = append(c.asked, d)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), c: ch})
	return ch
}

// Advance moves the clock by d and fires the waits that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.c <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// Asked returns the waits asked for so far.
func (c *fakeClock) Asked() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.asked)
}

// fault is what the proxy answers instead of the remote (status 0: pass).
type fault struct {
	status int
	header map[string]string
	hang   bool // hold the request until the client gives up
}

// faultProxy stands in front of a real remote directory and injects
// faults; Down closes its listener, Up opens it again on the same port.
type faultProxy struct {
	t      *testing.T
	rp     *httputil.ReverseProxy
	addr   string
	mu     sync.Mutex
	srv    *http.Server
	inject func(r *http.Request) fault
	log    []string // "PUT id", "DELETE id" the remote answered 2xx
	seen   int      // requests that reached the proxy
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, rp: httputil.NewSingleHostReverseProxy(u)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Down)
	return p
}

func (p *faultProxy) URL() string { return "http://" + p.addr }

func (p *faultProxy) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(p.handle)}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go srv.Serve(ln)
}

func (p *faultProxy) handle(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen++
	inject := p.inject
	p.mu.Unlock()
	if inject != nil {
		if f := inject(r); f.status != 0 || f.hang {
			if f.hang {
				select {
				case <-r.Context().Done():
				case <-time.After(wait):
				}
				return
			}
			for k, v := range f.header {
				w.Header().Set(k, v)
			}
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(f.status)
			fmt.Fprintf(w, `{"title":"injected","status":%d,"detail":"injected fault %d"}`, f.status, f.status)
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
}

func (p *faultProxy) Inject(f func(r *http.Request) fault) {
	p.mu.Lock()
	p.inject = f
	p.mu.Unlock()
}

func (p *faultProxy) Log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

func (p *faultProxy) Seen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen
}

// Down closes the listener and every connection: the remote is gone.
func (p *faultProxy) Down() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Up listens again on the same address.
func (p *faultProxy) Up() {
	var ln net.Listener
	testwait.Eventually(p.t, wait, "listen again on "+p.addr, func() bool {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err == nil
	})
	p.serve(ln)
}

// td is a small valid Thing Description of id.
func td(id, title string) []byte {
	return fmt.Appendf(nil, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":%q,`+
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`, id, title)
}

// put registers raw on h with the admin token.
func put(t *testing.T, h *hubtest.Hub, id string, raw []byte) {
	t.Helper()
	resp, body := h.Do(http.MethodPut, "/things/"+url.PathEscape(id), "application/td+json", raw, hubtest.Token)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT %s: %d %s", id, resp.StatusCode, body)
	}
}

func del(t *testing.T, h *hubtest.Hub, id string) {
	t.Helper()
	resp, body := h.Do(http.MethodDelete, "/things/"+url.PathEscape(id), "", nil, hubtest.Token)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE %s: %d %s", id, resp.StatusCode, body)
	}
}

// titles reads every Thing of h: id → title.
func titles(t *testing.T, h *hubtest.Hub) map[string]string {
	t.Helper()
	resp, body := h.Do(http.MethodGet, "/things", "", nil, hubtest.Token)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /things: %d %s", resp.StatusCode, body)
	}
	var list []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, th := range list {
		out[th.ID] = th.Title
	}
	return out
}

// equalMaps reports whether a and b hold the same entries.
func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// localTitles is titles of the local hub's own Things (mirrors left out).
func localTitles(t *testing.T, h *hubtest.Hub) map[string]string {
	t.Helper()
	out := titles(t, h)
	for id := range out {
		if th, err := h.Main.Registry.Get(id); err == nil && th.Meta.Origin.Source == hub.SourceRemote {
			delete(out, id)
		}
	}
	return out
}

// startPusher starts a Pusher of local's Things to url through local's
// store, outbox "sync", stopped when the test ends.
func startPusher(t *testing.T, local *hubtest.Hub, cfg dirsync.PushConfig) *dirsync.Pusher {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = hubtest.Token
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = 5*time.Millisecond, 50*time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = hubtest.Logger(t)
	}
	p, err := dirsync.NewPusher(local.Main.Registry, local.Main.DB.Outbox("sync"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPusher(t, p) })
	return p
}

func stopPusher(t *testing.T, p *dirsync.Pusher) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Error(err)
	}
}

// converged waits until remote holds exactly local's own Things and the
// outbox is empty.
func converged(t *testing.T, local, remote *hubtest.Hub, p *dirsync.Pusher) {
	t.Helper()
	var last map[string]string
	testwait.Eventually(t, wait, "the remote holds the local Things", func() bool {
		last = titles(t, remote)
		return equalMaps(last, localTitles(t, local)) && p.State().Outbox == 0
	})
}
