package dirsync_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/faultproxy"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// registration reads the enriched registration of id on h.
func registration(t *testing.T, h *hubtest.Hub, id string) (ttl float64, expires string) {
	t.Helper()
	var doc struct {
		Registration struct {
			TTL     float64 `json:"ttl"`
			Expires string  `json:"expires"`
		} `json:"registration"`
	}
	h.GetJSON("/things/"+url.PathEscape(id), http.StatusOK, &doc)
	return doc.Registration.TTL, doc.Registration.Expires
}

func TestPushThingsEditsDeletesAndTTL(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	put(t, local, "urn:p:a", td("urn:p:a", "A"))
	// A mirror of another directory's Thing is never pushed.
	if _, err := local.Main.Registry.Mirror(context.Background(), "urn:p:mirror", td("urn:p:mirror", "M"), "http://elsewhere"); err != nil {
		t.Fatal(err)
	}
	p := startPusher(t, local, dirsync.PushConfig{URL: remote.URL, TTL: 90 * time.Second})
	put(t, local, "urn:p:b", td("urn:p:b", "B"))
	converged(t, local, remote, p)
	if ttl, exp := registration(t, remote, "urn:p:a"); ttl != 90 || exp == "" {
		t.Fatalf("remote registration ttl=%v expires=%q, want 90 and an expiry", ttl, exp)
	}
	// The copy is the stored document with the TTL: nothing of the local
	// hub's enrichment.
	var raw map[string]any
	remote.GetJSON("/things/urn:p:a?enriched=false", http.StatusOK, &raw)
	if _, ok := raw["lmos:origin"]; ok || raw["title"] != "A" {
		t.Fatalf("remote stored %v", raw)
	}
	if got := titles(t, remote)["urn:p:mirror"]; got != "" {
		t.Fatal("a mirrored Thing was pushed")
	}
	put(t, local, "urn:p:a", td("urn:p:a", "A2"))
	del(t, local, "urn:p:b")
	converged(t, local, remote, p)
	if got := titles(t, remote); got["urn:p:a"] != "A2" || got["urn:p:b"] != "" {
		t.Fatalf("remote = %v, want A2 and no urn:p:b", got)
	}
	st := p.State()
	if st.Kind != hub.LinkSync || st.URL != remote.URL || st.State != hub.LinkConnected || st.Sent < 4 ||
		st.Outbox != 0 || st.Lag != 0 || st.Things != 1 || st.LastSuccess.IsZero() || st.Errors != 0 {
		t.Fatalf("State = %+v", st)
	}
	// Deleting the mirror locally deletes nothing on the remote.
	resp, _ := remote.Do(http.MethodPut, "/things/urn:p:mirror", "application/td+json", td("urn:p:mirror", "R"), hubtest.Token)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT on remote: %d", resp.StatusCode)
	}
	if err := local.Main.Registry.Unmirror(context.Background(), "urn:p:mirror", "http://elsewhere"); err != nil {
		t.Fatal(err)
	}
	put(t, local, "urn:p:c", td("urn:p:c", "C")) // a later change: the mirror's deletion went before it
	testwait.Eventually(t, wait, "urn:p:c pushed", func() bool { return titles(t, remote)["urn:p:c"] == "C" })
	if got := titles(t, remote)["urn:p:mirror"]; got != "R" {
		t.Fatalf("the remote's own urn:p:mirror = %q, want it kept", got)
	}
}

