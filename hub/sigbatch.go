package hub

import (
	"crypto/ed25519"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// Opportunistic batch verification of Ed25519 signatures (PROTOCOL §10).
// Every proof the hub verifies, from any door, ends in sigBatcher.check,
// except a PATCH's, verified inside the write loop, which checks alone.
// Under load several writers reach it at once; checking their signatures
// as one batch costs ~17–23 µs each instead of ~35. Nobody waits for a
// batch to fill: a check arriving while no batch runs becomes the leader
// and runs at once, alone or with whatever is already queued; one arriving
// while a batch runs queues, and is answered by that leader's successor
// (the first queued check, woken to lead the next batch). So a lone check
// costs what it did, and a wait only ever lasts one running batch (and one
// yield of the processor, see runBatch). A batch
// that fails is checked one by one, so exactly its bad signatures are
// refused: ZIP-215 (lmos/proof) makes the two ways give the same answer.

const (
	// maxSigBatch bounds one batch: past ~32 the saving per signature is
	// small, and a failed batch of 64 costs ~1 ms more than one by one.
	maxSigBatch = 64
	// maxSigQueue bounds the checks waiting; beyond it a check runs alone
	// at once (counted in VerifyStats.Overflow). The per-source verify
	// rate limit (security.verifyRate) applies before a check gets here.
	maxSigQueue = 4 * maxSigBatch
)

// sigBatcher batches concurrent signature checks; its zero value is ready.
type sigBatcher struct {
	mu      sync.Mutex
	running bool        // a leader is checking a batch
	queue   []*sigCheck // waiting for the next batch, oldest first
	queued  func(n int) // test hook: a check queued, n now waiting

	// Used by the leader only (one at a time).
	lead []*sigCheck
	sigs []proof.Signature

	stats sigStats
}

// sigCheck is one caller's signature and, once checked, its answer.
type sigCheck struct {
	pub      ed25519.PublicKey
	msg, sig []byte
	ok       bool
	leader   bool          // woken to lead the next batch, not answered
	done     chan struct{} // one token: answered, or leader
}

var sigCheckPool = sync.Pool{New: func() any { return &sigCheck{done: make(chan struct{}, 1)} }}

// VerifyStats counts the hub's signature checks since start.
type VerifyStats struct {
	// Checks is every signature checked; Batches the batches of two or
	// more, holding Batched of them; Failed the batches that failed and
	// were checked one by one; Overflow the checks run alone because the
	// queue was full.
	Checks, Batches, Batched, Failed, Overflow uint64
	// Sizes counts the batches (a lone check is a batch of one) by size:
	// 1, 2–3, 4–7, 8–15, 16–31, 32–63, 64.
	Sizes [7]uint64
}

type sigStats struct {
	checks, batches, batched, failed, overflow atomic.Uint64
	sizes                                      [7]atomic.Uint64
}

// VerifyStats reports the hub's signature checks and their batches.
func (r *Registry) VerifyStats() VerifyStats {
	s := &r.sigs.stats
	v := VerifyStats{Checks: s.checks.Load(), Batches: s.batches.Load(), Batched: s.batched.Load(),
		Failed: s.failed.Load(), Overflow: s.overflow.Load()}
	for i := range s.sizes {
		v.Sizes[i] = s.sizes[i].Load()
	}
	return v
}

// check reports whether sig is a valid signature of msg by pub, as
// proof.CheckSignature does; it is a proof.Checker. The arguments are not
// kept after it returns.
func (b *sigBatcher) check(pub ed25519.PublicKey, msg, sig []byte) bool {
	c := sigCheckPool.Get().(*sigCheck)
	c.pub, c.msg, c.sig, c.ok, c.leader = pub, msg, sig, false, false
	b.mu.Lock()
	switch {
	case !b.running:
		b.running = true
		b.mu.Unlock()
		b.runBatch(c)
	case len(b.queue) >= maxSigQueue:
		b.mu.Unlock()
		b.stats.overflow.Add(1)
		b.stats.checks.Add(1)
		c.ok = proof.CheckSignature(pub, msg, sig)
	default:
		b.queue = append(b.queue, c)
		n, hook := len(b.queue), b.queued
		b.mu.Unlock()
		if hook != nil {
			hook(n)
		}
		<-c.done
		if c.leader {
			b.runBatch(c)
		}
	}
	ok := c.ok
	c.pub, c.msg, c.sig = nil, nil, nil
	sigCheckPool.Put(c)
	return ok
}

// runBatch checks own and what is queued (up to maxSigBatch in all),
// answers the queued ones, and hands the lead to the oldest check still
// waiting, or ends the run. The caller holds the lead.
func (b *sigBatcher) runBatch(own *sigCheck) {
	// Yield once before taking the queue. On an idle hub nothing else is
	// runnable and this returns at once; under load the writers already
	// runnable (a burst of PUTs answered by one commit) get to run up to
	// their own verification and queue behind this lead, instead of each
	// finding the lead free a moment later. No timer: it waits for no one
	// who is not already running. Measured on the 10k signed PUTs: 6–13 %
	// of signatures batched without it, 90–95 % with it (PERFORMANCE.md).
	runtime.Gosched()
	b.mu.Lock()
	n := min(len(b.queue), maxSigBatch-1)
	batch := append(b.lead[:0], own)
	batch = append(batch, b.queue[:n]...)
	b.queue = b.queue[:copy(b.queue, b.queue[n:])]
	b.mu.Unlock()

	b.checkAll(batch)
	for _, c := range batch[1:] {
		c.done <- struct{}{} // c belongs to its caller again from here
	}
	clear(batch)
	b.lead = batch[:0]
	b.release()
}

// release hands the lead to the oldest waiting check, or ends the run.
func (b *sigBatcher) release() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.running = false
		b.mu.Unlock()
		return
	}
	next := b.queue[0]
	b.queue = b.queue[:copy(b.queue, b.queue[1:])]
	b.mu.Unlock()
	next.leader = true
	next.done <- struct{}{}
}

// checkAll sets ok of every check of batch: one batch verification, and
// each alone when it fails (it does not say which failed).
func (b *sigBatcher) checkAll(batch []*sigCheck) {
	b.stats.checks.Add(uint64(len(batch)))
	b.stats.sizes[sizeBucket(len(batch))].Add(1)
	if len(batch) == 1 {
		c := batch[0]
		c.ok = proof.CheckSignature(c.pub, c.msg, c.sig)
		return
	}
	b.stats.batches.Add(1)
	b.stats.batched.Add(uint64(len(batch)))
	sigs := b.sigs[:0]
	for _, c := range batch {
		sigs = append(sigs, proof.Signature{Pub: c.pub, Msg: c.msg, Sig: c.sig})
	}
	ok := proof.CheckBatch(sigs)
	clear(sigs)
	b.sigs = sigs[:0]
	if ok {
		for _, c := range batch {
			c.ok = true
		}
		return
	}
	b.stats.failed.Add(1)
	for _, c := range batch {
		c.ok = proof.CheckSignature(c.pub, c.msg, c.sig)
	}
}

// sizeBucket is the VerifyStats.Sizes index of a batch of n (1 ≤ n ≤ 64).
func sizeBucket(n int) int {
	i := 0
	for n > 1 && i < 6 {
		n >>= 1
		i++
	}
	return i
}
