package hub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Limits of join approval (PROTOCOL §4.4, §10.0). Every parked join costs
// memory and a durable write, and anyone on the LAN may knock, so the
// pending list is bounded in count, bytes and per source.
const (
	MaxPending          = 256     // pending joins in all
	MaxPendingPerSource = 16      // pending joins of one source address
	MaxPendingBytes     = 8 << 20 // their descriptions together
	// MaxPermitSeconds bounds one permit-join window, as Zigbee's 254 s.
	MaxPermitSeconds = 254
	// DefaultPendingTTL is how long a parked join waits for a decision
	// (join.pendingTTL): long enough for an administrator to look once a
	// day, short enough that a list filled by strangers empties itself.
	DefaultPendingTTL = 24 * time.Hour
	// maxPendingWait is the longest the expiry timer sleeps: the wall
	// clock may jump (a Pi without a real-time clock gets its time late).
	maxPendingWait = 10 * time.Minute
)

// Join-approval events on the hub's feed (lmos/v1/hub/events): state, not
// directory history, so not numbered or logged (as presence).
const (
	EventJoinPending  EventType = "join_pending"
	EventJoinApproved EventType = "join_approved"
	EventJoinDenied   EventType = "join_denied"
)

// errJoinPending is what admit answers for a new Thing under join mode
// approve: Join parks the join (park) instead of writing it.
var errJoinPending = errors.New("the join waits for an administrator's approval")

// PendingJoin is a new Thing's join parked for an administrator's decision.
type PendingJoin struct {
	ID    string `json:"id"`
	Title string `json:"title,omitempty"`
	Door  Source `json:"door"`
	// Addr is the requester's address; Source (SourceOf) bounds and names it.
	Addr string `json:"addr"`
	// Signer is the DID whose proof the parked description carries ("":
	// unsigned): approving binds the id to it (PROTOCOL §6).
	Signer string `json:"signer,omitempty"`
	// Proven says the requester proved the id its own: the description
	// carries a proof by the key the id is bound to, or the Thing's MQTT
	// credential sent it. Other entries are anonymous, and only those
	// give way to newer joins when the list is full.
	Proven bool `json:"proven,omitempty"`
	// Received is when the join was parked; it expires join.pendingTTL
	// later, across restarts.
	Received time.Time       `json:"received"`
	TD       json.RawMessage `json:"td"`
}

// PendingStore keeps the pending list durably, so that it survives a
// restart. Approval deletes the entry in the commit that registers the
// Thing (Batch.DeletePending).
type PendingStore interface {
	// PutPending stores p, replacing an entry of its id, and deletes the
	// entries drop (evicted to make room for it) in the same commit.
	PutPending(p PendingJoin, drop ...string) error
	// DeletePending deletes the entries ids in one commit; an absent one
	// is no error.
	DeletePending(ids ...string) error
	LoadPending(fn func(PendingJoin) error) error
}

// JoinWaiter is an agent still waiting, on its connection, for the
// decision on its parked join.
type JoinWaiter struct {
	// Live reports whether the connection is still there to be told.
	Live func() bool
	// Credential issues the credential stored with the approved Thing
	// (MQTT); nil issues none (WebSocket).
	Credential func() (string, error)
	// Decided tells the agent: err nil when approved (password is the
	// issued credential, if any), else why not.
	Decided func(password string, err error)
}

// JoinEvent is the join member of a join event.
//
// It names no source address: the feeds (lmos/v1/hub/events, GET /events,
// the dashboard) are read by anyone with directory read, and an address
// that knocks is for administrators (GET /api/join).
type JoinEvent struct {
	Door  Source `json:"door"`
	Title string `json:"title,omitempty"`
}

type pendingEntry struct {
	PendingJoin
	waiter *JoinWaiter
	src    string // SourceOf(Addr), set by add
}

// pendingList is the Admission's pending joins and permit-join window.
type pendingList struct {
	mu          sync.Mutex
	store       PendingStore // nil: kept in memory only
	entries     map[string]*pendingEntry
	perSource   map[string]int
	bytes       int
	permitUntil time.Time
	now         func() time.Time
	// ttl is how long an entry waits for a decision (join.pendingTTL).
	ttl time.Duration
	// timer sweeps expired entries while there are entries, so that an
	// agent still waiting hears of its expiry; every use of the list
	// sweeps too, so the list never shows an expired entry.
	timer  *time.Timer
	closed bool
}