func TestPushRefreshesBeforeTTL(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	proxy := faultproxy.New(t, remote.URL)
	clock := newFakeClock()
	put(t, local, "urn:r:a", td("urn:r:a", "A"))
	p := startPusher(t, local, dirsync.PushConfig{URL: proxy.URL(), Interval: time.Minute, TTL: 10 * time.Minute, Clock: clock})
	converged(t, local, remote, p)
	if ttl, _ := registration(t, remote, "urn:r:a"); ttl != 600 {
		t.Fatalf("ttl = %v, want 600", ttl)
	}
	n := len(proxy.Log())
	ticks := func() int { return countOf(clock.Asked(), time.Minute) }
	// Refreshed once the copy would expire within two intervals: not
	// before 8 minutes, at 8.
	for minute := 1; minute <= 7; minute++ {
		before := ticks()
		clock.Advance(time.Minute)
		testwait.Eventually(t, wait, "the refresh tick ran", func() bool { return ticks() > before })
		if got := proxy.Log()[n:]; len(got) != 0 || p.State().Outbox != 0 {
			t.Fatalf("after %d minutes sent %v; the copy has %d minutes left", minute, got, 10-minute)
		}
	}
	clock.Advance(time.Minute)
	testwait.Eventually(t, wait, "a refresh", func() bool { return len(proxy.Log()) > n })
	if got := proxy.Log()[n]; got != "PUT urn:r:a" {
		t.Fatalf("refresh sent %q", got)
	}
	if ttl, _ := registration(t, remote, "urn:r:a"); ttl != 600 {
		t.Fatalf("refreshed ttl = %v, want 600", ttl)
	}
}

func countOf(ds []time.Duration, d time.Duration) int {
	n := 0
	for _, x := range ds {
		if x == d {
			n++
		}
	}
	return n
}

// TestPushSignedStaysVerifiable: a signed TD is pushed exactly as signed,
// its proof covering registration (PROTOCOL §6); adding a ttl would make
// the remote refuse it.
func TestPushSignedStaysVerifiable(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := proof.Sign(td("urn:s:a", "Signed"), priv, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	put(t, local, "urn:s:a", signed)
	p := startPusher(t, local, dirsync.PushConfig{URL: remote.URL})
	converged(t, local, remote, p)
	_, body := remote.Do(http.MethodGet, "/things/urn:s:a?enriched=false", "", nil, hubtest.Token)
	if string(body) != string(signed) {
		t.Fatalf("remote stored\n%s\nwant the signed bytes\n%s", body, signed)
	}
	_, enriched := remote.Do(http.MethodGet, "/things/urn:s:a", "", nil, hubtest.Token)
	stripped, err := hub.StripEnrichment(enriched)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proof.Verify(stripped); err != nil {
		t.Fatalf("the remote copy does not verify: %v", err)
	}
	var doc map[string]any
	json.Unmarshal(enriched, &doc)
	if doc["lmos:verified"] != proof.DID(priv.Public().(ed25519.PublicKey)) {
		t.Fatalf("remote lmos:verified = %v", doc["lmos:verified"])
	}
	// A restart sends it again (the reconciliation): the remote takes the
	// same signed document again, no error.
	stopPusher(t, p)
	p = startPusher(t, local, dirsync.PushConfig{URL: remote.URL})
	testwait.Eventually(t, wait, "the signed TD sent again", func() bool { return p.State().Sent == 1 })
	if st := p.State(); st.Errors != 0 || st.Outbox != 0 {
		t.Fatalf("State after sending the signed TD again = %+v", st)
	}
	// Why no ttl is added: the remote refuses the signed TD with one.
	var m map[string]any
	json.Unmarshal(signed, &m)
	m["registration"] = map[string]any{"ttl": 180}
	withTTL, _ := json.Marshal(m)
	resp, body := remote.Do(http.MethodPut, "/things/urn:s:a", "application/td+json", withTTL, hubtest.Token)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "signature") {
		t.Fatalf("signed TD with an added ttl: %d %s, want 400 (the proof covers registration)", resp.StatusCode, body)
	}
}

