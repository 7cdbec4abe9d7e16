package dirsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// PushRegistry is what a Pusher reads of the local registry.
type PushRegistry interface {
	Subscribe(after uint64, replay bool) (*hub.Subscription, []hub.Event, error)
	List(offset, limit int) ([]*hub.Thing, int)
	Get(id string) (hub.Thing, error)
	Raw(id string) ([]byte, error)
}

// Clock is the time a Pusher waits by; tests inject one to run an hour of
// outage without waiting for it.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Defaults of PushConfig.
const (
	DefaultInterval    = 60 * time.Second
	DefaultConcurrency = 4
	DefaultTimeout     = 30 * time.Second
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 60 * time.Second
)

// PushConfig configures a Pusher; zero fields take the defaults.
type PushConfig struct {
	// URL is the remote directory's base URL (sync.url): Things go to
	// {URL}/things/{id}.
	URL string
	// Token is sent as "Authorization: Bearer" (sync.token); "" sends none.
	Token string
	// Interval is how often the remote copies are refreshed (sync.interval).
	Interval time.Duration
	// TTL is the registration.ttl the copies carry (sync.ttl); default
	// 3 × Interval.
	TTL time.Duration
	// Concurrency bounds the requests in flight (one per Thing at most).
	Concurrency int
	// Timeout bounds each request.
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff after the
	// remote failed (5xx, a timeout, no connection); MaxBackoff is also
	// the retry period while it refuses the token (401, 403).
	MinBackoff, MaxBackoff time.Duration
	Client                 *http.Client // nil: a client of its own
	Clock                  Clock        // nil: the system clock
	Logger                 *slog.Logger
}

func (c PushConfig) withDefaults() PushConfig {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.TTL <= 0 {
		c.TTL = 3 * c.Interval
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
	if c.Client == nil {
		// Keep a connection per request in flight: the default keeps two.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = c.Concurrency
		c.Client = &http.Client{Transport: tr}
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Pusher pushes the local Things to a remote directory (PROTOCOL §9).
type Pusher struct {
	cfg    PushConfig
	reg    PushRegistry
	box    hub.Outbox
	base   string // URL without a trailing slash
	shown  string // URL without credentials
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{}

	mu       sync.Mutex
	claimed  map[string]struct{}  // mirror of the outbox's claimed ids
	pushed   map[string]pushState // what the remote holds from us
	inflight map[string]bool      // sent, or sent and not yet removed
	acks     []hub.OutboxAck      // sent, to remove from the outbox
	ackc     chan struct{}
	epoch    uint64 // flushes so far: a snapshot of the outbox older is stale
	st       hub.LinkState
	pause    time.Time // no request before this (backoff, Retry-After)
	failures int       // consecutive failures, for the backoff
}

// pushState is what was last sent of one Thing.
type pushState struct {
	at  time.Time
	ttl time.Duration // the copy's registration.ttl; 0: it never expires
}

// NewPusher returns a Pusher of reg's Things to cfg.URL through box.
func NewPusher(reg PushRegistry, box hub.Outbox, cfg PushConfig) (*Pusher, error) {
	cfg = cfg.withDefaults()
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("cannot push to %q: not an http(s) URL of a directory", cfg.URL)
	}
	base := u.String()
	for len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	u.User = nil
	shown := strings.TrimRight(u.String(), "/")
	p := &Pusher{cfg: cfg, reg: reg, box: box, base: base, shown: shown,
		log:  cfg.Logger.With("component", "sync", "push", shown),
		wake: make(chan struct{}, 1), ackc: make(chan struct{}, 1), claimed: map[string]struct{}{}, pushed: map[string]pushState{},
		inflight: map[string]bool{}}
	p.st = hub.LinkState{Kind: hub.LinkSync, Name: shown, URL: shown, State: hub.LinkConnecting}
	return p, nil
}

// Start subscribes to the change feed, queues a full reconciliation (every
// local Thing, and the deletion of every claimed id no longer here) and
// starts sending. It returns once the reconciliation is queued.
func (p *Pusher) Start() error {
	err := p.box.Claimed(func(id string) error {
		p.claimed[id] = struct{}{}
		return nil
	})
	if err != nil {
		return err
	}
	sub, err := p.resync()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	if depth, _, err := p.box.Stats(); err == nil && depth == 0 {
		// Nothing to send: one read tells whether the remote answers
		// (and takes the token), so the link's state is known.
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.probe(ctx) }()
	}
	p.wg.Add(4)
	go func() { defer p.wg.Done(); p.follow(ctx, sub) }()
	go func() { defer p.wg.Done(); p.commit(ctx) }()
	go func() { defer p.wg.Done(); p.send(ctx) }()
	go func() { defer p.wg.Done(); p.refresh(ctx) }()
	return nil
}

// Close stops the Pusher; what is not sent stays in the outbox.
func (p *Pusher) Close(ctx context.Context) error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		p.flush() // the acks of the last requests
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cannot stop the sync pusher: %w", ctx.Err())
	}
}

