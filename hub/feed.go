package hub

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
