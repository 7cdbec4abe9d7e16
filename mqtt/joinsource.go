package mqtt

import (
	"sync"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// A join's CPU-heavy part (decoding, parsing, validating and summarising
// the description: tens of milliseconds for a large TD) runs on the
// publishing client's own goroutine, before the join is queued, and each
// source has one join at a time in progress, from its preparation to its
// result: the client's address when it is anonymous, its Thing when it is
// authenticated. So a flood of heavy joins from one address waits its turn
// for itself, the shared join workers (hashed by Thing id) only check and
// commit, which is quick, and a join from another source is no longer
// queued behind a flood's parsing (issue 12). It also bounds the parsed
// documents held in memory to one per source.

// heavyPerSource is how many joins of one source may be in progress at once.
const heavyPerSource = 1

// sourceGates holds one gate per source with a join being prepared or
// waiting; it is empty when nobody publishes a description.
type sourceGates struct {
	mu sync.Mutex
	m  map[string]*sourceGate
}

type sourceGate struct {
	slots chan struct{}
	refs  int
}

// acquire waits for a slot of source's gate and returns its release; false
// when stop closed first.
func (g *sourceGates) acquire(source string, stop <-chan struct{}) (func(), bool) {
	g.mu.Lock()
	if g.m == nil {
		g.m = make(map[string]*sourceGate)
	}
	e := g.m[source]
	if e == nil {
		e = &sourceGate{slots: make(chan struct{}, heavyPerSource)}
		g.m[source] = e
	}
	e.refs++
	g.mu.Unlock()
	drop := func() {
		g.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(g.m, source)
		}
		g.mu.Unlock()
	}
	select {
	case e.slots <- struct{}{}:
		return func() { <-e.slots; drop() }, true
	case <-stop:
		drop()
		return nil, false
	}
}

// joinSource names whose turn a join's preparation takes.
func joinSource(j *joinRequest) string {
	if j.self != "" {
		return "thing " + j.self
	}
	return "addr " + hub.SourceOf(j.remote)
}

// enqueueJoin waits for its source's turn, prepares the join's description
// on the caller's goroutine, then queues the join on its Thing's worker;
// the turn ends with the join. The publishing client waits meanwhile, as
// it waits for a full queue.
func (b *Broker) enqueueJoin(j *joinRequest) {
	// A join the join mode refuses anyway costs no parsing; nor does a
	// deregistration. (A join to approve is parsed: only a valid
	// description is parked.)
	if len(j.payload) == 0 || (j.self == "" && b.adm.Mode() == "closed") {
		b.enqueue(j.tid, func() { b.join(j) })
		return
	}
	release, ok := b.heavy.acquire(joinSource(j), b.stop)
	if !ok {
		return
	}
	// Its error is answered in the join's turn, after the join policy's.
	_, _ = b.adm.PrepareJoin(j.request())
	if !b.enqueue(j.tid, func() {
		defer release()
		b.join(j)
	}) {
		release() // the broker stopped: the job will not run
	}
}
