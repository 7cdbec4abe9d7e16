package hub

import (
	"context"
	"crypto/ed25519"
)

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

// The steps of Admission.Join, for the unit tests of each.

// Verdict is verdict.
type Verdict = verdict

// ErrJoinPending is errJoinPending.
var ErrJoinPending = errJoinPending

// Admit is admitJoin telling only whether the requester presented the
// Thing's credential.
func (a *Admission) Admit(r JoinRequest) (bool, error) {
	v, err := a.admitJoin(&r)
	return v.Credentialed, err
}

// AdmitJoin is admitJoin.
func (a *Admission) AdmitJoin(r JoinRequest) (Verdict, error) { return a.admitJoin(&r) }

// Register is register.
func (a *Admission) Register(ctx context.Context, id string, p *PreparedTD, origin Origin, credHash string) (bool, error) {
	return a.register(ctx, id, p, origin, credHash)
}

// RegisterByKey is registerByKey.
func (a *Admission) RegisterByKey(ctx context.Context, id string, p *PreparedTD, origin Origin, credHash string) (bool, error) {
	return a.registerByKey(ctx, id, p, origin, credHash)
}

// Deregister is deregister.
func (a *Admission) Deregister(ctx context.Context, id string) error { return a.deregister(ctx, id) }

// Park is park.
func (a *Admission) Park(id string, p *PreparedTD, door Source, addr string, w *JoinWaiter) error {
	return a.park(id, p, door, addr, w)
}

// CheckClaim is checkClaim.
func (a *Admission) CheckClaim(id, remote string) (bool, error) { return a.checkClaim(id, remote) }

// Doc is the document p validated and summarised.
func (p *PreparedTD) Doc() map[string]any { return p.doc }

// ParseObject is parseObject with the default nesting limit: how a JSON
// description is read.
func ParseObject(raw []byte) (map[string]any, error) { return parseObject(raw, DefaultMaxDepth) }

// Prepare is prepareFrom for a writer whose verifications are not
// rate-limited.
func (r *Registry) Prepare(raw []byte) (*PreparedTD, error) { return r.prepareFrom(raw, "") }

// PrepareFrom is prepareFrom.
func (r *Registry) PrepareFrom(raw []byte, from string) (*PreparedTD, error) {
	return r.prepareFrom(raw, from)
}
