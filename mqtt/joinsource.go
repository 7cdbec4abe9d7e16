package mqtt

import (
	"sync"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// A join's CPU-heavy part (decoding, parsing, validating and summarising
// the description: tens of milliseconds for a large TD) runs on the
// publishing client's own goroutine, before the join is queued, and at
// most one at a time per source: the client's address when it is
// anonymous, its Thing when it is authenticated. So a flood of heavy joins
// from one address waits its turn for itself, and the shared join workers
// (hashed by Thing id) only check and commit, which is quick: a join from
// another source is no longer queued behind a flood's parsing (issue 12).

// heavyPerSource is how many joins of one source may be prepared at once.
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
	return "addr " + j.remote
}

// enqueueJoin prepares a join's description on the caller's goroutine,
// within its source's turn, then queues the join on its Thing's worker.
func (b *Broker) enqueueJoin(j *joinRequest) {
	// A join the join mode refuses anyway costs no parsing; nor does a
	// deregistration.
	if len(j.payload) > 0 && (j.self != "" || (b.cfg.JoinMode != "closed" && b.cfg.JoinMode != "approve")) {
		release, ok := b.heavy.acquire(joinSource(j), b.stop)
		if !ok {
			return
		}
		j.prep, j.prepErr = b.prepareTD(j.payload, j.contentType)
		j.prepared = true
		release()
	}
	b.enqueue(j.tid, func() { b.join(j) })
}

// prepareTD refuses a description over registry.maxTDBytes before decoding
// it (a CBOR one again after, as JSON, in Prepare), then decodes, parses and
// validates it.
func (b *Broker) prepareTD(payload []byte, contentType string) (*hub.PreparedTD, error) {
	if max := b.reg.MaxTDBytes(); len(payload) > max {
		return nil, hub.TooLarge(len(payload), max)
	}
	raw, err := decodeTD(payload, contentType)
	if err != nil {
		return nil, err
	}
	return b.reg.Prepare(raw)
}
