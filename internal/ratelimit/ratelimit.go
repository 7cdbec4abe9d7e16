// Package ratelimit owns the per-key token buckets the adapters put in front
// of anonymous sources: HTTP writes and MQTT/WebSocket joins per client
// address, WebSocket messages per connection. Each key gets its own
// golang.org/x/time/rate bucket; buckets that have refilled completely hold
// no state and are swept, so a scan from many addresses cannot grow the map
// without bound.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// sweepEvery is how often Allow drops idle buckets. The sweep is lazy (no
// goroutine to stop) and costs one pass over the map, so between two sweeps
// the map holds at most the keys seen in one period plus those still
// refilling.
const sweepEvery = time.Minute

// Limiter is a token bucket per key (a client address, or "" for a limiter
// owned by one connection). Safe for concurrent use.
type Limiter struct {
	limit rate.Limit // events per second; ≤ 0 disables limiting
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	swept   time.Time
}

// New allows perSecond events per second per key, in bursts of up to burst
// (at least 1); a key starts with a full bucket. perSecond ≤ 0 allows
// everything. now is the clock (time.Now when nil); the buckets read it
// only through it, so tests can drive time.
func New(perSecond float64, burst int, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{
		limit:   rate.Limit(perSecond),
		burst:   max(burst, 1),
		now:     now,
		buckets: map[string]*rate.Limiter{},
	}
}

// Allow takes one token for key; when none is left it returns how long
// until one is.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	if l.limit <= 0 {
		return true, 0
	}
	now := l.now()
	// One lock around lookup, take and sweep: a bucket the sweep drops
	// cannot be spent by a caller that fetched it just before.
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > sweepEvery {
		l.sweep(now)
	}
	b := l.buckets[key]
	if b == nil {
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[key] = b
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	// A refused take leaves the bucket as it was, so its level now says
	// how long the next token takes.
	wait := time.Duration((1 - b.TokensAt(now)) / float64(l.limit) * float64(time.Second))
	return false, wait
}

// sweep drops the buckets that have refilled completely: a new bucket for
// the same key would start in the same state.
func (l *Limiter) sweep(now time.Time) {
	l.swept = now
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
}