func (l *pendingList) init() {
	l.entries = map[string]*pendingEntry{}
	l.perSource = map[string]int{}
	if l.now == nil {
		l.now = time.Now
	}
	if l.ttl <= 0 {
		l.ttl = DefaultPendingTTL
	}
}

// SetPendingTTL sets how long a parked join waits for a decision before it
// expires (join.pendingTTL; 0 or less: DefaultPendingTTL). Entries already
// parked expire by the new value, counted from when they were parked.
func (a *Admission) SetPendingTTL(d time.Duration) {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	if d <= 0 {
		d = DefaultPendingTTL
	}
	l.ttl = d
}

// PendingTTL is how long a parked join waits for a decision.
func (a *Admission) PendingTTL() time.Duration {
	a.pending.mu.Lock()
	defer a.pending.mu.Unlock()
	return a.pending.ttl
}

// OpenPending loads the pending list from ps and keeps it there. Entries
// that expired while the hub was down are dropped from the store now.
func (a *Admission) OpenPending(ps PendingStore) error {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	l.store = ps
	err := ps.LoadPending(func(p PendingJoin) error {
		l.add(&pendingEntry{PendingJoin: p})
		return nil
	})
	if err != nil {
		return err
	}
	if err := a.sweepLocked(); err != nil {
		return err
	}
	a.scheduleLocked()
	return nil
}

