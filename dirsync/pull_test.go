package dirsync_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/regtest"
)

// eventually polls cond until it holds, failing after a generous deadline
// (no assertion on time: a loaded machine only takes longer).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// front is an HTTP server in front of a real remote hub: it counts the
// requests, records each change feed's Last-Event-ID, can cut the open
// feeds, hold new ones (gate) and answer requests itself (fault).
type front struct {
	srv   *httptest.Server
	proxy *httputil.ReverseProxy

	mu       sync.Mutex
	lists    int      // GET /things (the list)
	resumes  []string // Last-Event-ID of each GET /events
	feeds    []context.CancelFunc
	gate     chan struct{} // closed or nil: open
	fault    func(w http.ResponseWriter, r *http.Request) bool
	requests []time.Time // when each request came
}

func newFront(t *testing.T, remote string) *front {
	t.Helper()
	u, err := url.Parse(remote)
	if err != nil {
		t.Fatal(err)
	}
	f := &front{proxy: httputil.NewSingleHostReverseProxy(u)}
	f.proxy.FlushInterval = -1
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(f.cut)
	return f
}

func (f *front) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, time.Now())
	fault, gate := f.fault, f.gate
	if r.URL.Path == "/things" {
		f.lists++
	}
	f.mu.Unlock()
	if fault != nil && fault(w, r) {
		return
	}
	if r.URL.Path != "/events" {
		f.proxy.ServeHTTP(w, r)
		return
	}
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	f.mu.Lock()
	f.resumes = append(f.resumes, r.Header.Get("Last-Event-ID"))
	f.feeds = append(f.feeds, cancel)
	f.mu.Unlock()
	f.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// cut ends every open change feed.
func (f *front) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.feeds {
		c()
	}
	f.feeds = nil
}

func (f *front) hold() {
	f.mu.Lock()
	f.gate = make(chan struct{})
	f.mu.Unlock()
}

func (f *front) release() {
	f.mu.Lock()
	close(f.gate)
	f.gate = nil
	f.mu.Unlock()
}

func (f *front) setFault(fn func(w http.ResponseWriter, r *http.Request) bool) {
	f.mu.Lock()
	f.fault = fn
	f.mu.Unlock()
}

func (f *front) counts() (lists int, resumes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, append([]string(nil), f.resumes...)
}

// startPuller starts a Puller from url into reg with test timings; edit
// changes its configuration first.
func startPuller(t *testing.T, u string, reg dirsync.Registry, edit func(*dirsync.PullConfig)) *dirsync.Puller {
	t.Helper()
	cfg := dirsync.PullConfig{URL: u, Token: hubtest.Token, Registry: reg, Logger: hubtest.Logger(t),
		Interval: time.Hour, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, PageSize: 7}
	if edit != nil {
		edit(&cfg)
	}
	p, err := dirsync.NewPuller(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	t.Cleanup(func() { p.Close() })
	return p
}

func titleOf(t *testing.T, reg *hub.Registry, id string) string {
	t.Helper()
	doc, err := reg.Document(id)
	if err != nil {
		return ""
	}
	s, _ := doc["title"].(string)
	return s
}

func remotePatch(t *testing.T, h *hubtest.Hub, id, patch string) {
	t.Helper()
	resp, body := h.Do(http.MethodPatch, lmos.ThingPath(id), "application/merge-patch+json", []byte(patch), hubtest.Token)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PATCH %s: %d %s", id, resp.StatusCode, body)
	}
}

func remoteDelete(t *testing.T, h *hubtest.Hub, id string) {
	t.Helper()
	resp, body := h.Do(http.MethodDelete, lmos.ThingPath(id), "", nil, hubtest.Token)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE %s: %d %s", id, resp.StatusCode, body)
	}
}

