package hub

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// loop is the only writer. Taking every queued op into one batch turns N
// concurrent writers into one fsync instead of N.
func (r *Registry) loop() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.resetExpiryTimer(timer)
		select {
		case <-r.quit:
			r.failQueued()
			return
		case o := <-r.ops:
			batch := []*op{o}
		drain:
			for len(batch) < r.opts.MaxBatch {
				select {
				case o := <-r.ops:
					batch = append(batch, o)
				default:
					break drain
				}
			}
			r.apply(batch)
		case <-timer.C:
			r.apply(r.dueExpiries())
		}
	}
}

func (r *Registry) failQueued() {
	for {
		select {
		case o := <-r.ops:
			o.done <- opResult{err: Errorf(EUNAVAILABLE, "the registry is shutting down")}
		default:
			return
		}
	}
}

func (r *Registry) resetExpiryTimer(t *time.Timer) {
	d := time.Hour
	if at, ok := r.expiry.next(); ok {
		// After a failed commit, purges wait a little rather than spin.
		d = max(at.Sub(r.opts.Now()), time.Until(r.purgeBackoff), 0)
	}
	t.Reset(d)
}

// dueExpiries pops every expiry that is due and turns it into an op.
func (r *Registry) dueExpiries() []*op {
	now := r.opts.Now()
	var ops []*op
	for len(ops) < r.opts.MaxBatch {
		at, ok := r.expiry.next()
		if !ok || now.Before(at) {
			break
		}
		it := r.expiry.pop()
		ops = append(ops, &op{kind: opExpire, id: it.id, expires: it.at, done: make(chan opResult, 1)})
	}
	return ops
}

// current returns the Thing id as the batch so far left it.
func (r *Registry) current(id string, now time.Time) *Thing {
	if t, ok := r.overlay[id]; ok {
		return t
	}
	r.mu.RLock()
	t := r.things[id]
	r.mu.RUnlock()
	if t != nil && t.expired(now) {
		return nil
	}
	return t
}

func (r *Registry) liveCount(now time.Time) int {
	n := r.Count()
	for id, t := range r.overlay {
		r.mu.RLock()
		old := r.things[id]
		r.mu.RUnlock()
		had := old != nil && !old.expired(now)
		switch {
		case t != nil && !had:
			n++
		case t == nil && had:
			n--
		}
	}
	return n
}

// apply commits one batch of ops. The order of its steps is the
// registry's consistency rule: stage each op over the committed state,
// keep only each id's final state, commit, then install and publish, or
// undo everything if the commit failed.
func (r *Registry) apply(batch []*op) {
	if len(batch) == 0 {
		return
	}
	now := r.opts.Now()
	r.beginBatch(len(batch))
	defer r.endBatch()
	var b Batch
	var live []Event // what subscribers get: b.Events plus unlogged ones
	// b and live stay outside s (the store takes b's address; live's
	// array grows by append), so s holds no pointer that leaks and a
	// small batch's maps stay on the stack, as results does.
	s := batchState{b: &b, live: &live, puts: make(map[string]ThingRecord, len(batch)), creds: map[string]string{}}
	results := make([]opResult, len(batch))
	firstSeq := r.seq
	for i, o := range batch {
		results[i] = r.stageOp(&s, o, now)
	}
	r.collect(&s)
	if s.changed() {
		if err := r.store.Commit(&b); err != nil {
			r.rollback(batch, results, firstSeq, err)
			r.reply(batch, results)
			return
		}
		r.install(now)
		r.notifyMemberships()
		r.publish(live)
	}
	r.reply(batch, results)
}

// batchState is what apply builds from one batch before it commits.
type batchState struct {
	b    *Batch
	live *[]Event
	puts map[string]ThingRecord
	// creds is each id's final credential change in this batch: the hash
	// a join issued, or "" for a deregistration's delete.
	creds map[string]string
}

