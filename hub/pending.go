package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
)

// Join-approval events on the hub's feed (lmos/v1/hub/events): state, not
// directory history, so not numbered or logged (as presence).
const (
	EventJoinPending  EventType = "join_pending"
	EventJoinApproved EventType = "join_approved"
	EventJoinDenied   EventType = "join_denied"
)

// ErrJoinPending is what Admit answers for a new Thing under join mode
// approve: the door parks the join (Admission.Park) instead of writing it.
var ErrJoinPending = errors.New("the join waits for an administrator's approval")

// PendingJoin is a new Thing's join parked for an administrator's decision.
type PendingJoin struct {
	ID    string `json:"id"`
	Title string `json:"title,omitempty"`
	Door  Source `json:"door"`
	// Addr is the requester's address; Source (SourceOf) bounds and names it.
	Addr string `json:"addr"`
	// Signer is the DID whose proof the parked description carries ("":
	// unsigned): approving binds the id to it (PROTOCOL §6).
	Signer   string          `json:"signer,omitempty"`
	Received time.Time       `json:"received"`
	TD       json.RawMessage `json:"td"`
}

// PendingStore keeps the pending list durably, so that it survives a
// restart. Approval deletes the entry in the commit that registers the
// Thing (Batch.DeletePending).
type PendingStore interface {
	PutPending(p PendingJoin) error
	DeletePending(id string) error
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
}

func (l *pendingList) init() {
	l.entries = map[string]*pendingEntry{}
	l.perSource = map[string]int{}
	if l.now == nil {
		l.now = time.Now
	}
}

// OpenPending loads the pending list from ps and keeps it there.
func (a *Admission) OpenPending(ps PendingStore) error {
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	l.store = ps
	return ps.LoadPending(func(p PendingJoin) error {
		l.add(&pendingEntry{PendingJoin: p})
		return nil
	})
}

func (l *pendingList) add(e *pendingEntry) {
	l.entries[e.ID] = e
	l.perSource[SourceOf(e.Addr)]++
	l.bytes += len(e.TD)
}

func (l *pendingList) remove(id string) *pendingEntry {
	e := l.entries[id]
	if e == nil {
		return nil
	}
	delete(l.entries, id)
	src := SourceOf(e.Addr)
	if l.perSource[src]--; l.perSource[src] <= 0 {
		delete(l.perSource, src)
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
		slices.SortFunc(st.Pending, func(x, y PendingJoin) int { return x.Received.Compare(y.Received) })
	}
	return st
}

// PendingCount is the number of parked joins.
func (a *Admission) PendingCount() int {
	a.pending.mu.Lock()
	defer a.pending.mu.Unlock()
	return len(a.pending.entries)
}

// PendingTD returns the parked description of id.
func (a *Admission) PendingTD(id string) (PendingJoin, error) {
	a.pending.mu.Lock()
	defer a.pending.mu.Unlock()
	e := a.pending.entries[id]
	if e == nil {
		return PendingJoin{}, Errorf(ENOTFOUND, "no join of %q is pending", id)
	}
	return e.PendingJoin, nil
}

// Park puts the join of a new Thing (admitted with ErrJoinPending) on the
// pending list: p is its prepared (validated, proof verified) description.
// A description id's key binding would refuse is refused now, as its
// write would be. The same source may send it again (replacing it and the
// waiter); another source may not.
func (a *Admission) Park(id string, p *PreparedTD, door Source, addr string, w *JoinWaiter) error {
	if err := a.reg.CheckBindingOf(id, p.signer); err != nil {
		return err
	}
	raw := p.raw
	l := &a.pending
	l.mu.Lock()
	defer l.mu.Unlock()
	src := SourceOf(addr)
	old := l.entries[id]
	if old != nil && (old.Door != door || SourceOf(old.Addr) != src) {
		return Errorf(ECONFLICT, "a join of %q from another source waits for approval", id)
	}
	n, perSrc, bytes := len(l.entries), l.perSource[src], l.bytes+len(raw)
	if old != nil {
		n, perSrc, bytes = n-1, perSrc-1, bytes-len(old.TD)
	}
	switch {
	case perSrc >= MaxPendingPerSource:
		return &Error{Code: EFULL, Limit: "join.pendingPerSource",
			Message: fmt.Sprintf("this address has %d joins waiting for approval, as many as one source may", MaxPendingPerSource)}
	case n >= MaxPending:
		return &Error{Code: EFULL, Limit: "join.pending",
			Message: fmt.Sprintf("%d joins wait for approval, as many as the hub keeps", MaxPending)}
	case bytes > MaxPendingBytes:
		return &Error{Code: EFULL, Limit: "join.pendingBytes",
			Message: fmt.Sprintf("the joins waiting for approval would hold more than %d bytes", MaxPendingBytes)}
	}
	pj := PendingJoin{ID: id, Title: titleOf(raw), Door: door, Addr: addr, Received: l.now().UTC(), TD: json.RawMessage(raw)}
	if p.signer != nil {
		pj.Signer = p.signer.DID
	}
	if l.store != nil {
		if err := l.store.PutPending(pj); err != nil {
			return &Error{Code: EINTERNAL, Message: "cannot store the pending join", Err: err}
		}
	}
	l.remove(id)
	l.add(&pendingEntry{PendingJoin: pj, waiter: w})
	if old == nil {
		// A description sent again is news to nobody (an mDNS Thing
		// re-announces itself for as long as it waits).
		a.announce(EventJoinPending, pj)
	}
	return nil
}

// Discovered applies the join mode to a new Thing the hub found on the
// LAN itself (mDNS): open admits it (nil, false), approve parks it with
// nobody waiting (parked true), closed refuses it. Nobody is rate-limited
// here: the mDNS registrar bounds its own fetches.
func (a *Admission) Discovered(id string, p *PreparedTD, addr string) (parked bool, err error) {
	switch mode := a.joinMode(); mode {
	case "closed":
		return false, Errorf(EFORBIDDEN, "joining is closed on this hub")
	case "approve":
		return true, a.Park(id, p, SourceMDNS, addr, nil)
	}
	return false, nil
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
	e := l.entries[id]
	if e == nil {
		return Errorf(ENOTFOUND, "no join of %q is pending", id)
	}
	p, err := a.reg.Prepare(e.TD)
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
	l := &a.pending
	if l.store != nil {
		if err := l.store.DeletePending(e.ID); err != nil {
			return &Error{Code: EINTERNAL, Message: "cannot delete the pending join", Err: err}
		}
	}
	l.remove(e.ID)
	if w := e.waiter; w != nil && (w.Live == nil || w.Live()) {
		w.Decided("", why)
	}
	a.announce(EventJoinDenied, e.PendingJoin)
	return nil
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