// The first full read mirrors every remote Thing, over several pages;
// then creations, updates and deletions follow through the change feed,
// with no poll (Interval is an hour).
func TestPullMirrorsAndFollowsTheFeed(t *testing.T) {
	remote := hubtest.Start(t, nil)
	for i := range 20 {
		id := fmt.Sprintf("urn:r:%02d", i)
		remote.Put(id, hubtest.BareTD(id, "T"))
	}
	_ = remote.Main // the remote is a whole hub, as main starts it
	f := newFront(t, remote.URL)
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	p := startPuller(t, f.srv.URL, reg, nil)
	<-p.Synced()
	if got := len(reg.MirroredFrom(f.srv.URL)); got != 20 {
		t.Fatalf("%d mirrored after the first read, want 20", got)
	}
	if lists, _ := f.counts(); lists < 3 {
		t.Fatalf("%d list requests for 20 Things in pages of 7: paging not followed", lists)
	}
	th, err := reg.Get("urn:r:05")
	if err != nil || th.Meta.Origin != (hub.Origin{Source: hub.SourceRemote, Hub: f.srv.URL}) {
		t.Fatalf("mirror %+v: %v", th.Meta, err)
	}
	// Served here, a mirror of a served TD carries each context once.
	doc, _, _, err := reg.EnrichedTagged("urn:r:05")
	if err != nil || strings.Count(string(doc), hub.ContextDiscovery) != 1 || strings.Count(string(doc), `"lmos"`) != 1 {
		t.Fatalf("mirror as served here: %s %v", doc, err)
	}
	st := p.State()
	if st.Kind != hub.LinkPull || st.Name != f.srv.URL || st.URL != f.srv.URL || st.State != hub.LinkConnected || st.Things != 20 || st.LastSuccess.IsZero() {
		t.Fatalf("state %+v", st)
	}

	remote.Put("urn:r:new", hubtest.BareTD("urn:r:new", "New"))
	eventually(t, "the creation", func() bool { return titleOf(t, reg, "urn:r:new") == "New" })
	remotePatch(t, remote, "urn:r:05", `{"title":"Changed"}`)
	eventually(t, "the update", func() bool { return titleOf(t, reg, "urn:r:05") == "Changed" })
	remoteDelete(t, remote, "urn:r:06")
	eventually(t, "the deletion", func() bool { _, err := reg.Get("urn:r:06"); return hub.ErrorCode(err) == hub.ENOTFOUND })
	if lists, resumes := f.counts(); lists != 3 || len(resumes) != 1 {
		t.Fatalf("%d list reads and %d feeds: changes did not come through the one feed", lists, len(resumes))
	}
	// Closed, the Puller leaves its mirrors.
	p.Close()
	if got := len(reg.MirroredFrom(f.srv.URL)); got != 20 {
		t.Fatalf("%d mirrors after Close, want 20", got)
	}
}

// A feed that drops is resumed with Last-Event-ID from the last change
// applied: what happened meanwhile is replayed, with no full read.
func TestPullResumesWithLastEventID(t *testing.T) {
	remote := hubtest.Start(t, nil)
	remote.Put("urn:r:a", hubtest.BareTD("urn:r:a", "A"))
	f := newFront(t, remote.URL)
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	p := startPuller(t, f.srv.URL, reg, nil)
	<-p.Synced()
	remote.Put("urn:r:b", hubtest.BareTD("urn:r:b", "B"))
	eventually(t, "b", func() bool { return titleOf(t, reg, "urn:r:b") == "B" })
	seqB := remote.Main.Registry.Revision()

	f.hold()
	f.cut()
	remote.Put("urn:r:c", hubtest.BareTD("urn:r:c", "C"))
	remoteDelete(t, remote, "urn:r:a")
	f.release()
	eventually(t, "c", func() bool { return titleOf(t, reg, "urn:r:c") == "C" })
	eventually(t, "a deleted", func() bool { _, err := reg.Get("urn:r:a"); return hub.ErrorCode(err) == hub.ENOTFOUND })
	lists, resumes := f.counts()
	if len(resumes) < 2 || resumes[0] != "" || resumes[len(resumes)-1] != fmt.Sprint(seqB) {
		t.Fatalf("Last-Event-ID of the feeds: %q, want \"\" then %d", resumes, seqB)
	}
	if lists != 1 {
		t.Fatalf("%d full reads, want 1: the resumption read everything again", lists)
	}
}

// A feed resumed from before the remote's event log (it holds 5 here)
// opens with lmos_resync: the Puller reads everything again.
func TestPullResyncsAfterAGap(t *testing.T) {
	remote := hubtest.Start(t, func(c *app.Config) { c.Registry.EventLogSize = 5 })
	remote.Put("urn:r:gone", hubtest.BareTD("urn:r:gone", "Gone"))
	f := newFront(t, remote.URL)
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	p := startPuller(t, f.srv.URL, reg, nil)
	<-p.Synced()
	remote.Put("urn:r:x", hubtest.BareTD("urn:r:x", "X"))
	eventually(t, "x", func() bool { return titleOf(t, reg, "urn:r:x") == "X" })

	f.hold()
	f.cut()
	remoteDelete(t, remote, "urn:r:gone")
	for i := range 8 {
		id := fmt.Sprintf("urn:r:g%d", i)
		remote.Put(id, hubtest.BareTD(id, "G"))
	}
	f.release()
	eventually(t, "the Things created during the gap", func() bool { return len(reg.MirroredFrom(f.srv.URL)) == 9 })
	eventually(t, "the deletion during the gap", func() bool {
		_, err := reg.Get("urn:r:gone")
		return hub.ErrorCode(err) == hub.ENOTFOUND
	})
	if lists, _ := f.counts(); lists < 2 {
		t.Fatalf("%d full reads: no resync after the gap", lists)
	}
	// Live again after the resync.
	remote.Put("urn:r:after", hubtest.BareTD("urn:r:after", "After"))
	eventually(t, "live after the resync", func() bool { return titleOf(t, reg, "urn:r:after") == "After" })
}

