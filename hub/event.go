package hub

import (
	"encoding/json"
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
	// TD is the submitted document of a created Thing (for diff=true). Only
	// live events carry it; the event log does not store it.
	TD json.RawMessage `json:"td,omitempty"`
	// Patch is the RFC 7396 merge patch from the old to the new document of
	// an updated Thing, including "id" (for diff=true).
	Patch json.RawMessage `json:"patch,omitempty"`
}

// Feed is e as the hub's feeds show it without diffs: TD and Patch left
// out.
func (e Event) Feed() Event {
	e.TD, e.Patch = nil, nil
	return e
}

// Subscription receives change-feed events in sequence order. C is closed
// when the subscription ends: by Cancel, by Registry.Close, or because the
// subscriber fell SubscriberBuffer events behind (Dropped then reports true;
// the subscriber resubscribes from its last sequence and loses nothing that
// is still in the store's event log).
type Subscription struct {
	C       <-chan Event
	c       chan Event
	r       *Registry
	dropped bool
	ended   bool
}

// Subscribe starts a subscription. When replay is true it also returns the
// logged events after sequence after; replay and live events together then
// form a gapless sequence.
func (r *Registry) Subscribe(after uint64, replay bool) (*Subscription, []Event, error) {
	r.feedMu.Lock()
	defer r.feedMu.Unlock()
	if r.closed {
		return nil, nil, Errorf(EUNAVAILABLE, "the registry is shutting down")
	}
	var past []Event
	if replay && after < r.published {
		err := r.store.EventsAfter(after, func(e Event) error {
			if e.Seq <= r.published {
				past = append(past, e)
			}
			return nil
		})
		if err != nil {
			return nil, nil, &Error{Code: EINTERNAL, Message: "cannot read the event log", Err: err}
		}
	}
	c := make(chan Event, r.opts.SubscriberBuffer)
	s := &Subscription{C: c, c: c, r: r}
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
	close(s.c)
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
		if e.Seq != 0 { // presence events are not numbered
			r.published = e.Seq
		}
		for s := range r.subs {
			select {
			case s.c <- e:
			default:
				s.dropped = true
				r.dropLocked(s)
			}
		}
	}
}
