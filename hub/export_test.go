package hub

import "crypto/ed25519"

// HoldVerifications makes r's signature checks queue as if a batch were
// running, until release hands the lead to the oldest of them: a test
// gathers concurrent checks into one batch with no timing involved.
// waitQueued returns once n checks are waiting.
func HoldVerifications(r *Registry) (waitQueued func(n int), release func()) {
	b := &r.sigs
	ch := make(chan int, maxSigQueue)
	b.mu.Lock()
	if b.running {
		b.mu.Unlock()
		panic("HoldVerifications while a batch runs")
	}
	b.running = true
	b.queued = func(n int) {
		select {
		case ch <- n:
		default:
		}
	}
	b.mu.Unlock()
	waitQueued = func(n int) {
		for got := range ch {
			if got >= n {
				return
			}
		}
	}
	release = func() {
		b.mu.Lock()
		b.queued = nil
		b.mu.Unlock()
		b.release()
	}
	return waitQueued, release
}

// CheckSignature checks one signature through r's batcher, as a proof's
// verification does.
func CheckSignature(r *Registry, pub ed25519.PublicKey, msg, sig []byte) bool {
	return r.sigs.check(pub, msg, sig)
}

// MaxSigQueue is maxSigQueue.
const MaxSigQueue = maxSigQueue

// StoredCredential is thing's membership credential of gid as the store
// holds it (nil when none), without the renewal MemberCredential does.
func StoredCredential(r *Registry, gid, thing string) []byte {
	cred, err := r.store.MemberCredential(gid, thing)
	if err != nil {
		panic(err)
	}
	return cred
}
