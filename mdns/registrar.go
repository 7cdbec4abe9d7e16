package mdns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// RegistrarConfig configures a Registrar.
type RegistrarConfig struct {
	// ForgetAfter removes a Thing unseen this long (mdns.forgetAfter).
	ForgetAfter time.Duration
	// Admission is the join mode for Things new to the registry (approve
	// parks them, closed refuses them); nil admits them (open).
	Admission *hub.Admission
	// FetchTimeout bounds one TD fetch (default 5 s).
	FetchTimeout time.Duration
	// MaxTDBytes bounds a fetched TD (default 256 KiB).
	MaxTDBytes int64
	// Workers fetch TDs concurrently (default 4): a flood of announcements
	// waits in a bounded queue instead of growing goroutines.
	Workers int
	// Client fetches TDs (default: a client without proxy that follows at
	// most 3 redirects).
	Client *http.Client
	Logger *slog.Logger
}

// RegistrarStats counts what the Registrar did.
type RegistrarStats struct {
	Registered uint64 // TDs fetched and stored (new or changed)
	Unchanged  uint64 // fetches that found the stored TD unchanged
	Parked     uint64 // new Things put on the pending list (join mode approve)
	Rejected   uint64 // announcements refused (no td, fetch or validation failed, spoof)
	Offline    uint64 // Things set offline by a goodbye or expiry
	Forgotten  uint64 // Things removed after ForgetAfter
	Dropped    uint64 // announcements dropped because the queue was full
}

// Registrar registers the Things browsed on the LAN (PROTOCOL §8): for each
// _wot._tcp instance of type Thing (or without type) it fetches
// scheme://host:port{td}, validates it and stores it with origin mdns; the
// mDNS lifecycle sets its presence, and a Thing unseen for ForgetAfter is
// removed.
//
// A Thing id registered over mDNS is bound to the instance (name and host)
// that registered it first: another instance announcing a TD with that id
// is refused, as is any id registered by other means (HTTP, MQTT). A
// stored Thing no instance has announced since the hub started (or an
// admin approved it) is resumed only from the address it was registered
// from.
type Registrar struct {
	reg *hub.Registry
	cfg RegistrarConfig
	log *slog.Logger

	mu   sync.Mutex
	cond *sync.Cond
	// pending holds the latest event per instance key; an instance's
	// events are handled one at a time, in order, so a goodbye that
	// arrives during a fetch is applied after it.
	pending map[string]dnssd.Event
	order   []string
	busy    map[string]bool
	// things by instance key; owners by Thing id → instance binding.
	things map[string]*mdnsThing
	owners map[string]string
	// absent: Thing id → when it went offline (for ForgetAfter).
	absent   map[string]time.Time
	problems map[string]error
	closed   bool

	stats struct{ registered, unchanged, parked, rejected, offline, forgotten, dropped atomic.Uint64 }
	wg    sync.WaitGroup
	stop  chan struct{}
}

type mdnsThing struct {
	id      string
	binding string
}

// maxPending bounds the instances waiting for a fetch.
const maxPending = 1024