// Close stops the expiry timer; the list stays usable (and is swept by its
// users) but no longer sweeps by itself.
func (a *Admission) Close() {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// expired reports whether e's time is up at now. An entry received more
// than the TTL in the future is expired too: the clock went back (or was
// wrong when it was parked), and its age cannot be told.
func (l *pendingList) expired(e *pendingEntry, now time.Time) bool {
	return !now.Before(e.Received.Add(l.ttl)) || e.Received.After(now.Add(l.ttl))
}

// sweepLocked drops the entries whose time is up, in one commit, and
// tells their waiters. A store failure keeps them for the next sweep.
func (a *Admission) sweepLocked() error {
	l := &a.pending
	now := l.now()
	var gone []*pendingEntry
	for _, e := range l.entries {
		if l.expired(e, now) {
			gone = append(gone, e)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	ttl := l.ttl
	return a.dropAllLocked(gone, func(e *pendingEntry) error {
		return &Error{Code: ETIMEOUT, Limit: "join.pendingTTL",
			Message: fmt.Sprintf("no administrator decided on the join of %q within %s: it expired; send the description again to ask again", e.ID, ttl)}
	})
}

// sweep is sweepLocked for a reader of the list: a store failure is
// logged, and the entries stay until the next sweep.
func (a *Admission) sweep() {
	if err := a.sweepLocked(); err != nil {
		a.reg.log.Warn("cannot drop expired pending joins", "err", err)
	}
}

// scheduleLocked arms the expiry timer for the earliest deadline, unless
// it is armed, the list is empty or closed.
func (a *Admission) scheduleLocked() {
	l := &a.pending
	if l.closed || l.timer != nil || len(l.entries) == 0 {
		return
	}
	var first time.Time
	for _, e := range l.entries {
		if first.IsZero() || e.Received.Before(first) {
			first = e.Received
		}
	}
	// At least a second: an entry the store failed to drop is retried,
	// not spun on.
	d := min(max(first.Add(l.ttl).Sub(l.now()), time.Second), maxPendingWait)
	l.timer = time.AfterFunc(d, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.timer = nil
		if l.closed {
			return
		}
		a.sweep()
		a.scheduleLocked()
	})
}

func (l *pendingList) add(e *pendingEntry) {
	l.entries[e.ID] = e
	e.src = SourceOf(e.Addr)
	l.perSource[e.src]++
	l.bytes += len(e.TD)
}

func (l *pendingList) remove(id string) *pendingEntry {
	e := l.entries[id]
	if e == nil {
		return nil
	}
	delete(l.entries, id)
	if l.perSource[e.src]--; l.perSource[e.src] <= 0 {
		delete(l.perSource, e.src)
	}
	l.bytes -= len(e.TD)
	return e
}

// joinMode is the mode in force now: a permit-join window admits new
// Things as open does, whatever the configured mode.
func (a *Admission) joinMode() string {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.now().Before(l.permitUntil) {
		return "open"
	}
	return a.mode
}

// JoinOpen reports whether new Things may join now: join.mode open or a
// permit-join window.
func (a *Admission) JoinOpen() bool { return a.joinMode() == "open" }

// Permit opens the permit-join window for seconds (0 closes it) and
// returns when it closes.
func (a *Admission) Permit(seconds int) (time.Time, error) {
	if seconds < 0 || seconds > MaxPermitSeconds {
		return time.Time{}, &Error{Code: EINVALID, Message: fmt.Sprintf("seconds must be between 0 and %d", MaxPermitSeconds),
			Fields: []FieldError{{Field: "/seconds", Description: fmt.Sprintf("must be an integer from 0 to %d", MaxPermitSeconds)}}}
	}
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	l.permitUntil = time.Time{}
	if seconds > 0 {
		l.permitUntil = l.now().Add(time.Duration(seconds) * time.Second)
	}
	return l.permitUntil, nil
}

// JoinState is the join mode, the permit-join window and the pending list.
type JoinState struct {
	Mode string `json:"mode"`
	// Effective is the mode in force: open while a window is open.
	Effective   string        `json:"effective"`
	PermitUntil *time.Time    `json:"permitUntil,omitempty"`
	Remaining   int           `json:"remaining"` // whole seconds left of the window
	Pending     []PendingJoin `json:"pending"`
}

// State returns the join state; the pending list (oldest first) only when
// withPending, without the descriptions.
func (a *Admission) State(withPending bool) JoinState {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	if withPending {
		a.sweep()
	}
	now := l.now()
	st := JoinState{Mode: a.mode, Effective: a.mode, Pending: []PendingJoin{}}
	if now.Before(l.permitUntil) {
		u := l.permitUntil.UTC()
		st.PermitUntil, st.Effective = &u, "open"
		st.Remaining = int((l.permitUntil.Sub(now) + time.Second - 1) / time.Second)
	}
	if withPending {
		for _, e := range l.entries {
			st.Pending = append(st.Pending, e.PendingJoin)
		}
		slices.SortFunc(st.Pending, func(x, y PendingJoin) int {
			return cmp.Or(x.Received.Compare(y.Received), cmp.Compare(x.ID, y.ID))
		})
	}
	return st
}

// PendingCount is the number of parked joins.
func (a *Admission) PendingCount() int {
	a.pending.mu.Lock()
	defer a.pending.mu.Unlock()
	a.sweep()
	return len(a.pending.entries)
}

// PendingTD returns the parked description of id.
func (a *Admission) PendingTD(id string) (PendingJoin, error) {
	a.pending.mu.Lock()
	defer a.pending.mu.Unlock()
	a.sweep()
	e := a.pending.entries[id]
	if e == nil {
		return PendingJoin{}, Errorf(ENOTFOUND, "no join of %q is pending", id)
	}
	return e.PendingJoin, nil
}

// park puts the join of a new Thing (admitted with errJoinPending) on the
// pending list: p is its prepared (validated, proof verified) description.
// A description id's key binding would refuse is refused now, as its
// write would be. The same source may send it again (replacing it and the
// waiter); another source may not.
//
// When the list is full (in count or bytes) the join takes the place of
// anonymous entries (evictLocked) rather than being refused; each evicted
// entry's waiter is told 507.
func (a *Admission) park(id string, p *PreparedTD, door Source, addr string, w *JoinWaiter) error {
	if err := a.reg.CheckBindingOf(id, p.signer); err != nil {
		return err
	}
	proven, err := a.proven(id, p, door)
	if err != nil {
		return err
	}
	raw := p.raw
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	// Expired entries make room first.
	if err := a.sweepLocked(); err != nil {
		return &Error{Code: EINTERNAL, Message: "cannot drop expired pending joins", Err: err}
	}
	src := SourceOf(addr)
	old := l.entries[id]
	if old != nil && (old.Door != door || old.src != src) {
		return Errorf(ECONFLICT, "a join of %q from another source waits for approval", id)
	}
	n, perSrc, bytes := len(l.entries), l.perSource[src], l.bytes+len(raw)
	if old != nil {
		n, perSrc, bytes = n-1, perSrc-1, bytes-len(old.TD)
	}
	if perSrc >= MaxPendingPerSource {
		return &Error{Code: EFULL, Limit: "join.pendingPerSource",
			Message: fmt.Sprintf("this address has %d joins waiting for approval, as many as one source may", MaxPendingPerSource)}
	}
	evict := l.evictLocked(id, src, perSrc, n, bytes, proven)
	switch {
	case evict == nil && n >= MaxPending:
		return &Error{Code: EFULL, Limit: "join.pending",
			Message: fmt.Sprintf("%d joins wait for approval, as many as the hub keeps, and none of them may give way to this one", MaxPending)}
	case evict == nil && bytes > MaxPendingBytes:
		return &Error{Code: EFULL, Limit: "join.pendingBytes",
			Message: fmt.Sprintf("the joins waiting for approval would hold more than %d bytes, and none of them may give way to this one", MaxPendingBytes)}
	}
	pj := PendingJoin{ID: id, Title: titleOf(raw), Door: door, Addr: addr, Proven: proven, Received: l.now().UTC(), TD: json.RawMessage(raw)}
	if p.signer != nil {
		pj.Signer = p.signer.DID
	}
	drop := make([]string, len(evict))
	for i, e := range evict {
		drop[i] = e.ID
	}
	if l.store != nil {
		if err := l.store.PutPending(pj, drop...); err != nil {
			return &Error{Code: EINTERNAL, Message: "cannot store the pending join", Err: err}
		}
	}
	for _, e := range evict {
		a.forgetLocked(e, &Error{Code: EFULL, Limit: "join.pending",
			Message: fmt.Sprintf("the pending list was full and the join of %q gave way to a newer one from an address with fewer joins waiting; send the description again to ask again", e.ID)})
	}
	if len(evict) > 0 {
		a.reg.log.Debug("pending joins evicted for a new one", "id", id, "source", src, "evicted", drop)
	}
	l.remove(id)
	l.add(&pendingEntry{PendingJoin: pj, waiter: w})
	if old == nil {
		// A description sent again is news to nobody (an mDNS Thing
		// re-announces itself for as long as it waits).
		a.announce(EventJoinPending, pj)
	}
	a.scheduleLocked()
	return nil
}

// proven reports whether the join of id proves the id its requester's: a
// proof by the key id is bound to (checked by CheckBindingOf already), or,
// over MQTT, the Thing's credential (admit parks a join of an id holding a
// credential only for the credential's holder).
func (a *Admission) proven(id string, p *PreparedTD, door Source) (bool, error) {
	if p.signer != nil {
		if b, err := a.reg.Binding(id); err == nil && b.DID == p.signer.DID {
			return true, nil
		}
	}
	if door != SourceMQTT {
		return false, nil
	}
	return a.HasCredential(id)
}

// evictLocked picks the entries a join of id from src (which holds mine
// entries besides id's) evicts so that it fits in the list, whose count
// and bytes with it would be n and bytes; nil when it fits, or when
// nothing may give way (the join is then refused).
//
// Only anonymous entries give way, and only to a join from a source that
// holds fewer entries than theirs: each time, the oldest anonymous entry
// of the source holding the most entries. A flood from a few addresses
// (each capped at MaxPendingPerSource) thus evicts its own entries before
// a device's single one, and an evicted device asking again cannot evict
// in turn a source holding as few as it does. Only a flood from as many
// addresses as the list has places reaches single entries, and then the
// oldest goes first. A proven join (its id's owner coming back) takes the
// place of the anonymous entry chosen that way whatever its source holds.
func (l *pendingList) evictLocked(id, src string, mine, n, bytes int, proven bool) []*pendingEntry {
	if n < MaxPending && bytes <= MaxPendingBytes {
		return nil
	}
	count := maps.Clone(l.perSource)
	if l.entries[id] != nil {
		count[src]-- // id's own entry is replaced, not evicted
	}
	var out []*pendingEntry
	taken := map[string]bool{}
	for n >= MaxPending || bytes > MaxPendingBytes {
		var v *pendingEntry
		var vc int
		for _, e := range l.entries {
			s := e.src
			if e.Proven || e.ID == id || taken[e.ID] || !proven && (s == src || count[s] <= mine) {
				continue
			}
			c := count[s]
			if v == nil || c > vc || c == vc && (e.Received.Before(v.Received) || e.Received.Equal(v.Received) && e.ID < v.ID) {
				v, vc = e, c
			}
		}
		if v == nil {
			return nil
		}
		taken[v.ID] = true
		count[v.src]--
		if v.src == src {
			mine--
		}
		out = append(out, v)
		n, bytes = n-1, bytes-len(v.TD)
	}
	return out
}

// Unwait forgets w, the waiter of id's pending join, when its connection
// ends; the join stays pending.
func (a *Admission) Unwait(id string, w *JoinWaiter) {
	a.pending.mu.Lock()
	defer a.pending.mu.Unlock()
	if e := a.pending.entries[id]; e != nil && e.waiter == w {
		e.waiter = nil
	}
}

// Approve registers the parked Thing id: its stored description, the
// credential issued to a waiting MQTT agent and the removal of the entry
// in one durable commit; the waiting agent is then told. A Thing
// registered under that id meanwhile (by an admin, say) wins: the entry
// is dropped and the answer is 409.
func (a *Admission) Approve(ctx context.Context, id string) error {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	a.sweep() // an expired join is no longer there to approve
	e := l.entries[id]
	if e == nil {
		return Errorf(ENOTFOUND, "no join of %q is pending", id)
	}
	p, err := a.reg.prepareFrom(e.TD, "")
	if err != nil {
		return err
	}
	w := e.waiter
	if w != nil && w.Live != nil && !w.Live() {
		w = nil
	}
	var password, hash string
	if w != nil && w.Credential != nil {
		if password, err = w.Credential(); err != nil {
			return &Error{Code: EINTERNAL, Message: "cannot create the Thing's credentials", Err: err}
		}
		hash = HashToken(password)
	}
	origin := Origin{Source: e.Door, Addr: e.Addr, Admitted: true} // an admin's decision
	res := a.reg.submit(ctx, &op{kind: opPut, id: id, raw: p.raw, doc: p.doc, sum: p.sum, sumEnc: p.enc, origin: origin,
		cond: Precondition{IfNoneMatch: true, IfNoneMatchAny: true}, credHash: hash, dropPending: true,
		// The parked proof binds the id (or must match its binding) as
		// an open join's would (PROTOCOL §6).
		signer: p.signer})
	if ErrorCode(res.err) == EPRECONDITION {
		err := Errorf(ECONFLICT, "the Thing %q was registered by other means while its join waited; the pending join is dropped", id)
		a.dropLocked(e, err)
		return err
	}
	if res.err != nil {
		return res.err
	}
	l.remove(id)
	if w != nil {
		w.Decided(password, nil)
	}
	a.announce(EventJoinApproved, e.PendingJoin)
	return nil
}

// Deny drops the parked join of id; a waiting agent is refused (403).
func (a *Admission) Deny(id string) error {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	a.sweep()
	e := l.entries[id]
	if e == nil {
		return Errorf(ENOTFOUND, "no join of %q is pending", id)
	}
	return a.dropLocked(e, Errorf(EFORBIDDEN, "an administrator denied the join of %q", id))
}

// Superseded settles the pending join of id, if any, once a Thing was
// registered under that id by other means (an admin's write, or its bound
// key's proof over HTTP): the entry is dropped and a waiting agent is told
// 409, what approving it would now answer.
func (a *Admission) Superseded(id string) error {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[id]
	if e == nil {
		return nil
	}
	return a.dropLocked(e, Errorf(ECONFLICT, "the Thing %q was registered by other means while its join waited; the pending join is dropped", id))
}

// dropLocked removes e from the list and the store and tells its waiter why.
func (a *Admission) dropLocked(e *pendingEntry, why error) error {
	return a.dropAllLocked([]*pendingEntry{e}, func(*pendingEntry) error { return why })
}

// dropAllLocked removes es from the store in one commit, then from the
// list, oldest first, telling each waiter why.
func (a *Admission) dropAllLocked(es []*pendingEntry, why func(*pendingEntry) error) error {
	l := &a.pending
	slices.SortFunc(es, func(x, y *pendingEntry) int {
		return cmp.Or(x.Received.Compare(y.Received), cmp.Compare(x.ID, y.ID))
	})
	if l.store != nil {
		ids := make([]string, len(es))
		for i, e := range es {
			ids[i] = e.ID
		}
		if err := l.store.DeletePending(ids...); err != nil {
			return &Error{Code: EINTERNAL, Message: "cannot delete the pending join", Err: err}
		}
	}
	for _, e := range es {
		a.forgetLocked(e, why(e))
	}
	return nil
}

// forgetLocked removes e from the list (its store entry is gone already),
// tells a waiter still there why, and announces it (join_denied: the entry
// left the list without an approval).
func (a *Admission) forgetLocked(e *pendingEntry, why error) {
	a.pending.remove(e.ID)
	if w := e.waiter; w != nil && (w.Live == nil || w.Live()) {
		w.Decided("", why)
	}
	a.announce(EventJoinDenied, e.PendingJoin)
}

// PendingFilter selects pending joins for a denial in bulk (DenyAll):
// every one, or those from Source and/or received at least OlderThan ago
// (both given: both hold).
type PendingFilter struct {
	All bool
	// Source is an address or an IPv6 /64 prefix, as GET /api/join names
	// the source (SourceOf): an address selects its source's entries.
	Source    string
	OlderThan time.Duration
}

// Check says what is wrong with f (nil: nothing), as field errors of its
// JSON body.
func (f PendingFilter) Check() error {
	bad := func(field, msg string) error {
		return &Error{Code: EINVALID, Message: "the filter must be {\"all\": true}, or name a \"source\" and/or \"olderThan\"",
			Fields: []FieldError{{Field: field, Description: msg}}}
	}
	switch {
	case f.All && (f.Source != "" || f.OlderThan != 0):
		return bad("/all", "selects every entry: give it alone")
	case f.OlderThan < 0:
		return bad("/olderThan", "must be a duration of 0 or more, such as \"1h\"")
	case f.Source != "":
		if _, err := netip.ParseAddr(f.Source); err == nil {
			return nil
		}
		if sourcePrefix(f.Source) != "" {
			return nil
		}
		return bad("/source", "must be an IP address or an IPv6 /64 prefix as GET /api/join shows it")
	case !f.All && f.OlderThan == 0:
		return Errorf(EINVALID, "the filter names no entries: give {\"all\": true}, a \"source\" or \"olderThan\"")
	}
	return nil
}

// sourcePrefix is the source p names when it is an IPv6 /64 prefix (a
// source as SourceOf names it), else "": any other prefix names no source
// and would select nothing, silently.
func sourcePrefix(p string) string {
	pf, err := netip.ParsePrefix(p)
	if err != nil || !pf.Addr().Is6() || pf.Addr().Is4In6() || pf.Bits() != 64 {
		return ""
	}
	return pf.Masked().String()
}

// DenyAll drops the parked joins f selects in one commit and refuses their
// waiting agents 403, as Deny does one by one; it returns their ids,
// oldest first (none selected: an empty list, no error).
func (a *Admission) DenyAll(f PendingFilter) ([]string, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	src := sourcePrefix(f.Source)
	if src == "" && f.Source != "" {
		src = SourceOf(f.Source)
	}
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	a.sweep()
	now := l.now()
	var es []*pendingEntry
	for _, e := range l.entries {
		if f.All || (src == "" || e.src == src) && now.Sub(e.Received) >= f.OlderThan {
			es = append(es, e)
		}
	}
	if err := a.dropAllLocked(es, func(e *pendingEntry) error {
		return Errorf(EFORBIDDEN, "an administrator denied the join of %q", e.ID)
	}); err != nil {
		return nil, err
	}
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids, nil
}

// announce sends a join event to the hub's feed.
func (a *Admission) announce(t EventType, p PendingJoin) {
	a.reg.Announce(Event{Type: t, ID: p.ID, Join: &JoinEvent{Door: p.Door, Title: p.Title}})
}

// titleOf is the title of a validated description, for the pending list.
func titleOf(raw []byte) string {
	var d struct {
		Title string `json:"title"`
	}
	_ = json.Unmarshal(raw, &d) // validated already; a missing title is ""
	return d.Title
}
