package mqtt

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Go shrinks a goroutine's stack only during a garbage collection, by half
// each time, and an idle hub may not collect for minutes (the runtime
// forces one every two minutes). The handshake grows each client's
// goroutine to 16–32 KB, while an idle client needs 4 KB on the hub's
// connection loop (connloop.go; 16 + 4 KB on mochi's). So once a burst of
// connections is over, the broker collects until the stacks stop
// shrinking (at most tidyPasses collections), then hands the memory freed
// back to the OS at once (debug.FreeOSMemory), instead of leaving it to
// the background scavenger.
//
// While a burst lasts (1,000 agents reconnecting after a restart), every
// tidyDuring new connections the broker collects once more: the stacks of
// the clients already idle halve to 16 KB and the next handshakes reuse
// what they freed, so the peak stays near what the clients settle at
// instead of 32 KB each until the burst is over (for 1,000 clients
// ~60 MB → ~53 MB, with 10k TDs ~95 → ~74 MB; docs/PERFORMANCE.md,
// "Issue 16 — memory"). Such a collection takes 5–20 ms of CPU with 10k
// TDs and 1,000 clients; with a larger heap they come less often
// (burstStackShare).
const (
	// tidyAfter is how many new connections make a burst.
	tidyAfter = 64
	// tidyQuiet is how long no connection may arrive before the burst is
	// taken as over.
	tidyQuiet = time.Second
	// tidyDuring is how many new connections make a collection while a
	// burst lasts.
	tidyDuring = 256
	// burstStackShare: a collection during a burst is made only once the
	// stacks grew by a quarter of the live heap since the last one, so its
	// cost (marking the live heap) stays in proportion to what it gives
	// back, however many TDs the hub holds.
	burstStackShare = 4
	// tidyPasses bounds the collections after a burst: 32 KB stacks take
	// three to reach 4 KB.
	tidyPasses = 4
)

// tidier is the state of the collections after and during bursts. It
// keeps no goroutine and no ticker: an idle hub is not woken every
// tidyQuiet to find that nothing happened, and the garbage collector has
// one stack fewer to walk (each wake-up and each stack keeps pages of the
// executable resident: idle memory on a Pi, issue 16). A connection
// accepted or parked arms the timer (activity); it runs until a quiet
// period passes without one, then stops.
type tidier struct {
	// armed: the timer is armed or its callback runs (and re-arms it or
	// clears armed). Set by whoever arms it.
	armed atomic.Bool
	timer *time.Timer
	// bursting: a collection during a burst is on its way.
	bursting atomic.Bool

	// mu serialises the callbacks with each other and with stop.
	mu      sync.Mutex
	stopped bool
	// seen is the connections and parkings counted at the last tick,
	// tidied at the last collection after a burst.
	seen, tidied uint64
	// stacksAtGC is the goroutine stack memory after the last collection
	// during a burst.
	stacksAtGC uint64
	samples    []metrics.Sample
}

func (b *Broker) newTidier() {
	t := &b.tidy
	t.samples = []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/gc/heap/live:bytes"}}
	t.timer = time.AfterFunc(time.Hour, b.tidyTick)
	t.timer.Stop()
}

// activity is a connection accepted or parked: the count it added is
// looked at within two quiet periods.
func (b *Broker) activity() {
	if b.tidy.armed.CompareAndSwap(false, true) {
		b.tidy.timer.Reset(tidyQuiet)
	}
}

// stopTidy ends the collections; none runs after it returns.
func (b *Broker) stopTidy() {
	t := &b.tidy
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	t.timer.Stop()
}

// burstGoingOn makes a collection during a burst; one already on its way
// is enough (it takes the stacks as they are when it runs).
func (b *Broker) burstGoingOn() {
	if b.tidy.bursting.CompareAndSwap(false, true) {
		go b.burstTidy()
	}
}

func (b *Broker) burstTidy() {
	t := &b.tidy
	t.mu.Lock()
	defer t.mu.Unlock()
	// A burst that goes on while this one collects makes another.
	t.bursting.Store(false)
	if t.stopped {
		return
	}
	metrics.Read(t.samples)
	stacks, live := t.samples[0].Value.Uint64(), t.samples[1].Value.Uint64()
	if stacks < t.stacksAtGC+live/burstStackShare {
		return
	}
	runtime.GC()
	b.burstTidies.Add(1)
	metrics.Read(t.samples)
	t.stacksAtGC = t.samples[0].Value.Uint64()
}

// tidyTick is the timer's: the burst is over when a tick sees no
// connection or parking since the one before.
func (b *Broker) tidyTick() {
	t := &b.tidy
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	// Parked connections hand their goroutines' stacks back too
	// (park.go): a burst of them is tidied like one of connections.
	n := b.accepted.Load() + b.parks()
	if n != t.seen {
		t.seen = n
		t.timer.Reset(tidyQuiet)
		return
	}
	if n-t.tidied >= tidyAfter {
		stacks := uint64(1<<64 - 1)
		for range tidyPasses {
			runtime.GC()
			metrics.Read(t.samples[:1])
			now := t.samples[0].Value.Uint64()
			if now >= stacks {
				break
			}
			stacks = now
		}
		debug.FreeOSMemory()
		b.tidies.Add(1)
		b.log.Debug("collected after a burst of connections", "connections", n-t.tidied)
		t.tidied = n
	}
	// Quiet: the timer stays off until the next connection. One counted
	// after the load above but before armed was cleared found the timer
	// armed and did not arm it: it is re-armed here.
	t.armed.Store(false)
	if b.accepted.Load()+b.parks() != n && t.armed.CompareAndSwap(false, true) {
		t.timer.Reset(tidyQuiet)
	}
}
