// Package dirsync syncs the hub's registry with a remote Thing Description
// Directory over the standard W3C WoT Discovery directory API only (GET
// /things paged, GET /things/{id}, GET /events as server-sent events with
// Last-Event-ID), so that the remote may be any directory, another lmos-hub
// included. The Puller mirrors a remote directory's Things here.
package dirsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/theory/jsonpath"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Registry is what a Puller needs of the local registry (hub.Registry).
type Registry interface {
	// Mirror stores a remote Thing as a read-only mirror from `from`.
	Mirror(ctx context.Context, id string, raw []byte, from string) (created bool, err error)
	// Unmirror deletes the mirror of id from `from` (ENOTFOUND if none).
	Unmirror(ctx context.Context, id, from string) error
	// MirroredFrom lists the ids mirrored from `from`.
	MirroredFrom(from string) []string
}

// PullConfig configures a Puller; URL and Registry are required.
type PullConfig struct {
	// URL is the remote directory's base URL (…/things is below it).
	URL string
	// Token is sent as a bearer token (optional).
	Token string
	// Authorize, when set, authorizes each request instead of Token (a
	// federation peer signs its requests).
	Authorize func(*http.Request)
	// Filter, when set, says which remote Things to mirror, given the TD
	// as the remote serves it.
	Filter func(doc map[string]any) bool
	// JSONPath (RFC 9535), when set, mirrors a Thing only when the query
	// over the one-element array [TD] selects anything: the query a user
	// would send to /search/jsonpath, e.g. "$[?@.title == 'Lamp']"; "$"
	// mirrors every Thing. Filter and JSONPath must both agree.
	JSONPath string
	// From labels the mirrors (lmos:origin.hub); default URL.
	From string
	// Client makes the requests (default: one with connect, TLS and
	// response-header timeouts and no overall timeout, since the change
	// feed stays open).
	Client   *http.Client
	Registry Registry
	Logger   *slog.Logger
	// Interval is how often a remote without a change feed is read again
	// (default 30 s).
	Interval time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failure, doubled
	// per failure with jitter (defaults 1 s, 1 min); 401 and 403 wait
	// MaxBackoff, 429 its Retry-After (at most MaxRetryAfter).
	MinBackoff, MaxBackoff, MaxRetryAfter time.Duration
	// RequestTimeout bounds each request but the change feed (default
	// 30 s); IdleTimeout ends a change feed silent that long (default
	// 90 s; lmos-hub sends a keep-alive every 15 s).
	RequestTimeout, IdleTimeout time.Duration
	// MaxTDBytes is the largest TD taken (default hub.DefaultMaxTDBytes;
	// the served TD may be up to 64 KiB larger with its enrichment).
	MaxTDBytes int
	// MaxThings is how many remote Things one full read takes at most
	// (default 10,000); MaxPageBytes bounds one page (default 64 MiB);
	// PageSize is the limit asked for per page (default 100).
	MaxThings    int
	MaxPageBytes int64
	PageSize     int
}

// enrichmentSlack is how much larger than the stored TD a served one may
// be (registration, lmos:presence, lmos:origin, lmos:verified, context).
const enrichmentSlack = hub.MirrorEnrichmentSlack

func (c PullConfig) withDefaults() PullConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Interval, 30*time.Second)
	def(&c.MinBackoff, time.Second)
	def(&c.MaxBackoff, time.Minute)
	def(&c.MaxRetryAfter, 10*time.Minute)
	def(&c.RequestTimeout, 30*time.Second)
	def(&c.IdleTimeout, 90*time.Second)
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.MaxTDBytes <= 0 {
		c.MaxTDBytes = hub.DefaultMaxTDBytes
	}
	if c.MaxThings <= 0 {
		c.MaxThings = 10000
	}
	if c.MaxPageBytes <= 0 {
		c.MaxPageBytes = 64 << 20
	}
	if c.PageSize <= 0 {
		c.PageSize = 100
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Client == nil {
		c.Client = defaultClient()
	}
	return c
}

// defaultClient bounds every phase of a request but reading the body
// (each request has its own deadline; the change feed its idle timeout).
func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 30 * time.Second
	t.MaxIdleConnsPerHost = 4
	return &http.Client{Transport: t}
}

// Puller mirrors the Things of a remote directory into the local
// registry: a full read of /things, then the remote's change feed (with
// Last-Event-ID across reconnections, a full read again on lmos_resync or
// a refused resumption), or a full read every Interval where the remote
// has no feed. Failures are retried with backoff; a remote Thing the
// registry refuses is reported and the others go on.
type Puller struct {
	cfg    PullConfig
	base   *url.URL
	from   string
	path   *jsonpath.Path
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// Owned by the run goroutine.
	lastID   string // the last change applied, for Last-Event-ID
	needFull bool   // a full read is due before changes are trusted
	diff     bool   // ask the feed for TDs and patches (?diff=true)

	mu     sync.Mutex
	state  hub.LinkState
	synced chan struct{} // closed after the first full read
}

