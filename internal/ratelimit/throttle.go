package ratelimit

import (
	"sync"
	"time"
)

// Throttle lets one log line per key (a client) through each period and
// counts those it holds back, so that a flood of refusals costs one line
// per client per period, which says how many were left out.
type Throttle struct {
	period time.Duration
	now    func() time.Time
	mu     sync.Mutex
	keys   map[string]*throttled
}

type throttled struct {
	last       time.Time
	suppressed int
}

// maxThrottleKeys bounds the keys a Throttle remembers: beyond it, keys
// whose period is over are forgotten first.
const maxThrottleKeys = 4096

// NewThrottle returns a Throttle letting one line per key through each
// period; now nil is time.Now.
func NewThrottle(period time.Duration, now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	return &Throttle{period: period, now: now, keys: make(map[string]*throttled)}
}

// Allow reports whether a line for key may be written now and, if so, how
// many lines for key were held back since the last one written.
func (t *Throttle) Allow(key string) (ok bool, suppressed int) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[key]
	if k != nil && now.Sub(k.last) < t.period {
		k.suppressed++
		return false, 0
	}
	if k == nil {
		if len(t.keys) >= maxThrottleKeys {
			t.sweep(now)
		}
		k = &throttled{}
		t.keys[key] = k
	}
	suppressed, k.last, k.suppressed = k.suppressed, now, 0
	return true, suppressed
}

// sweep forgets the keys whose period is over, or all of them when none
// is: a key forgotten early costs at most one more line.
func (t *Throttle) sweep(now time.Time) {
	for key, k := range t.keys {
		if now.Sub(k.last) >= t.period {
			delete(t.keys, key)
		}
	}
	if len(t.keys) >= maxThrottleKeys {
		clear(t.keys)
	}
}