// beginBatch gives the write loop empty overlays for a batch of n ops;
// reads within the batch see them over the committed state.
func (r *Registry) beginBatch(n int) {
	r.overlay = make(map[string]*Thing, n)
	r.batchDocs = make(map[string]map[string]any, n)
	r.batchRaws = make(map[string][]byte, n)
	r.undo = nil
	r.bindOverlay = make(map[string]*Binding)
	r.groupOverlay, r.statusOverlay, r.membershipChanges, r.credChanges = make(map[string]*Group), nil, nil, nil
}

// endBatch drops the overlays, committed or not.
func (r *Registry) endBatch() {
	r.overlay, r.batchDocs, r.batchRaws, r.undo, r.bindOverlay = nil, nil, nil, nil, nil
	r.groupOverlay, r.statusOverlay, r.membershipChanges, r.credChanges = nil, nil, nil, nil
}

// emit numbers and logs a directory event and queues every event for
// subscribers.
func (r *Registry) emit(s *batchState, ev Event, now time.Time) {
	ev.Time = now
	if ev.Type.IsDirectoryEvent() {
		r.seq++
		ev.Seq = r.seq
		logged := ev
		logged.TD = nil // a replay reads the stored document instead
		s.b.Events = append(s.b.Events, logged)
	}
	// Presence events are state, not history: they are not numbered or
	// logged, so a flapping agent cannot push directory events out of the
	// bounded log.
	*s.live = append(*s.live, ev)
}

// stageOp applies o to the overlays, records its events and what it
// stores, and returns its result.
func (r *Registry) stageOp(s *batchState, o *op, now time.Time) opResult {
	if (o.kind == opPut || o.kind == opCreate) && r.expiredUnpurged(o.id, now) {
		// Re-registered after expiry but before the purge: the old
		// registration ends visibly first.
		r.emit(s, Event{Type: EventDeleted, ID: o.id}, now)
		r.stageDelete(s, o.id, now)
	}
	if o.kind == opGroup {
		evs, err := r.applyGroup(o, now)
		for _, gev := range evs {
			r.emit(s, gev, now)
		}
		if err != nil && err != errUnchanged {
			return opResult{err: err}
		}
		return opResult{}
	}
	ev, rec, del, res := r.prepare(o, now)
	if res.err == nil || res.err == errUnchanged {
		if o.credHash != "" {
			s.creds[o.id] = o.credHash
		} else if o.dropCred {
			s.creds[o.id] = ""
		}
	}
	if res.err == errUnchanged {
		return opResult{} // nothing to store or announce; the caller succeeded
	}
	if res.err != nil {
		return res
	}
	if o.dropPending {
		s.b.DeletePending = append(s.b.DeletePending, o.id)
	}
	r.emit(s, ev, now)
	switch {
	case o.kind == opBind && rec.ID == "":
		// only the binding changed
	case del:
		r.stageDelete(s, o.id, now)
	default:
		r.stagePut(s, o, rec)
	}
	return res
}

// stageDelete stages id's deletion, which also ends its group memberships.
func (r *Registry) stageDelete(s *batchState, id string, now time.Time) {
	r.setOverlay(id, nil)
	delete(s.puts, id)
	for _, gev := range r.dropMemberships(id, now) {
		r.emit(s, gev, now)
	}
}

// stagePut stages o's new state: the overlay and documents that later ops
// and install read, and the record to store.
func (r *Registry) stagePut(s *batchState, o *op, rec ThingRecord) {
	r.setOverlay(o.id, &Thing{ID: o.id, Summary: o.sum, Meta: rec.Meta})
	if o.doc != nil {
		r.batchDocs[o.id] = o.doc
	}
	if o.raw != nil {
		r.batchRaws[o.id] = o.raw
	}
	if prev, ok := s.puts[o.id]; ok && rec.Raw == nil {
		// a presence change after a put in this batch
		rec.Raw, rec.Summary = prev.Raw, prev.Summary
	}
	s.puts[o.id] = rec
}

