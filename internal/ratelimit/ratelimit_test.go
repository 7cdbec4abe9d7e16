package ratelimit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a manual clock for the limiter.
type clock struct{ t time.Time }

func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func (l *Limiter) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

func TestBurstThenRefusedWithTheWaitForTheNextToken(t *testing.T) {
	c := newClock()
	l := New(2, 3, c.now) // one token every 500ms, 3 at once
	for i := range 3 {
		if ok, wait := l.Allow("a"); !ok || wait != 0 {
			t.Fatalf("take %d of the burst: ok=%v wait=%v", i+1, ok, wait)
		}
	}
	if ok, wait := l.Allow("a"); ok || wait != 500*time.Millisecond {
		t.Fatalf("after the burst: ok=%v wait=%v, want refused with 500ms", ok, wait)
	}
	c.advance(200 * time.Millisecond)
	if ok, wait := l.Allow("a"); ok || wait != 300*time.Millisecond {
		t.Fatalf("200ms later: ok=%v wait=%v, want refused with 300ms", ok, wait)
	}
	c.advance(300 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("a token refilled after 500ms was refused")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("the refilled token was handed out twice")
	}
	// Another key has its own full bucket.
	for i := range 3 {
		if ok, _ := l.Allow("b"); !ok {
			t.Fatalf("key b take %d refused: keys share a bucket", i+1)
		}
	}
}

func TestRefillStopsAtTheBurst(t *testing.T) {
	c := newClock()
	l := New(10, 2, c.now)
	l.Allow("a")
	c.advance(time.Hour)
	n := 0
	for {
		if ok, _ := l.Allow("a"); !ok {
			break
		}
		n++
	}
	if n != 2 {
		t.Fatalf("after an hour idle %d takes passed, want the burst of 2", n)
	}
}

func TestRateZeroOrNegativeAllowsEverything(t *testing.T) {
	for _, r := range []float64{0, -1} {
		c := newClock()
		l := New(r, 1, c.now)
		for i := range 1000 {
			if ok, wait := l.Allow("a"); !ok || wait != 0 {
				t.Fatalf("rate %v, take %d: ok=%v wait=%v", r, i, ok, wait)
			}
		}
		if n := l.held(); n != 0 {
			t.Fatalf("rate %v keeps %d buckets, want none", r, n)
		}
	}
}

func TestBurstBelowOneMeansOne(t *testing.T) {
	for _, b := range []int{0, -5} {
		c := newClock()
		l := New(1, b, c.now)
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("burst %d: first take refused", b)
		}
		if ok, wait := l.Allow("a"); ok || wait != time.Second {
			t.Fatalf("burst %d: second take ok=%v wait=%v, want refused with 1s", b, ok, wait)
		}
	}
}

func TestNilClockIsTheWallClock(t *testing.T) {
	l := New(1, 1, nil)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("first take refused")
	}
	if ok, wait := l.Allow("a"); ok || wait <= 0 || wait > time.Second {
		t.Fatalf("second take ok=%v wait=%v, want refused with (0,1s]", ok, wait)
	}
}

// TestManySourcesThenIdleAreSwept: 100k source addresses each take a token
// (a scan); once their buckets have refilled and a sweep period has passed,
// the next take drops them all, so memory follows the live sources only.
// A bucket still refilling is kept: forgetting it would hand out a fresh
// burst early.
func TestManySourcesThenIdleAreSwept(t *testing.T) {
	c := newClock()
	l := New(1, 10, c.now) // a bucket refills completely in 10s
	l.Allow("busy")
	const sources = 100_000
	for i := range sources {
		if ok, _ := l.Allow(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff)); !ok {
			t.Fatalf("source %d refused on its first take", i)
		}
	}
	if n := l.held(); n != sources+1 {
		t.Fatalf("%d buckets held during the scan, want %d", n, sources+1)
	}
	// busy drains its bucket just before the sweep, so it is not idle.
	c.advance(sweepEvery + time.Second - 5*time.Second)
	for {
		if ok, _ := l.Allow("busy"); !ok {
			break
		}
	}
	c.advance(5 * time.Second)
	l.Allow("other")
	if n := l.held(); n != 2 {
		t.Fatalf("%d buckets held after the sweep, want 2 (busy, other)", n)
	}
	// busy kept its state: 5s refilled 5 tokens, minus none (the first
	// Allow after the sweep was for "other").
	got := 0
	for {
		if ok, _ := l.Allow("busy"); !ok {
			break
		}
		got++
	}
	if got != 5 {
		t.Fatalf("busy had %d tokens after the sweep, want the 5 it refilled", got)
	}
}

// TestConcurrentTakesNeverExceedTheBurst: with the clock stopped, exactly
// burst takes pass however many goroutines race for one key.
func TestConcurrentTakesNeverExceedTheBurst(t *testing.T) {
	c := newClock()
	l := New(1, 50, c.now)
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Allow("a"); ok {
					passed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := passed.Load(); n != 50 {
		t.Fatalf("%d takes passed, want the burst of 50", n)
	}
}

// TestSameDecisionsAsAPlainTokenBucket drives the limiter and a plain token
// bucket (the arithmetic of the hand-written limiter it replaced) through the
// same random takes and clock steps: every decision and wait must agree.
func TestSameDecisionsAsAPlainTokenBucket(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{0.5, 1}, {2, 3}, {20, 100}, {1000, 2000}, {3, 1}} {
		c := newClock()
		l := New(tc.rate, tc.burst, c.now)
		tokens, last := float64(tc.burst), c.now()
		rnd := rand.New(rand.NewPCG(1, uint64(tc.burst)))
		for i := range 5000 {
			c.advance(time.Duration(rnd.Int64N(int64(2*float64(time.Second)/tc.rate) + 1))) // takes arrive about as fast as tokens
			now := c.now()
			tokens = math.Min(float64(tc.burst), tokens+now.Sub(last).Seconds()*tc.rate)
			last = now
			wantOK, wantWait := tokens >= 1, time.Duration(0)
			if wantOK {
				tokens--
			} else {
				wantWait = time.Duration((1 - tokens) / tc.rate * float64(time.Second))
			}
			ok, wait := l.Allow("k")
			if ok != wantOK || (wait-wantWait).Abs() > time.Microsecond {
				t.Fatalf("rate %v burst %d step %d: ok=%v wait=%v, plain bucket ok=%v wait=%v",
					tc.rate, tc.burst, i, ok, wait, wantOK, wantWait)
			}
		}
	}
}

// BenchmarkAllow is the cost the limiter adds to every HTTP write and
// WebSocket message: one source taking tokens, and a scan where every take
// is a new source.
func BenchmarkAllow(b *testing.B) {
	b.Run("one key", func(b *testing.B) {
		l := New(1e9, 1<<30, nil)
		for b.Loop() {
			l.Allow("192.0.2.1")
		}
	})
	b.Run("new keys", func(b *testing.B) {
		keys := make([]string, 1<<16)
		for i := range keys {
			keys[i] = fmt.Sprintf("10.0.%d.%d", i>>8, i&0xff)
		}
		l := New(1, 10, nil)
		i := 0
		for b.Loop() {
			l.Allow(keys[i&(len(keys)-1)])
			i++
		}
	})
}
