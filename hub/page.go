package hub

import (
	"errors"
	"strconv"
	"time"
)

// Page is one consistent read of the collection: the Things of one
// installed revision, filtered by expiry at one instant, with the tag
// that names exactly that state.
type Page struct {
	Things []*Thing
	// Total is the number of Things visible in this state.
	Total int
	// Rev is the sequence of the last committed directory change the
	// in-memory index reflects (the store's last sequence when it was
	// installed).
	Rev uint64
	// Hidden counts the Things of Rev that were already expired at Now
	// but not yet purged.
	Hidden int
	// Now is the instant expiry was judged at; enrichment uses it too.
	Now time.Time
	// Installed is closed when the index moves past this page's state.
	Installed <-chan struct{}
}

// Tag names the collection state of the page: the revision, and when some
// Things of that revision have expired unpurged, their number. For one
// revision the index is fixed, and the Things hidden at any instant are
// the k earliest to expire (Things with equal expiry go together), so
// (Rev, Hidden) determines the visible set: equal tags, equal
// collections. A purge commits a new revision, so tags never repeat for
// a different state.
func (p *Page) Tag() string {
	s := strconv.FormatUint(p.Rev, 10)
	if p.Hidden > 0 {
		s += "-" + strconv.Itoa(p.Hidden)
	}
	return s
}

// Page reads up to limit Things (all when limit <= 0) from offset, in
// ascending code-point order of id, from one installed revision.
func (r *Registry) Page(offset, limit int) Page {
	now := r.opts.Now()
	r.mu.RLock()
	defer r.mu.RUnlock()
	p := Page{Rev: r.rev, Now: now, Installed: r.installed}
	p.Things, p.Total, p.Hidden = r.listLocked(offset, limit, now)
	return p
}

// PageJSON calls fn with the enriched JSON of p.Things[lo:hi], in order,
// reading their stored documents in one store transaction. It returns
// ErrStale when the store has moved past p.Rev (a write committed since
// the page was read): the documents would not be those of the page.
// doc is valid only during the call.
func (r *Registry) PageJSON(p *Page, lo, hi int, fn func(doc []byte) error) error {
	things := p.Things[lo:hi]
	ids := make([]string, len(things))
	byID := make(map[string]*Thing, len(things))
	for i, t := range things {
		ids[i] = t.ID
		byID[t.ID] = t
	}
	var buf []byte
	n := 0
	err := r.store.ThingsRawAt(p.Rev, ids, func(id string, raw []byte) error {
		n++
		buf = byID[id].AppendEnrichedJSON(buf[:0], raw, p.Now)
		return fn(buf)
	})
	if errors.Is(err, ErrStale) {
		return err
	}
	if err == nil && n != len(ids) {
		// The store at p.Rev lacks a Thing the index at p.Rev holds.
		err = errors.New("store and index disagree")
	}
	if err != nil {
		return &Error{Code: EINTERNAL, Message: "cannot read stored documents", Err: err}
	}
	return nil
}
