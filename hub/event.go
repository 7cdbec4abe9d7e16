package hub

import (
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// EventType names a change-feed event, as the W3C WoT Discovery SSE API does.
type EventType string

// Registry change events.
const (
	EventCreated EventType = "thing_created"
	EventUpdated EventType = "thing_updated"
	EventDeleted EventType = "thing_deleted"
	// EventPresence reports a change of lmos:presence. It is a hub event
	// (/api/events, lmos/v1/hub/events), not a W3C WoT Discovery one.
	EventPresence EventType = "presence"
	// EventBinding reports that an admin bound an id to a key (DID) or
	// removed its binding (DID empty). A hub event, like presence.
	EventBinding EventType = "binding"
)

// IsDirectoryEvent reports whether t is one of the W3C WoT Discovery
// directory events.
func (t EventType) IsDirectoryEvent() bool {
	return t == EventCreated || t == EventUpdated || t == EventDeleted
}

// Event is one entry of the change feed. Seq increases by one per event and
// never repeats, across restarts too. Its JSON, members in this order, is
// the object of the hub's feeds (PROTOCOL §3.4, §4.1): lmos/v1/hub/events
// carries it without TD and Patch, /api/events with them on ?diff=true.
type Event struct {
	Type EventType `json:"type"`
	ID   string    `json:"id"`
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Presence is the new lmos:presence of a presence event.
	Presence *Presence `json:"presence,omitempty"`
	// Join describes the pending join of a join event (hub/pending.go).
	Join *JoinEvent `json:"join,omitempty"`
	// DID is the new key of a binding event ("" when removed).
	DID string `json:"did,omitempty"`
	// Group describes a group event (hub/group.go).
	Group *GroupEvent `json:"group,omitempty"`
	// Link is the new state of a link event (hub/link.go).
	Link *LinkState `json:"link,omitempty"`
	// TD is the submitted document of a created Thing (for diff=true). Only
	// live events carry it; the event log does not store it.
	TD json.RawMessage `json:"td,omitempty"`
	// Patch is the RFC 7396 merge patch from the old to the new document of
	// an updated Thing, including "id" (for diff=true).
	Patch json.RawMessage `json:"patch,omitempty"`

	// memo holds the encodings of a live event, shared by every
	// subscriber (Encoded).
	memo *eventMemo
}

// eventMemo holds the encodings of one published event by key.
type eventMemo struct {
	mu  sync.Mutex
	enc map[string][]byte
}

// Encoded returns the encoding of e named key, made by encode the first
// time any subscriber of the live feed asks for it and then shared: with a
// thousand event streams open, a 250 KiB update is encoded once per form,
// not once per stream. The result must not be changed. An event that was
// not published live (a replay from the log) is encoded on every call.
func (e Event) Encoded(key string, encode func() []byte) []byte {
	m := e.memo
	if m == nil {
		return encode()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.enc[key]; ok {
		return b
	}
	b := encode()
	if m.enc == nil {
		m.enc = make(map[string][]byte, 2)
	}
	m.enc[key] = b
	return b
}

// Feed is e as the hub's feeds show it without diffs: TD and Patch left
// out.
func (e Event) Feed() Event {
	e.TD, e.Patch = nil, nil
	return e
}

// Subscription receives change-feed events in sequence order. C is closed
// when the subscription ends: by Cancel, by Registry.Close, or because the
// subscriber fell behind: SubscriberBuffer events, or FeedBurst more while
// a burst (one batch's many events) drains (Dropped then reports true; the
// subscriber resubscribes
// from its last sequence and loses nothing that is still in the store's
// event log).
type Subscription struct {
	C <-chan Event
	// Gap is set when a replay was asked for from a sequence the event
	// log no longer covers (older than its oldest event, or newer than the
	// newest: a store restored from a backup): no event was replayed, and
	// the subscriber must read the whole directory again.
	Gap     *FeedGap
	c       chan Event
	r       *Registry
	dropped bool
	ended   bool
	// backlog holds, in order, the events c had no room for: one batch
	// may publish over a thousand at once (a group of 1,024 members
	// created or dissolved), more than any subscriber's channel holds.
	// pump moves them into c; while it runs (pumping) every new event
	// goes behind them, and the pump, not dropLocked, closes c.
	backlog []Event
	pumping bool
	done    chan struct{} // closed by dropLocked while pumping
}

// FeedBurst is how many events a change-feed subscriber may be behind
// beyond its channel while a burst drains: the events of one group write
// of MaxGroupMembers members replaced by as many others (each removal,
// each addition, the group's own event), and one more. The backlog grows
// only while the subscriber is behind (~150 bytes an event).
const FeedBurst = 2*MaxGroupMembers + 2

// Subscribe starts a subscription. When replay is true it also returns the
// logged events after sequence after; replay and live events together then
// form a gapless sequence. When the log cannot replay all of them, it
// returns none and sets the subscription's Gap instead: a partial replay
// would leave the subscriber believing it missed nothing.
func (r *Registry) Subscribe(after uint64, replay bool) (*Subscription, []Event, error) {
	r.feedMu.Lock()
	defer r.feedMu.Unlock()
	if r.closed {
		return nil, nil, Errorf(EUNAVAILABLE, "the registry is shutting down")
	}
	var past []Event
	var gap *FeedGap
	if replay {
		var err error
		if past, gap, err = r.replayLocked(after); err != nil {
			return nil, nil, err
		}
	}
	c := make(chan Event, r.opts.SubscriberBuffer)
	s := &Subscription{C: c, c: c, r: r, Gap: gap}
	r.subs[s] = struct{}{}
	return s, past, nil
}

// Cancel ends the subscription; calling it more than once is fine.
func (s *Subscription) Cancel() {
	s.r.feedMu.Lock()
	defer s.r.feedMu.Unlock()
	s.r.dropLocked(s)
}

// Dropped reports whether the subscription ended because it fell behind.
func (s *Subscription) Dropped() bool {
	s.r.feedMu.Lock()
	defer s.r.feedMu.Unlock()
	return s.dropped
}

func (r *Registry) dropLocked(s *Subscription) {
	if s.ended {
		return
	}
	s.ended = true
	delete(r.subs, s)
	s.backlog = nil
	if s.pumping {
		close(s.done) // the pump closes c: it may be sending on it
		return
	}
	close(s.c)
}

// offerLocked queues e for s: into its channel, or behind the events
// waiting for room. A subscriber whose channel is full is dropped, as it
// always was, unless e is of a burst (a batch of more than one event) or
// a burst's events still wait: those wait behind the channel, up to
// FeedBurst of them.
func (r *Registry) offerLocked(s *Subscription, e Event, burst bool) {
	if !s.pumping {
		select {
		case s.c <- e:
			return
		default:
		}
		if !burst {
			s.dropped = true
			r.dropLocked(s)
			return
		}
	}
	if len(s.backlog) >= FeedBurst {
		s.dropped = true
		r.dropLocked(s)
		return
	}
	s.backlog = append(s.backlog, e)
	if !s.pumping {
		s.pumping = true
		s.done = make(chan struct{})
		go r.pump(s)
	}
}

// pump moves s's backlog into its channel as the subscriber reads, then
// ends; it closes the channel if the subscription ended meanwhile.
func (r *Registry) pump(s *Subscription) {
	for {
		r.feedMu.Lock()
		if s.ended {
			s.pumping = false
			close(s.c)
			r.feedMu.Unlock()
			return
		}
		if len(s.backlog) == 0 {
			s.pumping = false
			s.backlog = nil
			r.feedMu.Unlock()
			return
		}
		e := s.backlog[0]
		s.backlog = s.backlog[1:]
		done := s.done
		r.feedMu.Unlock()
		select {
		case s.c <- e:
		case <-done:
		}
	}
}

// Announce sends e, a hub event that is not directory history (join
// events), to the feed's live subscribers: not numbered, not logged.
func (r *Registry) Announce(e Event) {
	e.Seq = 0
	if e.Time.IsZero() {
		e.Time = r.opts.Now()
	}
	r.publish([]Event{e})
}

func (r *Registry) publish(events []Event) {
	r.feedMu.Lock()
	defer r.feedMu.Unlock()
	for _, e := range events {
		e.memo = new(eventMemo) // one per event, shared by all subscribers
		if e.Seq != 0 {         // presence events are not numbered
			r.published = e.Seq
		}
		for s := range r.subs {
			r.offerLocked(s, e, len(events) > 1)
		}
	}
}

// FeedGap says that the event log cannot replay what a subscriber missed
// (PROTOCOL §3.1 lmos_resync): Last is the sequence of the newest published
// event, Oldest that of the oldest logged one (0 when the log is empty).
type FeedGap struct {
	Last   uint64 `json:"last"`
	Oldest uint64 `json:"oldest"`
}

// errStopLog ends a read of the event log early.
var errStopLog = errors.New("stop")

// replayLocked returns the logged events after sequence after, or the gap
// when the log does not hold every one of them; under feedMu.
func (r *Registry) replayLocked(after uint64) ([]Event, *FeedGap, error) {
	if after == r.published {
		return nil, nil, nil
	}
	var past []Event
	oldest := uint64(0)
	from := after
	if after > r.published {
		from = 0 // only the oldest is wanted
	}
	err := r.store.EventsAfter(from, func(e Event) error {
		if oldest == 0 {
			oldest = e.Seq
		}
		if after > r.published || e.Seq > r.published {
			return errStopLog
		}
		past = append(past, e)
		return nil
	})
	if err != nil && !errors.Is(err, errStopLog) {
		return nil, nil, &Error{Code: EINTERNAL, Message: "cannot read the event log", Err: err}
	}
	if after > r.published || oldest != after+1 {
		// Read from after, the first event found is the oldest logged
		// one whenever the log does not reach back to after+1.
		return nil, &FeedGap{Last: r.published, Oldest: oldest}, nil
	}
	return past, nil, nil
}
