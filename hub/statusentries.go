package hub

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// Status list entries (PROTOCOL §7.1, issue 24): every membership
// credential takes an entry of the hub's one status list; revoking the
// membership sets the entry's bit. An entry comes back once every
// credential it served has expired, so that clearing its bit can never
// make a revoked credential valid again:
//
//   - revoking an entry raises PendingUntil to the latest validUntil any
//     credential of that entry can have (the stored one's, or now plus
//     the validity of a renewal, which is signed only while a member);
//   - the entries revoked so far are sealed (Sealed, SealedUntil =
//     PendingUntil) when nothing is sealed;
//   - once SealedUntil + StatusReuseGrace has passed, the sealed entries'
//     bits are cleared and they are free again, and the entries revoked
//     since are sealed in turn.
//
// So an entry is reused between one and about two credential validities
// (groups.credentialValidity) after its revocation, with state of a fixed
// size (two bitstrings and two times) whatever the number of revocations.
// Issuance is also paced per manager and per address (IssueRate), and
// the last entries are kept for admins (statusReserve).

// StatusReuseGrace is added to the last validUntil of a sealed entry's
// credentials before the entry is reused: it covers a renewal signed in
// the instant its membership was removed and verifiers whose clocks lag
// the hub's (the agent library allows 5 minutes).
const StatusReuseGrace = time.Hour

// legacyCredentialValidity bounds the credentials of entries revoked by a
// hub that kept no PendingUntil (its groups.credentialValidity default).
const legacyCredentialValidity = 365 * 24 * time.Hour

// MembershipLimits pace and bound the issuance of membership credentials.
type MembershipLimits struct {
	// StatusEntries is how many entries of the status list the hub hands
	// out (0: MaxStatusListEntries; fewer makes tests of exhaustion fast).
	StatusEntries int
	// IssueRate is how many credentials one manager (token) or one
	// source address (self-joins) may have issued per hour, IssueBurst at
	// once (groups.issueRate, groups.issueBurst; 0: not paced). Admin
	// tokens are not paced.
	IssueRate  float64
	IssueBurst int
}

// DefaultIssueRate and DefaultIssueBurst pace membership credentials per
// manager and per source address: a full group (1,024 members) at once,
// then 128 an hour.
const (
	DefaultIssueRate  = 128
	DefaultIssueBurst = 1024
)

// Issuance says who a group write issues credentials for, for pacing:
// the doors put it in the write's context (WithIssuance).
type Issuance struct {
	// Key names the manager ("token:<id>") or source ("addr:<address>").
	Key string
	// Admin writes are neither paced nor kept out of the reserve.
	Admin bool
	// Anonymous writes (self-joins) leave a larger reserve.
	Anonymous bool
}

type issuanceKey struct{}

// WithIssuance returns ctx carrying who a group write is made for.
func WithIssuance(ctx context.Context, is Issuance) context.Context {
	return context.WithValue(ctx, issuanceKey{}, is)
}

// issuanceOf is the Issuance in ctx; a write without one (the hub's own,
// tests) is treated as an admin's.
func issuanceOf(ctx context.Context) Issuance {
	if ctx == nil {
		return Issuance{Admin: true}
	}
	if is, ok := ctx.Value(issuanceKey{}).(Issuance); ok {
		return is
	}
	return Issuance{Admin: true}
}

func bitSet(b []byte, i int) bool { return b[i/8]&(0x80>>(i%8)) != 0 }
func setBit(b []byte, i int)      { b[i/8] |= 0x80 >> (i % 8) }
func clearBit(b []byte, i int)    { b[i/8] &^= 0x80 >> (i % 8) }

// clone returns a copy of s that may be changed without changing s.
// Sealed is shared: it is only ever replaced, never changed in place.
func (s *StatusList) clone() StatusList {
	c := *s
	c.Bits = slices.Clone(s.Bits)
	c.inUse = slices.Clone(s.inUse)
	return c
}

// statusCapacity is how many entries the hub hands out.
func (r *Registry) statusCapacity() int {
	if n := r.opts.Memberships.StatusEntries; n > 0 && n < MaxStatusListEntries {
		return n
	}
	return MaxStatusListEntries
}

