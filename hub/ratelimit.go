package hub

import (
	"math"
	"sync"
	"time"
)

// RateLimiter is a token bucket per key (a client address): HTTP writes and
// anonymous MQTT joins use it. Idle buckets are forgotten so a scan of many
// addresses cannot grow it without bound. Safe for concurrent use.
type RateLimiter struct {
	rate  float64 // tokens per second; 0 disables limiting
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewRateLimiter allows rate events per second per key, in bursts of up to
// burst; rate 0 allows everything. now is the clock (time.Now when nil).
func NewRateLimiter(rate float64, burst int, now func() time.Time) *RateLimiter {
	if now == nil {
		now = time.Now
	}
	return &RateLimiter{rate: rate, burst: float64(max(burst, 1)), now: now, buckets: map[string]*bucket{}}
}

// Allow takes one token for key; when none is left it returns how long
// until one is.
func (l *RateLimiter) Allow(key string) (bool, time.Duration) {
	if l.rate <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > time.Minute {
		l.sweep(now)
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, wait
}

// sweep drops buckets that have refilled completely: they hold no state.
func (l *RateLimiter) sweep(now time.Time) {
	l.swept = now
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}