// NewRegistrar starts the fetch workers and the forget loop. Things of
// origin mdns already in the registry are set offline until announced
// again (nothing has been seen yet).
func NewRegistrar(reg *hub.Registry, cfg RegistrarConfig) *Registrar {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ForgetAfter <= 0 {
		cfg.ForgetAfter = 24 * time.Hour
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = 5 * time.Second
	}
	if cfg.MaxTDBytes <= 0 || cfg.MaxTDBytes > int64(reg.MaxTDBytes()) {
		cfg.MaxTDBytes = int64(reg.MaxTDBytes()) // registry.maxTDBytes, as on every door
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Admission == nil {
		// Open: every Thing found joins. The registrar bounds its own
		// fetches, so the anonymous join rate is off.
		cfg.Admission, _ = hub.NewAdmission(reg, nil, "open", -1, 0)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{
			Transport: &http.Transport{Proxy: nil, MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second,
				ResponseHeaderTimeout: cfg.FetchTimeout, DisableCompression: true},
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if len(via) >= 3 {
					return errors.New("too many redirects")
				}
				return nil
			},
		}
	}
	r := &Registrar{
		reg: reg, cfg: cfg, log: cfg.Logger,
		pending: map[string]dnssd.Event{}, busy: map[string]bool{},
		things: map[string]*mdnsThing{}, owners: map[string]string{},
		absent: map[string]time.Time{}, problems: map[string]error{},
		stop: make(chan struct{}),
	}
	r.cond = sync.NewCond(&r.mu)
	r.adoptStored()
	for i := 0; i < cfg.Workers; i++ {
		r.wg.Add(1)
		go r.work()
	}
	r.wg.Add(1)
	go r.forgetLoop()
	return r
}

// adoptStored sets the stored mDNS Things offline and starts their
// ForgetAfter clocks from when they were last seen.
func (r *Registrar) adoptStored() {
	things, _ := r.reg.List(0, 0)
	now := time.Now()
	for _, th := range things {
		if th.Meta.Origin.Source != hub.SourceMDNS {
			continue
		}
		since := now
		if th.Meta.Presence.Status == hub.PresenceOffline && !th.Meta.Presence.Since.IsZero() {
			since = th.Meta.Presence.Since
		} else if err := r.reg.SetPresence(context.Background(), th.ID, hub.PresenceOffline, hub.SourceMDNS); err != nil {
			r.log.Warn("cannot set presence", "id", th.ID, "err", err)
		}
		r.absent[th.ID] = since
	}
}

// Stats returns the counters.
func (r *Registrar) Stats() RegistrarStats {
	return RegistrarStats{
		Registered: r.stats.registered.Load(), Unchanged: r.stats.unchanged.Load(), Parked: r.stats.parked.Load(),
		Rejected: r.stats.rejected.Load(), Offline: r.stats.offline.Load(),
		Forgotten: r.stats.forgotten.Load(), Dropped: r.stats.dropped.Load(),
	}
}

// Problem returns why the last announcement of the instance (dnssd.Entry.Key)
// was refused, or nil.
func (r *Registrar) Problem(key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.problems[key]
}

// Handle takes a browser event; it never blocks (dnssd.BrowserConfig.OnEvent).
func (r *Registrar) Handle(ev dnssd.Event) {
	e := ev.Entry
	if e.Service != lmos.ServiceWoT {
		return
	}
	txt := e.TXT()
	if t, ok := txt[lmos.TXTType]; ok && !strings.EqualFold(t, lmos.TypeThing) {
		return // the hub itself, other directories
	}
	key := e.Key()
	switch ev.Kind {
	case dnssd.Added, dnssd.Updated:
		r.enqueue(key, ev)
	case dnssd.Removed:
		r.mu.Lock()
		_, known := r.things[key]
		_, queued := r.pending[key]
		r.mu.Unlock()
		if known || queued {
			r.enqueue(key, ev)
		}
	case dnssd.Seen:
		r.mu.Lock()
		th := r.things[key]
		var wasAbsent bool
		if th != nil {
			_, wasAbsent = r.absent[th.id]
		}
		r.mu.Unlock()
		// Seen again after it was set offline (an expiry the agent
		// survived): fetch again, which sets it online.
		if wasAbsent {
			r.enqueue(key, dnssd.Event{Kind: dnssd.Updated, Entry: e})
		}
	}
}

func (r *Registrar) enqueue(key string, ev dnssd.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if _, queued := r.pending[key]; !queued {
		if len(r.pending) >= maxPending {
			r.stats.dropped.Add(1)
			r.log.Warn("too many mdns announcements waiting; dropped one", "instance", ev.Entry.Instance)
			return
		}
		r.order = append(r.order, key)
	}
	r.pending[key] = ev // the latest state wins
	r.cond.Signal()
}

