package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Presence of mirrored Things. The standard change feed (/events) the
// mirror follows carries only description changes; an agent coming and
// going at its home hub is a presence event of that hub's own feed
// (/api/events, PROTOCOL §3.4), which this follows for each peer: the
// presence of the Things mirrored from the peer is set from it. Presence
// events are live only (not logged, no Last-Event-ID), so on each
// (re)connection the presence of every mirrored Thing is read again.

// PresenceSetter is what the presence follower needs of the registry
// (hub.Registry).
type PresenceSetter interface {
	Get(id string) (hub.Thing, error)
	SetPresence(ctx context.Context, id, status string, via hub.Source) error
}

// feedIdle ends a peer's feed silent this long (the peer sends a
// keep-alive every 15 s): a peer unplugged sends no reset.
const feedIdle = 60 * time.Second

// followPresence follows the peer's hub feed until ctx ends, reconnecting
// with backoff.
func (f *Federation) followPresence(ctx context.Context, l *link, authorize func(*http.Request)) {
	wait := time.Second
	for ctx.Err() == nil {
		reached, err := f.presenceSession(ctx, l, authorize)
		if ctx.Err() != nil {
			return
		}
		if reached {
			wait = time.Second
		} else {
			// The peer cannot be reached: neither can its Things from
			// here (and a copy of one that moved to another hub may take
			// the place of its mirror).
			f.markOffline(ctx, l)
		}
		f.log.Debug("the peer's presence feed ended", "peer", l.peer.DID, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// presenceSession opens the feed, reads every mirror's presence again and
// applies the feed's presence events until it ends; reached says whether
// the peer answered at all.
func (f *Federation) presenceSession(ctx context.Context, l *link, authorize func(*http.Request)) (reached bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.peer.URL+"/api/events", nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	authorize(req)
	resp, err := f.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return true, fmt.Errorf("the peer's hub feed answered %d", resp.StatusCode)
	}
	// The presences are read while the feed waits; its idle time runs
	// from then, so a long read of a big peer is not taken for a silent
	// feed.
	if err := f.readPresences(ctx, l, authorize); err != nil {
		return true, err
	}
	idle := time.AfterFunc(feedIdle, cancel)
	defer idle.Stop()
	body := &activity{r: resp.Body, touch: func() { idle.Reset(feedIdle) }}
	return true, readEvents(body, func(ev sseEvent) error {
		if ev.name != string(hub.EventPresence) {
			return nil
		}
		var e struct {
			ID       string `json:"id"`
			Presence *struct {
				Status string `json:"status"`
			} `json:"presence"`
		}
		if json.Unmarshal([]byte(ev.data), &e) != nil || e.Presence == nil {
			return nil
		}
		f.setPresence(ctx, l, e.ID, e.Presence.Status)
		return nil
	})
}

// maxKnown bounds the presences a link remembers (a peer holds at most
// its registry.maxThings).
const maxKnown = 100_000

// setPresence records the peer's word on id's presence and sets it if id
// is a Thing mirrored from peer (the peer's presence of another hub's
// Thing is not its say).
func (f *Federation) setPresence(ctx context.Context, l *link, id, status string) {
	l.mu.Lock()
	if _, ok := l.known[id]; ok || len(l.known) < maxKnown {
		l.known[id] = status
	}
	l.mu.Unlock()
	f.applyPresence(ctx, l.peer, id, status)
}

func (f *Federation) applyPresence(ctx context.Context, peer hub.Peer, id, status string) {
	t, err := f.cfg.Registry.Get(id)
	if err != nil || t.Meta.Origin.Source != hub.SourceRemote || t.Meta.Origin.Hub != peer.URL || t.Meta.Presence.Status == status {
		return
	}
	if err := f.cfg.Registry.SetPresence(ctx, id, status, hub.SourceRemote); err != nil && ctx.Err() == nil {
		f.log.Debug("cannot set a mirror's presence", "id", id, "peer", peer.DID, "err", err)
	}
}

// linkRegistry is the registry a peer's mirror writes to: after each
// write the presence the peer's feed told is applied again.
type linkRegistry struct {
	f *Federation
	l *link
}

func (r *linkRegistry) Mirror(ctx context.Context, id string, raw []byte, from string) (bool, error) {
	created, err := r.f.cfg.Registry.Mirror(ctx, id, raw, from)
	if err == nil {
		r.l.mu.Lock()
		status, ok := r.l.known[id]
		r.l.mu.Unlock()
		if ok {
			r.f.applyPresence(ctx, r.l.peer, id, status)
		}
	}
	return created, err
}

func (r *linkRegistry) Unmirror(ctx context.Context, id, from string) error {
	r.l.mu.Lock()
	delete(r.l.known, id)
	r.l.mu.Unlock()
	return r.f.cfg.Registry.Unmirror(ctx, id, from)
}

func (r *linkRegistry) MirroredFrom(from string) []string { return r.f.cfg.Registry.MirroredFrom(from) }

// markOffline sets every Thing mirrored from the peer offline.
func (f *Federation) markOffline(ctx context.Context, l *link) {
	for _, id := range f.cfg.Registry.MirroredFrom(l.peer.URL) {
		f.setPresence(ctx, l, id, hub.PresenceOffline)
	}
}

// maxPresencePages bounds the pages one presence read takes (of 100).
const maxPresencePages = 200

// readPresences reads the presence of the peer's Things (GET /things,
// paged) and sets that of their mirrors here.
func (f *Federation) readPresences(ctx context.Context, l *link, authorize func(*http.Request)) error {
	next := l.peer.URL + "/things?limit=100"
	for range maxPresencePages {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, next, nil)
		if err != nil {
			return err
		}
		authorize(req)
		resp, err := f.client.Do(req)
		if err != nil {
			return err
		}
		var page []struct {
			ID       string `json:"id"`
			Presence struct {
				Status string `json:"status"`
			} `json:"lmos:presence"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&page)
		links := resp.Header.Values("Link")
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			return errors.Join(fmt.Errorf("the peer's /things answered %d", resp.StatusCode), err)
		}
		for _, t := range page {
			if t.Presence.Status != "" {
				f.setPresence(ctx, l, t.ID, t.Presence.Status)
			}
		}
		if next = nextLink(l.peer.URL, links); next == "" {
			return nil
		}
	}
	return nil
}

// nextLink reads the rel="next" target of the Link headers (an lmos-hub
// peer sends one), resolved against base ("" when there is none).
func nextLink(base string, values []string) string {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			target, params, _ := strings.Cut(part, ";")
			target = strings.TrimSpace(target)
			if !strings.Contains(params, `rel="next"`) || len(target) < 2 || target[0] != '<' || target[len(target)-1] != '>' {
				continue
			}
			b, err := url.Parse(base + "/")
			if err != nil {
				return ""
			}
			u, err := b.Parse(target[1 : len(target)-1])
			if err != nil {
				return ""
			}
			return u.String()
		}
	}
	return ""
}

// activity calls touch on every read that returns data.
type activity struct {
	r     io.Reader
	touch func()
}

func (a *activity) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.touch()
	}
	return n, err
}