// The JSONPath filter mirrors only the Things it selects; one that stops
// matching is unmirrored.
func TestPullJSONPathFilter(t *testing.T) {
	remote := hubtest.Start(t, nil)
	remote.Put("urn:r:lamp", hubtest.BareTD("urn:r:lamp", "Lamp"))
	remote.Put("urn:r:fan", hubtest.BareTD("urn:r:fan", "Fan"))
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	p := startPuller(t, remote.URL, reg, func(c *dirsync.PullConfig) { c.JSONPath = "$[?@.title == 'Lamp']" })
	<-p.Synced()
	if got := reg.MirroredFrom(remote.URL); len(got) != 1 || got[0] != "urn:r:lamp" {
		t.Fatalf("mirrored %v, want the lamp only", got)
	}
	remote.Put("urn:r:lamp2", hubtest.BareTD("urn:r:lamp2", "Lamp"))
	eventually(t, "the second lamp", func() bool { return titleOf(t, reg, "urn:r:lamp2") == "Lamp" })
	remotePatch(t, remote, "urn:r:lamp", `{"title":"Torch"}`)
	eventually(t, "the renamed lamp unmirrored", func() bool { _, err := reg.Get("urn:r:lamp"); return hub.ErrorCode(err) == hub.ENOTFOUND })
	remotePatch(t, remote, "urn:r:fan", `{"title":"Lamp"}`)
	eventually(t, "the fan become a lamp", func() bool { return titleOf(t, reg, "urn:r:fan") == "Lamp" })
	if _, err := dirsync.NewPuller(dirsync.PullConfig{URL: remote.URL, Registry: reg, JSONPath: "$[?"}); err == nil || !strings.Contains(err.Error(), "pull filter") {
		t.Fatalf("bad JSONPath: %v", err)
	}
}

// A remote without a change feed is read again every Interval.
func TestPullPollsARemoteWithoutAFeed(t *testing.T) {
	remote := hubtest.Start(t, nil)
	remote.Put("urn:r:p1", hubtest.BareTD("urn:r:p1", "P"))
	f := newFront(t, remote.URL)
	f.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/events" {
			http.NotFound(w, r)
			return true
		}
		return false
	})
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	p := startPuller(t, f.srv.URL, reg, func(c *dirsync.PullConfig) { c.Interval = 20 * time.Millisecond })
	<-p.Synced()
	remote.Put("urn:r:p2", hubtest.BareTD("urn:r:p2", "P2"))
	remoteDelete(t, remote, "urn:r:p1")
	eventually(t, "p2 by polling", func() bool { return titleOf(t, reg, "urn:r:p2") == "P2" })
	eventually(t, "p1 gone by polling", func() bool { _, err := reg.Get("urn:r:p1"); return hub.ErrorCode(err) == hub.ENOTFOUND })
	if st := p.State(); st.State != hub.LinkConnected || st.Errors != 0 {
		t.Fatalf("state %+v", st)
	}
}

// httptestClosedURL is the URL of a server that was started and closed:
// nothing listens there.
func httptestClosedURL(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.NotFoundHandler())
	u := s.URL
	s.Close()
	return u
}

// A filter that selects nothing drops every mirror of the remote: how an
// operator removes the mirrors of a pull (README).
func TestPullFilterSelectingNothingDropsTheMirrors(t *testing.T) {
	remote := hubtest.Start(t, nil)
	remote.Put("urn:r:d1", hubtest.BareTD("urn:r:d1", "D"))
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	p := startPuller(t, remote.URL, reg, func(c *dirsync.PullConfig) { c.JSONPath = "$" })
	<-p.Synced()
	p.Close()
	if got := reg.MirroredFrom(remote.URL); len(got) != 1 {
		t.Fatalf("mirrored %v", got)
	}
	p = startPuller(t, remote.URL, reg, func(c *dirsync.PullConfig) { c.JSONPath = "$.none" })
	<-p.Synced()
	if got := reg.MirroredFrom(remote.URL); len(got) != 0 {
		t.Fatalf("still mirrored %v", got)
	}
}

// A feed silent for IdleTimeout (a connection dead without a word) is
// reopened from the last change applied.
func TestPullReopensASilentFeed(t *testing.T) {
	remote := hubtest.Start(t, nil)
	f := newFront(t, remote.URL)
	reg, _ := regtest.Open(t, hub.RegistryOptions{})
	p := startPuller(t, f.srv.URL, reg, func(c *dirsync.PullConfig) { c.IdleTimeout = 100 * time.Millisecond })
	<-p.Synced()
	remote.Put("urn:r:s", hubtest.BareTD("urn:r:s", "S"))
	eventually(t, "s", func() bool { return titleOf(t, reg, "urn:r:s") == "S" })
	seq := fmt.Sprint(remote.Main.Registry.Revision())
	eventually(t, "the feed reopened from the change", func() bool {
		_, resumes := f.counts()
		return len(resumes) >= 2 && resumes[len(resumes)-1] == seq
	})
	before, _ := f.counts()
	remote.Put("urn:r:s2", hubtest.BareTD("urn:r:s2", "S2"))
	eventually(t, "s2", func() bool { return titleOf(t, reg, "urn:r:s2") == "S2" })
	eventually(t, "another reopening", func() bool { _, resumes := f.counts(); return len(resumes) >= 4 })
	if lists, _ := f.counts(); lists != before {
		t.Fatalf("%d full reads, %d before: a reopened feed read everything again", lists, before)
	}
}