func (r *Registrar) work() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		var key string
		var ev dnssd.Event
		for {
			if r.closed {
				r.mu.Unlock()
				return
			}
			found := false
			for i, k := range r.order {
				if !r.busy[k] {
					key, ev, found = k, r.pending[k], true
					r.order = append(r.order[:i], r.order[i+1:]...)
					delete(r.pending, k)
					break
				}
			}
			if found {
				break
			}
			r.cond.Wait()
		}
		// One fetch per instance at a time, so its states apply in order.
		r.busy[key] = true
		th := r.things[key]
		r.mu.Unlock()
		e := ev.Entry
		if ev.Kind == dnssd.Removed {
			if th != nil {
				r.setOffline(th.id, ev.Reason)
			}
			r.mu.Lock()
			delete(r.busy, key)
			r.cond.Broadcast()
			r.mu.Unlock()
			continue
		}
		err := r.register(key, e)
		r.mu.Lock()
		delete(r.busy, key)
		if err != nil {
			r.problems[key] = err
		} else {
			delete(r.problems, key)
		}
		if len(r.problems) > maxPending {
			clear(r.problems)
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if err != nil {
			r.stats.rejected.Add(1)
			r.log.Warn("mdns thing refused", "instance", e.Instance, "host", e.Host, "err", err)
		}
	}
}

// binding identifies an announcing instance: its name and host.
func binding(e dnssd.Entry) string { return e.Key() + "@" + strings.ToLower(e.Host) }

// register fetches the TD of e and joins it (hub.Admission.Join).
func (r *Registrar) register(key string, e dnssd.Entry) error {
	raw, u, err := r.fetch(e)
	if err != nil {
		return err
	}
	// The proof's verification is charged to the TD's host, as the
	// quota per source is (security.verifyRate).
	host := ""
	if pu, err := url.Parse(u); err == nil {
		host = pu.Hostname()
	}
	req := hub.JoinRequest{Door: hub.SourceMDNS, Addr: host, TD: raw}
	p, err := r.cfg.Admission.PrepareJoin(&req)
	if err != nil {
		return fmt.Errorf("cannot register the fetched TD: %w", err)
	}
	id := p.ID()
	if id == "" {
		return hub.Errorf(hub.EINVALID, "cannot register the fetched TD: it has no id (a Thing announced over mDNS must name itself)")
	}
	b := binding(e)
	r.mu.Lock()
	owner, bound := r.owners[id]
	r.mu.Unlock()
	if bound && owner != b {
		return hub.Errorf(hub.EFORBIDDEN, "cannot register %q from %s: the id is bound to another mDNS instance (%s)", id, b, owner)
	}
	// An instance announcing the id since the hub started or an admin
	// approved it resumes it from wherever it serves.
	req.ID, req.Owner = id, bound
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.cfg.Admission.Join(ctx, req)
	if err != nil {
		return fmt.Errorf("cannot register %q from %s: %w", id, b, err)
	}
	if res.Status == lmos.JoinPending {
		r.stats.parked.Add(1)
		r.log.Info("mdns thing waits for approval", "id", id, "instance", e.Instance, "url", u)
		return nil
	}
	if res.Unchanged {
		r.stats.unchanged.Add(1)
	} else {
		r.stats.registered.Add(1)
	}
	r.mu.Lock()
	if old := r.things[key]; old != nil && old.id != id {
		// The instance now describes another Thing: the old one is no
		// longer announced.
		r.absent[old.id] = time.Now()
		delete(r.owners, old.id)
	}
	r.things[key] = &mdnsThing{id: id, binding: b}
	r.owners[id] = b
	delete(r.absent, id)
	r.mu.Unlock()
	if err := r.reg.SetPresence(ctx, id, hub.PresenceOnline, hub.SourceMDNS); err != nil {
		r.log.Warn("cannot set presence", "id", id, "err", err)
	}
	r.log.Info("mdns thing registered", "id", id, "instance", e.Instance, "url", u)
	return nil
}

