package mqtt

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
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

// burstGoingOn wakes tidyStacks for a collection during a burst; one
// already pending is enough.
func (b *Broker) burstGoingOn() {
	select {
	case b.burst <- struct{}{}:
	default:
	}
}

// tidyStacks runs until b.stop closes.
func (b *Broker) tidyStacks() {
	t := time.NewTicker(tidyQuiet)
	defer t.Stop()
	var seen, tidied uint64
	// stacksAtGC is the goroutine stack memory after the last collection
	// during a burst.
	var stacksAtGC uint64
	burstSamples := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/gc/heap/live:bytes"}}
	for {
		select {
		case <-b.stop:
			return
		case <-b.burst:
			metrics.Read(burstSamples)
			stacks, live := burstSamples[0].Value.Uint64(), burstSamples[1].Value.Uint64()
			if stacks < stacksAtGC+live/burstStackShare {
				continue
			}
			runtime.GC()
			b.burstTidies.Add(1)
			metrics.Read(burstSamples)
			stacksAtGC = burstSamples[0].Value.Uint64()
			continue
		case <-t.C:
		}
		// Parked connections hand their goroutines' stacks back too
		// (park.go): a burst of them is tidied like one of connections.
		n := b.accepted.Load() + b.parks()
		if n == seen && n-tidied >= tidyAfter {
			stacks := uint64(1<<64 - 1)
			for range tidyPasses {
				runtime.GC()
				metrics.Read(burstSamples[:1])
				now := burstSamples[0].Value.Uint64()
				if now >= stacks {
					break
				}
				stacks = now
			}
			debug.FreeOSMemory()
			b.tidies.Add(1)
			b.log.Debug("collected after a burst of connections", "connections", n-tidied)
			tidied = n
		}
		seen = n
	}
}