// resync subscribes to the feed and then queues every local Thing: a
// change after the snapshot arrives through the feed, so none is missed.
func (p *Pusher) resync() (*hub.Subscription, error) {
	sub, _, err := p.reg.Subscribe(0, false)
	if err != nil {
		return nil, fmt.Errorf("cannot follow the registry: %w", err)
	}
	things, _ := p.reg.List(0, 0)
	local := make(map[string]bool, len(things))
	var changes []hub.OutboxChange
	for _, t := range things {
		local[t.ID] = true
		if t.Meta.Origin.Source != hub.SourceRemote {
			changes = append(changes, hub.OutboxChange{ID: t.ID})
		}
	}
	queued := make(map[string]bool, len(changes))
	for _, c := range changes {
		queued[c.ID] = true
	}
	p.mu.Lock()
	for id := range p.claimed {
		// A claimed id now mirrored here is let go when its op is sent.
		if !local[id] {
			changes = append(changes, hub.OutboxChange{ID: id, Delete: true})
		} else if !queued[id] {
			changes = append(changes, hub.OutboxChange{ID: id})
		}
	}
	p.mu.Unlock()
	if err := p.enqueue(changes); err != nil {
		sub.Cancel()
		return nil, err
	}
	p.log.Info("sync reconciliation queued", "changes", len(changes))
	return sub, nil
}

// enqueue records changes durably and wakes the sender.
func (p *Pusher) enqueue(changes []hub.OutboxChange) error {
	if len(changes) == 0 {
		return nil
	}
	if err := p.box.Enqueue(p.cfg.Clock.Now(), changes...); err != nil {
		return err
	}
	p.mu.Lock()
	for _, c := range changes {
		if !c.Delete {
			p.claimed[c.ID] = struct{}{}
		}
	}
	p.mu.Unlock()
	p.poke()
	return nil
}

func (p *Pusher) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// follow queues the feed's directory events until ctx ends; a
// subscription dropped for falling behind is renewed with a full
// reconciliation, since the changes it missed are unknown.
func (p *Pusher) follow(ctx context.Context, sub *hub.Subscription) {
	defer func() {
		if sub != nil {
			sub.Cancel()
		}
	}()
	for {
		if !p.followFrom(ctx, sub) {
			return
		}
		if !sub.Dropped() {
			return // the registry closed
		}
		p.log.Warn("sync fell behind the change feed; reconciling")
		sub = nil
		for sub == nil {
			var err error
			if sub, err = p.resync(); err == nil {
				break
			}
			p.log.Error("cannot reconcile", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-p.cfg.Clock.After(p.cfg.MaxBackoff):
			}
		}
	}
}

// followFrom queues sub's events, a burst in one commit, until sub ends
// (true) or ctx does (false).
func (p *Pusher) followFrom(ctx context.Context, sub *hub.Subscription) bool {
	for {
		var batch []hub.Event
		select {
		case <-ctx.Done():
			return false
		case e, ok := <-sub.C:
			if !ok {
				return true
			}
			batch = append(batch, e)
		}
	drain:
		for len(batch) < 512 {
			select {
			case e, ok := <-sub.C:
				if !ok {
					break drain
				}
				batch = append(batch, e)
			default:
				break drain
			}
		}
		if err := p.enqueue(p.changesOf(batch)); err != nil {
			// The registry holds the change; the next reconciliation
			// (a restart) queues it again.
			p.log.Error("cannot queue changes for sync", "err", err)
		}
	}
}

// changesOf picks the changes to push among events: creations and updates
// of local Things, deletions of claimed ids. A mirror's update is queued
// only when its id is claimed (it was pushed as a local Thing), so the
// sender lets it go.
func (p *Pusher) changesOf(events []hub.Event) []hub.OutboxChange {
	var out []hub.OutboxChange
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range events {
		_, claimed := p.claimed[e.ID]
		switch e.Type {
		case hub.EventCreated, hub.EventUpdated:
			t, err := p.reg.Get(e.ID)
			if err != nil {
				continue // deleted since: its deletion follows
			}
			if t.Meta.Origin.Source != hub.SourceRemote || claimed {
				out = append(out, hub.OutboxChange{ID: e.ID})
			}
		case hub.EventDeleted:
			if claimed {
				out = append(out, hub.OutboxChange{ID: e.ID, Delete: true})
			}
		}
	}
	return out
}

// refresh queues, every Interval, the Things whose remote copy would
// expire within two Intervals: one to be sent, one to spare for retries,
// so the remote never ages out a Thing that is still here.
func (p *Pusher) refresh(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.cfg.Clock.After(p.cfg.Interval):
		}
		now := p.cfg.Clock.Now()
		var changes []hub.OutboxChange
		p.mu.Lock()
		for id, s := range p.pushed {
			if s.ttl > 0 && now.Sub(s.at) >= s.ttl-2*p.cfg.Interval {
				changes = append(changes, hub.OutboxChange{ID: id})
			}
		}
		p.mu.Unlock()
		if err := p.enqueue(changes); err != nil {
			p.log.Error("cannot queue refreshes", "err", err)
		}
	}
}

// State reports the link (hub.LinkState, Kind hub.LinkSync).
func (p *Pusher) State() hub.LinkState {
	depth, oldest, err := p.box.Stats()
	p.mu.Lock()
	st := p.st
	st.Things = len(p.pushed)
	p.mu.Unlock()
	if err != nil {
		st.LastError = err.Error()
		return st
	}
	st.Outbox = depth
	if !oldest.IsZero() {
		st.Lag = max(p.cfg.Clock.Now().Sub(oldest), 0)
	}
	return st
}

// errStopped marks a request cut short by Close: no failure of the remote.
var errStopped = errors.New("stopped")