// NewPuller checks cfg; Start starts the Puller.
func NewPuller(cfg PullConfig) (*Puller, error) {
	cfg = cfg.withDefaults()
	base, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("cannot pull from %q: the URL must be an http or https URL of a directory", cfg.URL)
	}
	if cfg.Registry == nil {
		return nil, errors.New("cannot pull without a registry")
	}
	p := &Puller{cfg: cfg, base: base, from: cfg.From, done: make(chan struct{}), synced: make(chan struct{}), needFull: true, diff: true}
	if p.from == "" {
		p.from = base.String()
	}
	if cfg.JSONPath != "" {
		if p.path, err = jsonpath.Parse(cfg.JSONPath); err != nil {
			return nil, fmt.Errorf("cannot parse the pull filter %q: %w", cfg.JSONPath, err)
		}
	}
	shown := *base
	shown.User = nil
	p.state = hub.LinkState{Kind: hub.LinkPull, Name: p.from, URL: shown.String(), State: hub.LinkConnecting}
	p.log = cfg.Logger.With("link", hub.LinkPull, "url", shown.String())
	return p, nil
}

// From is the label of this Puller's mirrors (lmos:origin.hub).
func (p *Puller) From() string { return p.from }

// Start runs the Puller until Close.
func (p *Puller) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.run(ctx)
}

// Close stops the Puller and waits for it; its mirrors stay.
func (p *Puller) Close() error {
	p.once.Do(func() {
		if p.cancel == nil {
			close(p.done)
			return
		}
		p.cancel()
	})
	<-p.done
	return nil
}

// Synced is closed once the first full read of the remote is applied.
func (p *Puller) Synced() <-chan struct{} { return p.synced }

// State is the link's state (hub.LinkState, Kind hub.LinkPull); Things
// counts the mirrors from this remote.
func (p *Puller) State() hub.LinkState {
	p.mu.Lock()
	s := p.state
	p.mu.Unlock()
	s.Things = len(p.cfg.Registry.MirroredFrom(p.from))
	return s
}

// run connects, syncs and follows until ctx ends, waiting after each
// failure.
func (p *Puller) run(ctx context.Context) {
	defer close(p.done)
	fails := 0
	for {
		progressed, err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			fails = 0
		}
		wait := p.failed(err, fails)
		fails++
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// failed records err and returns how long to wait before the next try.
func (p *Puller) failed(err error, fails int) time.Duration {
	if err == nil {
		err = errors.New("the change feed ended")
	}
	p.mu.Lock()
	p.state.State = hub.LinkDown
	p.state.Errors++
	p.state.LastError, p.state.LastErrorAt = err.Error(), time.Now()
	p.mu.Unlock()
	wait := backoff(p.cfg.MinBackoff, p.cfg.MaxBackoff, fails)
	var se *statusError
	if errors.As(err, &se) {
		switch {
		case se.status == http.StatusTooManyRequests && se.retryAfter > 0:
			wait = min(se.retryAfter, p.cfg.MaxRetryAfter)
		case se.status == http.StatusUnauthorized || se.status == http.StatusForbidden:
			wait = p.cfg.MaxBackoff // a token to fix: try again slowly
		}
	}
	p.log.Warn("pull failed", "err", err, "retry_in", wait)
	return wait
}

// backoff is min·2^fails capped at max, with jitter over its upper half,
// so that many hubs a remote dropped at once do not return at once.
func backoff(lo, hi time.Duration, fails int) time.Duration {
	d := lo
	for range min(fails, 30) {
		if d >= hi/2 {
			d = hi
			break
		}
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

// connected records a successful exchange.
func (p *Puller) connected() {
	p.mu.Lock()
	p.state.State, p.state.LastSuccess = hub.LinkConnected, time.Now()
	p.mu.Unlock()
}

// reject reports a remote Thing the registry refused; the others go on.
func (p *Puller) reject(id string, err error) {
	p.mu.Lock()
	p.state.Errors++
	p.state.LastError, p.state.LastErrorAt = fmt.Sprintf("the remote Thing %q was not mirrored: %v", id, err), time.Now()
	p.mu.Unlock()
	p.log.Warn("remote thing not mirrored", "id", id, "err", err)
}

func (p *Puller) received() {
	p.mu.Lock()
	p.state.Received++
	p.mu.Unlock()
}