// freeEntries counts the entries below capacity neither revoked nor held.
func (s *StatusList) freeEntries(capacity int) int {
	used := 0
	full := capacity / 8
	for i := 0; i < full; i++ {
		used += bits.OnesCount8(s.Bits[i] | s.inUse[i])
	}
	for i := full * 8; i < capacity; i++ {
		if bitSet(s.Bits, i) || bitSet(s.inUse, i) {
			used++
		}
	}
	return capacity - used
}

// takeEntry returns a free entry below capacity, the first from Next on
// (round robin, so a freed entry is the last to be reused).
func (s *StatusList) takeEntry(capacity int) (int, bool) {
	start := s.Next
	if start < 0 || start >= capacity {
		start = 0
	}
	for k := 0; k < capacity; k++ {
		i := (start + k) % capacity
		if i%8 == 0 && i+8 <= capacity && s.Bits[i/8]|s.inUse[i/8] == 0xff {
			k += 7
			continue
		}
		if !bitSet(s.Bits, i) && !bitSet(s.inUse, i) {
			return i, true
		}
	}
	return 0, false
}

// reclaim frees the sealed entries once their credentials have all
// expired, and seals the revoked ones when nothing is sealed. It reports
// a change.
func (s *StatusList) reclaim(now time.Time) bool {
	changed := false
	for {
		if s.Sealed != nil && !now.Before(s.SealedUntil.Add(StatusReuseGrace)) {
			for i := range s.Bits {
				s.Bits[i] &^= s.Sealed[i]
			}
			s.Sealed, s.SealedUntil = nil, time.Time{}
			s.Modified = now
			changed = true
		}
		if s.Sealed != nil || !slices.ContainsFunc(s.Bits, func(b byte) bool { return b != 0 }) {
			return changed
		}
		// Seal what is revoked now; if its bound has passed too (a hub
		// idle for long), free it in the same pass.
		s.Sealed, s.SealedUntil, s.PendingUntil = slices.Clone(s.Bits), s.PendingUntil, time.Time{}
		changed = true
	}
}

// revokedUntil is the latest validUntil a credential of m's entry can
// have when m is revoked at now: its stored credential's, or a renewal's
// signed now.
func (r *Registry) revokedUntil(m Member, now time.Time) time.Time {
	validity := DefaultCredentialValidity
	if ci := r.credentialIssuer(); ci != nil {
		validity = ci.Validity()
	}
	until := now.Add(validity)
	if m.CredentialUntil.After(until) {
		until = m.CredentialUntil
	}
	return until
}

// loadStatus completes the stored status list at start: the entries held
// by members (not stored: the groups say it), and a bound for entries an
// older hub revoked without one.
func (r *Registry) loadStatus(st StatusList) StatusList {
	n := MaxStatusListEntries / 8
	if len(st.Bits) != n {
		st.Bits = make([]byte, n)
	}
	if st.Sealed != nil && len(st.Sealed) != n {
		st.Sealed = slices.Clone(st.Bits) // unreadable: seal everything revoked
		st.SealedUntil = st.Modified.Add(legacyCredentialValidity)
	}
	st.inUse = make([]byte, n)
	for _, g := range r.groups {
		for _, m := range g.Members {
			if m.StatusIndex >= 0 && m.StatusIndex < MaxStatusListEntries {
				setBit(st.inUse, m.StatusIndex)
			}
		}
	}
	if st.Sealed == nil && st.PendingUntil.IsZero() && slices.ContainsFunc(st.Bits, func(b byte) bool { return b != 0 }) {
		// Revoked by a hub that kept no bound: its credentials may have
		// been valid for its default validity, or the current one.
		v := legacyCredentialValidity
		if ci := r.credentialIssuer(); ci != nil && ci.Validity() > v {
			v = ci.Validity()
		}
		st.PendingUntil = st.Modified.Add(v)
	}
	return st
}

