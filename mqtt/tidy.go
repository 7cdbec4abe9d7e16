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
const (
	// tidyAfter is how many new connections make a burst.
	tidyAfter = 64
	// tidyQuiet is how long no connection may arrive before the burst is
	// taken as over.
	tidyQuiet = time.Second
)

// tidyStacks runs until b.stop closes.
func (b *Broker) tidyStacks() {
	t := time.NewTicker(tidyQuiet)
	defer t.Stop()
	var seen, tidied uint64
	for {
		select {
		case <-b.stop:
			return
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
