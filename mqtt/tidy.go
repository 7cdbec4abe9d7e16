package mqtt

import (
	"runtime"
	"runtime/debug"
	"time"
)

// Go shrinks a goroutine's stack only during a garbage collection, by half
// each time, and an idle hub may not collect for minutes (the runtime
// forces one every two minutes). mochi's handshake grows each client's
// reading goroutine to ~32 KB, while an idle client needs 8–16 KB. So once
// a burst of connections is over, the broker runs the two collections that
// bring the stacks down: for 1,000 idle clients, from ~45 MB to ~21 MB.
// The second one also hands the memory freed back to the OS at once
// (debug.FreeOSMemory), instead of leaving it to the background scavenger.
//
// While a burst lasts (1,000 agents reconnecting after a restart), every
// tidyDuring new connections the broker collects once more: the stacks of
// the clients already idle halve to 16 KB and the next handshakes reuse
// what they freed, so the peak stays near what the clients settle at
// instead of 32 KB each until the burst is over (for 1,000 clients
// ~59 MB → ~45 MB; docs/PERFORMANCE.md, "Issue 16 — memory"). A
// collection with 1,000 idle clients takes a few ms of CPU, against
// ~0.3 s of handshakes for the tidyDuring connections between two.
const (
	// tidyAfter is how many new connections make a burst.
	tidyAfter = 64
	// tidyQuiet is how long no connection may arrive before the burst is
	// taken as over.
	tidyQuiet = time.Second
	// tidyDuring is how many new connections make a collection while a
	// burst lasts.
	tidyDuring = 256
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
	for {
		select {
		case <-b.stop:
			return
		case <-b.burst:
			runtime.GC()
			b.burstTidies.Add(1)
			continue
		case <-t.C:
		}
		n := b.accepted.Load()
		if n == seen && n-tidied >= tidyAfter {
			runtime.GC()
			debug.FreeOSMemory()
			b.tidies.Add(1)
			b.log.Debug("collected after a burst of connections", "connections", n-tidied)
			tidied = n
		}
		seen = n
	}
}