// statusReserve is how many entries a write must leave free: self-joins
// leave a quarter, other managers an eighth, admins none, so that no
// one but an admin can take the last entries.
func (r *Registry) statusReserve(is Issuance) int {
	switch {
	case is.Admin:
		return 0
	case is.Anonymous:
		return r.statusCapacity() / 4
	}
	return r.statusCapacity() / 8
}

// checkIssue refuses a write that would issue n credentials: too few
// entries left for it (EFULL, groups.statusList), or its manager or
// source issued too many lately (ERATELIMIT, groups.issueRate). Nothing
// is counted unless both pass.
func (r *Registry) checkIssue(is Issuance, n int, now time.Time) error {
	if n <= 0 {
		return nil
	}
	st := r.batchStatus()
	free, reserve := st.freeEntries(r.statusCapacity()), r.statusReserve(is)
	if free-n < reserve {
		msg := fmt.Sprintf("the hub's status list has %d free entries of %d", free, r.statusCapacity())
		switch {
		case is.Anonymous:
			msg += fmt.Sprintf(", and %d are kept for operators", reserve)
		case reserve > 0:
			msg += fmt.Sprintf(", and %d are kept for admins", reserve)
		}
		return &Error{Code: EFULL, Limit: "groups.statusList",
			Message: msg + "; an entry is free again once every credential it served has expired"}
	}
	if is.Admin || r.opts.Memberships.IssueRate <= 0 {
		return nil
	}
	if wait, ok := r.issuePacer.take(is.Key, n, now, r.opts.Memberships.IssueRate, r.opts.Memberships.IssueBurst); !ok {
		return &Error{Code: ERATELIMIT, Limit: "groups.issueRate",
			Message: fmt.Sprintf("too many membership credentials issued for this %s lately; retry in %s", issuerNoun(is), wait.Round(time.Second))}
	}
	return nil
}

func issuerNoun(is Issuance) string {
	if is.Anonymous {
		return "address"
	}
	return "token"
}

// maxPacedKeys bounds the pacer's memory; buckets that refilled carry no
// state and go first.
const maxPacedKeys = 4096

// issuePacer is a token bucket per manager or source that a write may
// overdraw: a write is refused while its bucket is below one credential,
// and takes what it issues (a group of 1,024 members at once within the
// burst). Only the write loop uses it; mu keeps it safe all the same.
type issuePacer struct {
	mu sync.Mutex
	m  map[string]*paceBucket
}

type paceBucket struct {
	tokens float64
	at     time.Time
}

// take charges n credentials to key at now, or says how long to wait.
func (p *issuePacer) take(key string, n int, now time.Time, perHour float64, burst int) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if burst < 1 {
		burst = 1
	}
	if p.m == nil {
		p.m = make(map[string]*paceBucket)
	}
	b := p.m[key]
	if b == nil {
		if len(p.m) >= maxPacedKeys {
			p.prune(now, perHour, burst)
		}
		b = &paceBucket{tokens: float64(burst), at: now}
		p.m[key] = b
	}
	if dt := now.Sub(b.at); dt > 0 {
		b.tokens = min(float64(burst), b.tokens+dt.Hours()*perHour)
	}
	b.at = now
	if b.tokens < min(float64(n), 1) {
		return time.Duration((1 - b.tokens) / perHour * float64(time.Hour)), false
	}
	b.tokens -= float64(n)
	return 0, true
}

// prune drops the buckets that refilled; if all are in use (a flood of
// keys), the fullest half goes.
func (p *issuePacer) prune(now time.Time, perHour float64, burst int) {
	for k, b := range p.m {
		if b.tokens+now.Sub(b.at).Hours()*perHour >= float64(burst) {
			delete(p.m, k)
		}
	}
	if len(p.m) < maxPacedKeys {
		return
	}
	keys := make([]string, 0, len(p.m))
	for k := range p.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		ta, tb := p.m[a].tokens, p.m[b].tokens
		switch {
		case ta > tb:
			return -1
		case ta < tb:
			return 1
		}
		return 0
	})
	for _, k := range keys[:len(keys)/2] {
		delete(p.m, k)
	}
}