func TestPushRemoteDownThenUpReplaysInOrder(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	proxy := faultproxy.New(t, remote.URL)
	p := startPusher(t, local, dirsync.PushConfig{URL: proxy.URL(), Concurrency: 1})
	put(t, local, "urn:d:0", td("urn:d:0", "zero"))
	converged(t, local, remote, p)
	proxy.Down()
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("urn:d:%d", i)
		put(t, local, id, td(id, "v1"))
	}
	put(t, local, "urn:d:2", td("urn:d:2", "v2")) // coalesces with its creation
	del(t, local, "urn:d:0")
	del(t, local, "urn:d:4") // created and deleted while down: only a deletion
	testwait.Eventually(t, wait, "the outbox holds the changes, the link down with a refused connection", func() bool {
		st := p.State()
		return st.Outbox == 6 && st.State == hub.LinkDown && strings.Contains(st.LastError, "connection refused") && st.Lag > 0
	})
	before := len(proxy.Log())
	proxy.Up()
	converged(t, local, remote, p)
	want := []string{"PUT urn:d:1", "PUT urn:d:2", "PUT urn:d:3", "DELETE urn:d:4", "PUT urn:d:5", "DELETE urn:d:0"}
	// urn:d:4 was never on the remote: its deletion is not sent at all,
	// or answered 404 (not logged).
	want = slices.DeleteFunc(want, func(s string) bool { return s == "DELETE urn:d:4" })
	if got := proxy.Log()[before:]; !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v in order", got, want)
	}
	if got := titles(t, remote)["urn:d:2"]; got != "v2" {
		t.Fatalf("urn:d:2 = %q, want the latest, v2", got)
	}
	if st := p.State(); st.State != hub.LinkConnected || st.Outbox != 0 {
		t.Fatalf("State after = %+v", st)
	}
}

func TestPushRetriesServerErrorsAndTimeouts(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	proxy := faultproxy.New(t, remote.URL)
	var failures atomic.Int32
	proxy.Inject(func(r *http.Request) faultproxy.Fault {
		switch n := failures.Add(1); {
		case n <= 3:
			return faultproxy.Fault{Status: http.StatusInternalServerError}
		case n <= 5:
			return faultproxy.Fault{Hang: true} // longer than the client's timeout
		}
		return faultproxy.Fault{}
	})
	for i := range 3 {
		id := fmt.Sprintf("urn:e:%d", i)
		put(t, local, id, td(id, "T"))
	}
	p := startPusher(t, local, dirsync.PushConfig{URL: proxy.URL(), Concurrency: 1, Timeout: 200 * time.Millisecond})
	converged(t, local, remote, p)
	st := p.State()
	if st.Errors < 5 || st.State != hub.LinkConnected {
		t.Fatalf("State = %+v, want 5 errors counted and connected again", st)
	}
	if !strings.Contains(st.LastError, "deadline") && !strings.Contains(st.LastError, "timeout") {
		t.Fatalf("LastError = %q, want the timeout", st.LastError)
	}
}

func TestPushHonoursRetryAfter(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	proxy := faultproxy.New(t, remote.URL)
	clock := newFakeClock()
	proxy.Inject(func(r *http.Request) faultproxy.Fault {
		return faultproxy.Fault{Status: http.StatusTooManyRequests, Header: map[string]string{"Retry-After": "120"}}
	})
	put(t, local, "urn:l:a", td("urn:l:a", "A"))
	p := startPusher(t, local, dirsync.PushConfig{URL: proxy.URL(), Clock: clock, Interval: time.Hour,
		MinBackoff: time.Second, MaxBackoff: 10 * time.Second})
	testwait.Eventually(t, wait, "a wait of Retry-After", func() bool {
		return slices.Contains(clock.Asked(), 120*time.Second)
	})
	seen := proxy.Seen()
	proxy.Inject(nil)
	clock.Advance(119 * time.Second) // not yet: nothing may go
	if n := proxy.Seen(); n != seen {
		t.Fatalf("%d requests before Retry-After passed", n-seen)
	}
	if st := p.State(); !strings.Contains(st.LastError, "429") || st.Outbox != 1 {
		t.Fatalf("State = %+v", st)
	}
	clock.Advance(time.Second)
	converged(t, local, remote, p)
}

func TestPushWrongTokenKeepsEverything(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	put(t, local, "urn:t:a", td("urn:t:a", "A"))
	put(t, local, "urn:t:b", td("urn:t:b", "B"))
	p := startPusher(t, local, dirsync.PushConfig{URL: remote.URL, Token: "not-the-token-0123456789"})
	testwait.Eventually(t, wait, "a refusal", func() bool { return p.State().Errors > 0 })
	st := p.State()
	if st.State != hub.LinkDown || !strings.Contains(st.LastError, "401") || st.Outbox != 2 {
		t.Fatalf("State = %+v, want down, 401, both changes kept", st)
	}
	if got := titles(t, remote); len(got) != 0 {
		t.Fatalf("remote holds %v", got)
	}
	stopPusher(t, p)
	// With the right token (a restart with it) everything goes.
	p = startPusher(t, local, dirsync.PushConfig{URL: remote.URL})
	converged(t, local, remote, p)
}

