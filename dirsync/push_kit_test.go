package dirsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
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
func startPusher(t testing.TB, local *hubtest.Hub, cfg dirsync.PushConfig) *dirsync.Pusher {
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

func stopPusher(t testing.TB, p *dirsync.Pusher) {
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
		return maps.Equal(last, localTitles(t, local)) && p.State().Outbox == 0
	})
}
