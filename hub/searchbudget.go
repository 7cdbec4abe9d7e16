package hub

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// SearchLimits bound what one anonymous search may cost (PROTOCOL §10,
// "Limits: search"). Zero values take the defaults.
type SearchLimits struct {
	// MaxNodes caps the JSON nodes one query visits or selects
	// (search.maxNodes, 10,000,000). A descendant query over 10k TDs
	// visits ~1M nodes (BenchmarkSearchJSONPath10k); 10M is about a
	// second of CPU on the test machine and a few on a Pi 4, inside the
	// timeout, and stops the cubic `$..*..*..*` shapes early.
	MaxNodes int64
	// MaxResultBytes caps one answer's encoded size
	// (search.maxResultBytes); 16 MiB is a `$` dump of ~8,000 TDs.
	MaxResultBytes int64
	// Timeout caps one search's wall time, waiting for a slot included
	// (search.timeout, 5s).
	Timeout time.Duration
	// MaxQueryBytes caps the query string (search.maxQueryBytes, 1024).
	MaxQueryBytes int
	// MaxDescendants caps the descendant segments (`..`) in a JSONPath
	// query, filters included (search.maxDescendants, 2): each one
	// multiplies the work by up to the TD depth, and the ones inside
	// filters are evaluated by the JSONPath library outside the node budget.
	MaxDescendants int
	// MaxPerClient caps the searches one client address runs at once
	// (search.maxConcurrentPerClient, 2); more are refused at once.
	MaxPerClient int
	// MaxConcurrent caps the searches running on the hub at once
	// (search.maxConcurrent, GOMAXPROCS); more wait within their Timeout.
	MaxConcurrent int
}

// Default search limits (see SearchLimits).
const (
	DefaultSearchMaxNodes       = 10_000_000
	DefaultSearchMaxResultBytes = 16 << 20
	DefaultSearchTimeout        = 5 * time.Second
	DefaultSearchMaxQueryBytes  = 1024
	DefaultSearchMaxDescendants = 2
	DefaultSearchMaxPerClient   = 2
)

func (l SearchLimits) withDefaults() SearchLimits {
	if l.MaxNodes <= 0 {
		l.MaxNodes = DefaultSearchMaxNodes
	}
	if l.MaxResultBytes <= 0 {
		l.MaxResultBytes = DefaultSearchMaxResultBytes
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultSearchTimeout
	}
	if l.MaxQueryBytes <= 0 {
		l.MaxQueryBytes = DefaultSearchMaxQueryBytes
	}
	if l.MaxDescendants <= 0 {
		l.MaxDescendants = DefaultSearchMaxDescendants
	}
	if l.MaxPerClient <= 0 {
		l.MaxPerClient = DefaultSearchMaxPerClient
	}
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = runtime.GOMAXPROCS(0)
	}
	return l
}

// searchGate admits searches: at most MaxPerClient per client at once
// (refused at once, so one client cannot queue up work) and at most
// MaxConcurrent in all (waiting, so many clients cannot use every core).
type searchGate struct {
	lim   SearchLimits
	slots chan struct{}

	mu        sync.Mutex
	perClient map[string]int

	running atomic.Int64
	nodes   atomic.Int64 // nodes visited by all searches, for /metrics and tests
}

func newSearchGate(lim SearchLimits) *searchGate {
	lim = lim.withDefaults()
	return &searchGate{lim: lim, slots: make(chan struct{}, lim.MaxConcurrent), perClient: make(map[string]int)}
}

// enter admits one search of client; the returned function ends it.
func (g *searchGate) enter(ctx context.Context, client string) (func(), error) {
	g.mu.Lock()
	if g.perClient[client] >= g.lim.MaxPerClient {
		g.mu.Unlock()
		return nil, &Error{Code: ERATELIMIT, Limit: "search.maxConcurrentPerClient",
			Message: "too many searches from this client at once (at most " + strconv.Itoa(g.lim.MaxPerClient) + ")"}
	}
	g.perClient[client]++
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		if g.perClient[client]--; g.perClient[client] <= 0 {
			delete(g.perClient, client)
		}
		g.mu.Unlock()
	}
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, &Error{Code: EUNAVAILABLE, Limit: "search.maxConcurrent",
			Message: "the hub is busy with other searches; retry shortly", Err: ctx.Err()}
	}
	g.running.Add(1)
	return func() {
		g.running.Add(-1)
		<-g.slots
		leave()
	}, nil
}

// SearchStats reports the searches running now and the nodes all searches
// have visited since start.
func (r *Registry) SearchStats() (running, nodes int64) {
	return r.search.running.Load(), r.search.nodes.Load()
}

// budget counts one search's work. The context (the request's, with the
// search timeout) is checked every checkEvery nodes, so an abandoned or
// timed-out search stops within a fraction of a millisecond of work.
type budget struct {
	ctx   context.Context
	lim   SearchLimits
	total *atomic.Int64
	nodes int64
	bytes int64
	tick  int64
}

const checkEvery = 256

func (b *budget) visit(n int) error {
	b.nodes += int64(n)
	b.total.Add(int64(n))
	if b.nodes > b.lim.MaxNodes {
		return &Error{Code: EUNAVAILABLE, Limit: "search.maxNodes",
			Message: "the query visits more than " + strconv.FormatInt(b.lim.MaxNodes, 10) + " nodes; narrow it"}
	}
	if b.tick += int64(n); b.tick >= checkEvery {
		b.tick = 0
		return b.alive()
	}
	return nil
}

// alive reports the context's end as the search's error.
func (b *budget) alive() error {
	switch err := b.ctx.Err(); {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: EUNAVAILABLE, Limit: "search.timeout",
			Message: "the query ran longer than " + b.lim.Timeout.String() + "; narrow it", Err: err}
	default:
		return &Error{Code: EUNAVAILABLE, Message: "the search was abandoned", Err: err}
	}
}

func (b *budget) wrote(n int) error {
	b.bytes += int64(n)
	if b.bytes > b.lim.MaxResultBytes {
		return &Error{Code: ETOOLARGE, Limit: "search.maxResultBytes",
			Message: "the answer exceeds " + strconv.FormatInt(b.lim.MaxResultBytes, 10) + " bytes; narrow the query"}
	}
	return nil
}

// countDescendants counts the descendant segments (`..`) in a JSONPath
// query's canonical form, outside string literals.
func countDescendants(q string) int {
	n := 0
	for i := 0; i < len(q); i++ {
		switch c := q[i]; c {
		case '\'', '"':
			for i++; i < len(q) && q[i] != c; i++ {
				if q[i] == '\\' {
					i++
				}
			}
		case '.':
			if i+1 < len(q) && q[i+1] == '.' {
				n++
				i++
			}
		}
	}
	return n
}