// fetch GETs the TD within the timeout and size limit.
func (r *Registrar) fetch(e dnssd.Entry) (raw []byte, u string, err error) {
	u, err = e.TDURL()
	if err != nil {
		return nil, u, &hub.Error{Code: hub.EINVALID, Err: err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.FetchTimeout)
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, u, hub.Errorf(hub.EINVALID, "cannot fetch the TD: bad URL %q: %v", u, err)
	}
	req.Header.Set("Accept", lmos.MediaTD+", "+lmos.MediaJSON)
	resp, err := r.cfg.Client.Do(req)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return nil, u, &hub.Error{Code: hub.EUNAVAILABLE, Message: fmt.Sprintf("cannot fetch the TD from %s: no answer within %s", u, r.cfg.FetchTimeout), Err: err}
	}
	if err != nil {
		return nil, u, &hub.Error{Code: hub.EUNAVAILABLE, Message: fmt.Sprintf("cannot fetch the TD from %s", u), Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, u, hub.Errorf(hub.EUNAVAILABLE, "cannot fetch the TD from %s: status %s", u, resp.Status)
	}
	raw, err = io.ReadAll(io.LimitReader(resp.Body, r.cfg.MaxTDBytes+1))
	if err != nil {
		return nil, u, &hub.Error{Code: hub.EUNAVAILABLE, Message: fmt.Sprintf("cannot read the TD from %s", u), Err: err}
	}
	if int64(len(raw)) > r.cfg.MaxTDBytes {
		return nil, u, fmt.Errorf("cannot register the TD from %s: %w", u, hub.TooLarge(-1, int(r.cfg.MaxTDBytes)))
	}
	return raw, u, nil
}

// setOffline marks a Thing offline after a goodbye or expiry.
func (r *Registrar) setOffline(id, reason string) {
	r.mu.Lock()
	if _, ok := r.absent[id]; ok {
		r.mu.Unlock()
		return
	}
	r.absent[id] = time.Now()
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.reg.SetPresence(ctx, id, hub.PresenceOffline, hub.SourceMDNS); err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
		r.log.Warn("cannot set presence", "id", id, "err", err)
		return
	}
	r.stats.offline.Add(1)
	r.log.Info("mdns thing offline", "id", id, "reason", reason)
}

// forgetLoop removes Things unseen for ForgetAfter.
func (r *Registrar) forgetLoop() {
	defer r.wg.Done()
	every := min(max(r.cfg.ForgetAfter/4, 100*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.forget(now)
		}
	}
}

func (r *Registrar) forget(now time.Time) {
	var ids []string
	r.mu.Lock()
	for id, since := range r.absent {
		if now.Sub(since) >= r.cfg.ForgetAfter {
			ids = append(ids, id)
			delete(r.absent, id)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		// Only what mDNS registered: another source may have taken it since.
		th, err := r.reg.Get(id)
		if err != nil || th.Meta.Origin.Source != hub.SourceMDNS {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = r.reg.Delete(ctx, id)
		cancel()
		if err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
			r.log.Warn("cannot remove a forgotten mdns thing", "id", id, "err", err)
			continue
		}
		r.mu.Lock()
		delete(r.owners, id)
		for k, th := range r.things {
			if th.id == id {
				delete(r.things, k)
			}
		}
		r.mu.Unlock()
		r.stats.forgotten.Add(1)
		r.log.Info("mdns thing forgotten", "id", id, "unseen_for", r.cfg.ForgetAfter)
	}
}

// Close stops the workers; fetches in flight are cancelled.
func (r *Registrar) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.cond.Broadcast()
	r.mu.Unlock()
	close(r.stop)
	r.wg.Wait()
	return nil
}