func TestPushRemoteRejectsOneThing(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, func(c *app.Config) { c.Registry.MaxTDBytes = 2048 })
	big := td("urn:j:big", strings.Repeat("x", 4096))
	put(t, local, "urn:j:a", td("urn:j:a", "A"))
	put(t, local, "urn:j:big", big)
	put(t, local, "urn:j:c", td("urn:j:c", "C"))
	p := startPusher(t, local, dirsync.PushConfig{URL: remote.URL, Concurrency: 1})
	testwait.Eventually(t, wait, "the others pushed, the outbox empty", func() bool {
		got := titles(t, remote)
		return got["urn:j:a"] == "A" && got["urn:j:c"] == "C" && p.State().Outbox == 0
	})
	if _, ok := titles(t, remote)["urn:j:big"]; ok {
		t.Fatal("the rejected Thing is on the remote")
	}
	st := p.State()
	if st.Errors != 1 || !strings.Contains(st.LastError, "413") || !strings.Contains(st.LastError, "urn:j:big") ||
		st.State != hub.LinkConnected {
		t.Fatalf("State = %+v, want one error naming urn:j:big and 413", st)
	}
}

// TestPushHourOutageTwoRestarts: the uplink down for an hour (the injected
// clock's), the hub restarted twice meanwhile, changes all along, some
// while no pusher ran: when the remote answers, it ends up holding exactly
// the local Things.
func TestPushHourOutageTwoRestarts(t *testing.T) {
	remote := hubtest.Start(t, nil)
	proxy := faultproxy.New(t, remote.URL)
	dir := t.TempDir()
	clock := newFakeClock()
	cfg := dirsync.PushConfig{URL: proxy.URL(), Clock: clock, Interval: time.Minute, MinBackoff: time.Second, MaxBackoff: time.Minute}
	local := hubtest.StartIn(t, dir, nil)
	for i := range 5 {
		id := fmt.Sprintf("urn:h:base%d", i)
		put(t, local, id, td(id, "v0"))
	}
	p := startPusher(t, local, cfg)
	converged(t, local, remote, p)
	proxy.Down()
	start := clock.Now()
	for phase := range 3 {
		for step := range 20 {
			id := fmt.Sprintf("urn:h:%d-%d", phase, step)
			put(t, local, id, td(id, "new"))
			switch step % 5 {
			case 1:
				base := fmt.Sprintf("urn:h:base%d", phase)
				put(t, local, base, td(base, fmt.Sprintf("edit%d", step)))
			case 3:
				del(t, local, fmt.Sprintf("urn:h:%d-%d", phase, step-2))
			}
			clock.Advance(time.Minute)
		}
		if phase == 2 {
			break
		}
		stopPusher(t, p)
		local.Close()
		local = hubtest.StartIn(t, dir, nil)
		// Changes while no pusher runs: found by the reconciliation.
		del(t, local, fmt.Sprintf("urn:h:base%d", 3+phase))
		id := fmt.Sprintf("urn:h:restart%d", phase)
		put(t, local, id, td(id, "between"))
		p = startPusher(t, local, cfg)
	}
	st := p.State()
	if st.Lag < 59*time.Minute || st.State == hub.LinkConnected {
		t.Fatalf("State after an hour down = %+v, want a lag of about an hour (since %v)", st, start)
	}
	proxy.Up()
	var r, l map[string]string
	deadline := time.Now().Add(wait)
	for {
		clock.Advance(time.Minute)
		r, l = titles(t, remote), localTitles(t, local)
		if maps.Equal(r, l) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged:\nremote %v\nlocal  %v\nstate %+v", r, l, p.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// With the clock held, the refreshes the advance queued drain too.
	testwait.Eventually(t, wait, "an empty outbox", func() bool { return p.State().Outbox == 0 })
	got := titles(t, remote)
	if len(got) != 5-2+60-12+2 || got["urn:h:base0"] != "edit16" || got["urn:h:base3"] != "" {
		t.Fatalf("remote holds %d Things: %v", len(got), got)
	}
}

// TestPushDeletionWhileStopped: a Thing deleted while no pusher ran, with
// nothing pending for it, is deleted on the remote at the next start: the
// outbox remembers what it claimed there.
func TestPushDeletionWhileStopped(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	put(t, local, "urn:w:a", td("urn:w:a", "A"))
	put(t, local, "urn:w:b", td("urn:w:b", "B"))
	p := startPusher(t, local, dirsync.PushConfig{URL: remote.URL})
	converged(t, local, remote, p)
	stopPusher(t, p)
	del(t, local, "urn:w:b")
	p = startPusher(t, local, dirsync.PushConfig{URL: remote.URL})
	converged(t, local, remote, p)
	if got := titles(t, remote); got["urn:w:b"] != "" || got["urn:w:a"] != "A" {
		t.Fatalf("remote = %v", got)
	}
}

// TestPushStartedByTheHub: sync.url and sync.token in the configuration
// start a Pusher with the hub (app), whose link the hub reports.
func TestPushStartedByTheHub(t *testing.T) {
	remote := hubtest.Start(t, nil)
	local := hubtest.Start(t, func(c *app.Config) { c.Sync.URL, c.Sync.Token = remote.URL+"/", hubtest.Token })
	if links := hubtest.Start(t, nil).Main.Links(); len(links) != 0 {
		t.Fatalf("a hub without sync.url reports %+v", links)
	}
	put(t, local, "urn:a:one", td("urn:a:one", "One"))
	testwait.Eventually(t, wait, "urn:a:one on the remote", func() bool { return titles(t, remote)["urn:a:one"] == "One" })
	testwait.Eventually(t, wait, "the link's state", func() bool {
		links := local.Main.Links()
		return len(links) == 1 && links[0].Kind == hub.LinkSync && links[0].URL == remote.URL &&
			links[0].State == hub.LinkConnected && links[0].Sent >= 1 && links[0].Outbox == 0
	})
	if ttl, _ := registration(t, remote, "urn:a:one"); ttl != 90 {
		t.Fatalf("ttl = %v, want 3 × the default sync.interval (30 s)", ttl)
	}
}

// gatedOutbox is the store's outbox with Enqueue held while the gate is
// closed: the pusher then stops reading the change feed and falls behind.
type gatedOutbox struct {
	hub.Outbox
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (g *gatedOutbox) Enqueue(now time.Time, changes ...hub.OutboxChange) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return g.Outbox.Enqueue(now, changes...)
}

// TestPushResyncsAfterFallingBehind: a pusher the change feed drops for
// falling behind reconciles, so the changes it missed are pushed too.
func TestPushResyncsAfterFallingBehind(t *testing.T) {
	remote := hubtest.Start(t, nil)
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	reg, err := hub.NewRegistry(db, hub.RegistryOptions{SubscriberBuffer: 2, Logger: hubtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	box := &gatedOutbox{Outbox: db.Outbox("sync")}
	p, err := dirsync.NewPusher(reg, box, dirsync.PushConfig{URL: remote.URL, Token: hubtest.Token, Logger: hubtest.Logger(t),
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPusher(t, p) })
	gate := make(chan struct{})
	box.mu.Lock()
	box.gate = gate
	box.mu.Unlock()
	want := map[string]string{}
	for i := range 20 {
		id := fmt.Sprintf("urn:f:%d", i)
		if _, err := reg.Put(context.Background(), id, td(id, "T"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
			t.Fatal(err)
		}
		want[id] = "T"
	}
	box.mu.Lock()
	box.gate = nil
	box.mu.Unlock()
	close(gate)
	testwait.Eventually(t, wait, "every Thing on the remote", func() bool { return maps.Equal(titles(t, remote), want) })
}

// TestPushThroughTheRemotesRateLimit: an lmos-hub remote that limits the
// writes of one client answers 429 with Retry-After; the pusher waits it
// out and everything arrives.
func TestPushThroughTheRemotesRateLimit(t *testing.T) {
	local := hubtest.Start(t, nil)
	// One write a second, two at once: the third of four comes too soon
	// however slow the machine.
	remote := hubtest.Start(t, func(c *app.Config) { c.HTTP.WriteRate, c.HTTP.WriteBurst = 1, 2 })
	for i := range 4 {
		id := fmt.Sprintf("urn:q:%d", i)
		put(t, local, id, td(id, "T"))
	}
	p := startPusher(t, local, dirsync.PushConfig{URL: remote.URL})
	converged(t, local, remote, p)
	if st := p.State(); st.Errors == 0 || !strings.Contains(st.LastError, "429") {
		t.Fatalf("State = %+v, want the remote's 429s counted", st)
	}
}

// TestPushAndPullTogether: a hub that pushes to a remote and pulls all of
// it back (sync.pull "$") holds its own Things and mirrors of the remote's
// own, and pushes none of the mirrors: no loop, no duplicate.
func TestPushAndPullTogether(t *testing.T) {
	remote := hubtest.Start(t, nil)
	proxy := faultproxy.New(t, remote.URL)
	put(t, remote, "urn:x:remote", td("urn:x:remote", "R"))
	local := hubtest.Start(t, func(c *app.Config) {
		c.Sync.URL, c.Sync.Token, c.Sync.Pull = proxy.URL(), hubtest.Token, "$"
	})
	put(t, local, "urn:x:local", td("urn:x:local", "L"))
	want := map[string]string{"urn:x:remote": "R", "urn:x:local": "L"}
	testwait.Eventually(t, wait, "both hubs hold both Things", func() bool {
		return maps.Equal(titles(t, remote), want) && maps.Equal(titles(t, local), want)
	})
	if th, err := local.Main.Registry.Get("urn:x:remote"); err != nil || th.Meta.Origin.Source != hub.SourceRemote {
		t.Fatalf("urn:x:remote here: %+v %v, want a mirror", th.Meta.Origin, err)
	}
	if th, err := local.Main.Registry.Get("urn:x:local"); err != nil || th.Meta.Origin.Source == hub.SourceRemote {
		t.Fatalf("urn:x:local here: %+v %v, want the local Thing", th.Meta.Origin, err)
	}
	// A change of the remote's Thing comes back as a mirror update, and
	// is not pushed to where it came from.
	put(t, remote, "urn:x:remote", td("urn:x:remote", "R2"))
	testwait.Eventually(t, wait, "the mirror updated", func() bool { return titles(t, local)["urn:x:remote"] == "R2" })
	put(t, local, "urn:x:local", td("urn:x:local", "L2")) // a later push: the mirror's went before, if any
	testwait.Eventually(t, wait, "the edit pushed", func() bool { return titles(t, remote)["urn:x:local"] == "L2" })
	for _, l := range proxy.Log() {
		if l == "PUT urn:x:remote" || l == "DELETE urn:x:remote" {
			t.Fatalf("the mirror was pushed back: %v", proxy.Log())
		}
	}
}

// TestPushIdleHubShowsTheRemote: with nothing to push, one read of the
// remote tells the link's state: connected, or down with a refused token.
func TestPushIdleHubShowsTheRemote(t *testing.T) {
	local := hubtest.Start(t, nil)
	remote := hubtest.Start(t, nil)
	p := startPusher(t, local, dirsync.PushConfig{URL: remote.URL})
	testwait.Eventually(t, wait, "connected", func() bool { return p.State().State == hub.LinkConnected })
	if st := p.State(); st.LastSuccess.IsZero() || st.Sent != 0 || st.Errors != 0 {
		t.Fatalf("State = %+v", st)
	}
	stopPusher(t, p)
	p = startPusher(t, local, dirsync.PushConfig{URL: remote.URL, Token: "not-the-token-0123456789"})
	testwait.Eventually(t, wait, "down", func() bool { return p.State().State == hub.LinkDown })
	if st := p.State(); !strings.Contains(st.LastError, "401") || st.Errors != 1 {
		t.Fatalf("State = %+v, want the 401", st)
	}
}