// collect fills the store batch from what the ops staged.
func (r *Registry) collect(s *batchState) {
	// Only each id's final state is stored: a delete after a put in the
	// same batch must win, and so must a put after a delete.
	for id, t := range r.overlay {
		if t == nil {
			s.b.Deletes = append(s.b.Deletes, id)
		} else {
			s.b.Puts = append(s.b.Puts, s.puts[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.creds)) {
		if h := s.creds[id]; h != "" {
			s.b.Credentials = append(s.b.Credentials, CredentialRecord{ThingID: id, Hash: h})
		} else {
			s.b.DeleteCredentials = append(s.b.DeleteCredentials, id)
		}
	}
	r.bindingChanges(s.b)
	r.groupChanges(s.b)
}

// changed reports whether the batch has anything to commit. Group and
// status list changes may come without an event (a rotation, renewed
// credentials).
func (s *batchState) changed() bool {
	b := s.b
	return len(*s.live) > 0 || len(b.Credentials)+len(b.DeleteCredentials)+len(b.Bindings)+len(b.DeleteBindings) > 0 ||
		b.StatusList != nil || len(b.Groups) > 0
}

// rollback undoes a batch the store refused, newest change first, so the
// memory matches the store again; every op that had succeeded fails, and
// the purges it held are tried again later.
func (r *Registry) rollback(batch []*op, results []opResult, firstSeq uint64, err error) {
	r.seq = firstSeq
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
	r.log.Error("cannot commit registry batch", "err", err, "ops", len(batch))
	r.purgeBackoff = time.Now().Add(time.Second)
	for i, o := range batch {
		if o.kind == opExpire {
			r.expiry.set(o.id, o.expires) // try the purge again later
		}
		if results[i].err == nil {
			results[i].err = &Error{Code: EINTERNAL, Message: "cannot store the change", Err: err}
		}
	}
}

// expiredUnpurged reports whether id is stored, expired and not yet purged
// (nor touched earlier in this batch).
func (r *Registry) expiredUnpurged(id string, now time.Time) bool {
	if _, inBatch := r.overlay[id]; inBatch {
		return false
	}
	r.mu.RLock()
	t := r.things[id]
	r.mu.RUnlock()
	return t != nil && t.expired(now)
}

func (r *Registry) reply(batch []*op, results []opResult) {
	for i, o := range batch {
		o.done <- results[i]
	}
}

// install makes the committed overlay visible to readers.
func (r *Registry) install(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rev = r.seq
	r.installBindings()
	r.installGroups()
	close(r.installed)
	r.installed = make(chan struct{})
	for id, t := range r.overlay {
		pos, found := slices.BinarySearch(r.ids, id)
		if old := r.things[id]; old != nil && !old.Meta.Expires.IsZero() {
			r.expiring--
		}
		if t != nil && !t.Meta.Expires.IsZero() {
			r.expiring++
		}
		if t == nil {
			delete(r.things, id)
			if found {
				r.ids = slices.Delete(r.ids, pos, pos+1)
			}
			r.expiry.remove(id)
			continue
		}
		r.things[id] = t
		if !found {
			r.ids = slices.Insert(r.ids, pos, id)
		}
		if t.Meta.Expires.IsZero() {
			r.expiry.remove(id)
		} else {
			r.expiry.set(id, t.Meta.Expires)
		}
	}
}

// prepare checks o against the current state and builds its record and
// event. del reports a deletion.
func (r *Registry) prepare(o *op, now time.Time) (ev Event, rec ThingRecord, del bool, res opResult) {
	old := r.current(o.id, now)
	if err := r.checkPrecondition(o, old); err != nil {
		return ev, rec, false, opResult{err: err}
	}
	if err := r.mirrorRule(o, old); err != nil {
		return ev, rec, false, opResult{err: err}
	}
	switch o.kind {
	case opDelete:
		if old == nil && o.dropCred {
			// Nothing to delete but the credential (a deregistration).
			return ev, rec, false, opResult{err: errUnchanged}
		}
		if old == nil {
			return ev, rec, false, opResult{err: notFound(o.id)}
		}
		return Event{Type: EventDeleted, ID: o.id}, rec, true, res
	case opDropCred:
		// Only the credential changes (Admission.ResetCredential).
		return ev, rec, false, opResult{err: errUnchanged}
	case opExpire:
		if err := r.checkExpire(o); err != nil {
			return ev, rec, false, opResult{err: err}
		}
		return Event{Type: EventDeleted, ID: o.id}, rec, true, res
	case opBind:
		bev, brec, err := r.prepareBind(o, old, now)
		if err != nil {
			return ev, rec, false, opResult{err: err}
		}
		return bev, brec, false, res
	case opPresence:
		pev, prec, err := r.preparePresence(o, old, now)
		if err != nil {
			return ev, rec, false, opResult{err: err}
		}
		return pev, prec, false, res
	case opPatch:
		if err := r.applyPatch(o, old); err != nil {
			return ev, rec, false, opResult{err: err}
		}
	}
	ev, rec, res = r.prepareWrite(o, old, now)
	return ev, rec, false, res
}

// checkExpire refuses an opExpire whose Thing was refreshed (or written
// in this batch) since the expiry was scheduled.
func (r *Registry) checkExpire(o *op) error {
	r.mu.RLock()
	stored := r.things[o.id]
	r.mu.RUnlock()
	if _, inBatch := r.overlay[o.id]; inBatch || stored == nil || !stored.Meta.Expires.Equal(o.expires) {
		return Errorf(ECONFLICT, "refreshed since")
	}
	return nil
}

// preparePresence builds the record and event of an opPresence: the
// Thing's metadata with the new presence, its document untouched.
func (r *Registry) preparePresence(o *op, old *Thing, now time.Time) (Event, ThingRecord, error) {
	if old == nil {
		return Event{}, ThingRecord{}, notFound(o.id)
	}
	p := old.Meta.Presence
	if p.Status == o.presence && p.Via == o.origin.Source {
		return Event{}, ThingRecord{}, errUnchanged
	}
	meta := old.Meta
	meta.Presence = Presence{Status: o.presence, Since: now, Via: o.origin.Source}
	o.sum = old.Summary
	return Event{Type: EventPresence, ID: o.id, Presence: &meta.Presence}, ThingRecord{ID: o.id, Meta: meta}, nil
}

// applyPatch merges an opPatch into the current document and turns o into
// a write of the result, under the Thing's original origin.
func (r *Registry) applyPatch(o *op, old *Thing) error {
	if old == nil {
		return notFound(o.id)
	}
	oldDoc, err := r.currentDoc(o.id)
	if err != nil {
		return err
	}
	merged, ok := jsonx.MergePatch(oldDoc, o.patch).(map[string]any)
	if !ok {
		return Errorf(EINVALID, "the patch must leave a JSON object")
	}
	merged["id"] = o.id
	if err := Validate(merged); err != nil {
		return err
	}
	raw, err := json.Marshal(merged)
	if err != nil {
		return fmt.Errorf("cannot encode patched document: %w", err)
	}
	// The merged document is a new description: its proof (kept from the
	// old one unless the patch replaced or removed it) must hold for it.
	// An admin's patch, so verified here without a budget.
	if o.signer, err = r.verifyDocWith(raw, merged, "", proof.CheckSignature); err != nil {
		return err
	}
	o.sum, o.sumEnc = r.summarize(merged)
	o.doc, o.raw, o.origin = merged, raw, old.Meta.Origin
	return nil
}

// prepareWrite builds the record and event of a write of a whole document
// (a put, a create or a patch already merged), after the quotas.
func (r *Registry) prepareWrite(o *op, old *Thing, now time.Time) (ev Event, rec ThingRecord, res opResult) {
	// A Thing changing hands between this hub and a remote directory
	// (hub/mirror.go) is bound as a new one: nothing of the previous
	// holder's state carries over.
	handover := old != nil && o.mirror != old.IsMirror()
	verified, nb, err := r.bindingOfWrite(o, old, handover, now)
	if err != nil {
		return ev, rec, opResult{err: err}
	}
	anon, err := r.checkQuotas(o, old, now)
	if err != nil {
		return ev, rec, opResult{err: err}
	}
	meta := ThingMeta{Created: now, Modified: now, Origin: o.origin,
		Presence: Presence{Status: PresenceUnknown, Since: now, Via: o.origin.Source},
		Size:     int64(len(o.raw)), Anon: anon, Verified: verified}
	// The exact host moves with every write that brings an address (none
	// when the door knows only the /64, as HTTP and WebSocket do); an
	// authenticated one keeps the last known, as it keeps Anon.
	if o.origin.Addr != "" {
		if h := HostOf(o.origin.Addr); !strings.Contains(h, "/") {
			meta.Host = h
		}
	} else if occ := r.occupant(o.id); occ != nil {
		meta.Host = occ.Meta.Host
	}
	// Admitted: an admin's write or an admission by the hub's decision
	// makes it; the Thing's own updates keep it, except a takeover by
	// another connection without the bound key's proof (anyone may
	// re-register an unsigned WebSocket Thing).
	meta.Admitted = o.admin || o.origin.Admitted
	if old != nil && !handover {
		// Presence and creation outlive a new document; a verification
		// does not: it was of the old document.
		meta.Created, meta.Presence = old.Meta.Created, old.Meta.Presence
		meta.Admitted = o.admin || old.Meta.Admitted && !(o.origin.Takeover && verified == "")
	}
	meta.TTL, meta.Expires = registrationOf(o.doc, now)
	if o.mirror {
		// As the remote reports them; a mirror picks no rights here.
		meta.Expires, meta.Admitted = o.mirrorExpires, false
		if meta.Presence.Status != o.presence || meta.Presence.Via != SourceRemote {
			meta.Presence = Presence{Status: o.presence, Since: now, Via: SourceRemote}
		}
	}
	if !meta.Expires.IsZero() && !meta.Expires.After(now) {
		return ev, rec, opResult{err: &Error{Code: EINVALID, Message: "the registration has already expired",
			Fields: []FieldError{{Field: "/registration/expires", Description: "is not in the future"}}}}
	}
	rec = ThingRecord{ID: o.id, Raw: o.raw, Meta: meta, Summary: o.sumEnc}
	bind := func() {
		if nb != nil { // accepted: the binding commits with the description
			r.bindOverlay[o.id] = nb
		}
	}
	if old == nil {
		bind()
		return Event{Type: EventCreated, ID: o.id, TD: o.raw}, rec, opResult{created: true}
	}
	oldDoc, err := r.currentDoc(o.id)
	if err != nil {
		return ev, rec, opResult{err: err}
	}
	patch := jsonx.CreateMergePatch(oldDoc, o.doc)
	patch["id"] = o.id
	pb, err := json.Marshal(patch)
	if err != nil {
		return ev, rec, opResult{err: fmt.Errorf("cannot encode change: %w", err)}
	}
	bind()
	return Event{Type: EventUpdated, ID: o.id, Patch: pb}, rec, res
}

// bindingOfWrite is checkBinding for a write of a whole document; a
// mirror (hub/mirror.go: judged already) neither binds its id nor moves
// its binding on, and a handover is judged as a new Thing's write.
func (r *Registry) bindingOfWrite(o *op, old *Thing, handover bool, now time.Time) (string, *Binding, error) {
	if o.mirror {
		if o.signer != nil {
			return o.signer.DID, nil, nil
		}
		return "", nil, nil
	}
	if handover {
		old = nil
	}
	return r.checkBinding(o, old, now)
}

// checkQuotas refuses a write of o that would pass a limit, given the
// current Thing old (nil when absent or expired), and returns the
// anonymous address the Thing will count against. It runs in the write
// loop, on counts that include the batch so far, so concurrent writes
// cannot overshoot a quota.
func (r *Registry) checkQuotas(o *op, old *Thing, now time.Time) (anon string, err error) {
	if err := r.checkSize(len(o.raw)); err != nil { // a patch can grow a document
		return "", err
	}
	// An expired, unpurged Thing still holds its space until replaced.
	occ := r.occupant(o.id)
	var oldSize int64
	if occ != nil {
		oldSize, anon = occ.Meta.Size, occ.Meta.Anon
	}
	if a := SourceOf(o.origin.Addr); a != "" {
		// An anonymous writer takes the Thing over; an authenticated
		// one leaves it counted where it was.
		if max := r.opts.MaxThingsPerSource; max > 0 && anon != a && r.bySource[a] >= max {
			return "", &Error{Code: EFULL, Limit: "registry.maxThingsPerSource",
				Message: fmt.Sprintf("this address has registered as many Things as one anonymous source may (registry.maxThingsPerSource = %d)", max)}
		}
		anon = a
	}
	size := int64(len(o.raw))
	if max := r.opts.MaxBytes; max > 0 && size > oldSize && r.totalBytes-oldSize+size > max {
		return "", &Error{Code: EFULL, Limit: "registry.maxBytes",
			Message: fmt.Sprintf("the registry's documents would take more than %d bytes (registry.maxBytes)", max)}
	}
	if old == nil && r.opts.MaxThings > 0 && r.liveCount(now) >= r.opts.MaxThings {
		return "", &Error{Code: EFULL, Limit: "registry.maxThings",
			Message: fmt.Sprintf("the registry is full (registry.maxThings = %d)", r.opts.MaxThings)}
	}
	return anon, nil
}

// occupant is what holds id's place in the store as the batch so far left
// it, expired or not.
func (r *Registry) occupant(id string) *Thing {
	if t, ok := r.overlay[id]; ok {
		return t
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.things[id]
}

// setOverlay records id's new state in the batch and moves the quota
// counts from its previous state to t.
func (r *Registry) setOverlay(id string, t *Thing) {
	r.count(r.occupant(id), -1)
	r.count(t, 1)
	r.overlay[id] = t
}

func (r *Registry) count(t *Thing, sign int) {
	if t == nil {
		return
	}
	size, anon := t.Meta.Size*int64(sign), t.Meta.Anon
	add := func(size int64, n int) {
		r.totalBytes += size
		if anon != "" {
			if r.bySource[anon] += n; r.bySource[anon] <= 0 {
				delete(r.bySource, anon)
			}
		}
	}
	add(size, sign)
	r.undo = append(r.undo, func() { add(-size, -sign) })
}

// currentDoc parses the current document of id: the one an earlier op of
// this batch wrote, else the stored one.
func (r *Registry) currentDoc(id string) (map[string]any, error) {
	if d := r.batchDocs[id]; d != nil {
		return d, nil
	}
	raw, err := r.store.ThingRaw(id)
	if err != nil {
		return nil, &Error{Code: EINTERNAL, Message: "cannot read the stored document", Err: err}
	}
	return r.Decoder().ParseDocument(raw)
}

// errUnchanged marks an op that succeeded without changing anything.
var errUnchanged = errors.New("unchanged")

type expiryItem struct {
	at time.Time
	id string
}

// expiryQueue orders expiries, earliest first, with at most one entry per
// Thing: refreshing a TTL moves the entry instead of adding one, so the
// queue never grows beyond the number of expiring Things.
type expiryQueue struct {
	items []expiryItem
	index map[string]int // id -> position in items
}

func (q *expiryQueue) Len() int           { return len(q.items) }
func (q *expiryQueue) Less(i, j int) bool { return q.items[i].at.Before(q.items[j].at) }
func (q *expiryQueue) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.index[q.items[i].id] = i
	q.index[q.items[j].id] = j
}
func (q *expiryQueue) Push(x any) {
	it := x.(expiryItem)
	q.index[it.id] = len(q.items)
	q.items = append(q.items, it)
}
func (q *expiryQueue) Pop() any {
	it := q.items[len(q.items)-1]
	q.items = q.items[:len(q.items)-1]
	delete(q.index, it.id)
	return it
}

// set schedules id to expire at at, replacing its earlier entry.
func (q *expiryQueue) set(id string, at time.Time) {
	if q.index == nil {
		q.index = make(map[string]int)
	}
	if i, ok := q.index[id]; ok {
		q.items[i].at = at
		heap.Fix(q, i)
		return
	}
	heap.Push(q, expiryItem{at: at, id: id})
}

func (q *expiryQueue) remove(id string) {
	if i, ok := q.index[id]; ok {
		heap.Remove(q, i)
	}
}

func (q *expiryQueue) next() (time.Time, bool) {
	if len(q.items) == 0 {
		return time.Time{}, false
	}
	return q.items[0].at, true
}

func (q *expiryQueue) pop() expiryItem { return heap.Pop(q).(expiryItem) }
