package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Router is the Transport consumers use (the HTTP proxy, the WebSocket
// gateway): it checks that the Thing and its affordance exist and that the
// Thing is not offline, then hands the interaction to the transport that
// reaches the Thing: the one its lmos:presence came through, else the one
// its description came through. app registers the transports.
type Router struct {
	reg *Registry

	mu         sync.RWMutex
	transports map[Source]Transport
	obs        Observer // nil: none (SetObserver)
	tracer     Tracer   // nil: none (SetTracer)
}

var _ Transport = (*Router)(nil)

// NewRouter returns a Router over reg with no transports yet.
func NewRouter(reg *Registry) *Router {
	return &Router{reg: reg, transports: make(map[Source]Transport)}
}

// Handle makes t the transport for Things reached through src.
func (r *Router) Handle(src Source, t Transport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transports[src] = t
}

// Check validates in without delivering it and returns the transport that
// would carry it: ENOTFOUND for an unknown Thing or affordance, EUNAVAILABLE
// for an offline Thing or one no transport reaches. Streams call it before
// committing to a response. Its refusals, like Validate's and Deliver's,
// are counted (Observer): the door answers them and delivers nothing.
func (r *Router) Check(in Interaction) (Transport, Thing, error) {
	tr, _, t, err := r.lookup(in)
	if err != nil {
		r.routed(in, "", time.Now(), "", err, r.trace(&in)) // the door answers this refusal
	}
	return tr, t, err
}

// lookup is Check, also naming the transport's source.
func (r *Router) lookup(in Interaction) (Transport, Source, Thing, error) {
	t, err := r.reg.Get(in.ThingID)
	if err != nil {
		return nil, "", Thing{}, err
	}
	member := in.Op.affordances()
	if member == "" {
		return nil, "", Thing{}, Errorf(EINVALID, "unknown operation %q", in.Op)
	}
	if !t.Summary.HasAffordance(member, in.Name) {
		return nil, "", Thing{}, Errorf(ENOTFOUND, "Thing %q has no %s %q", in.ThingID, singular(member), in.Name)
	}
	if t.Meta.Presence.Status == PresenceOffline {
		return nil, "", Thing{}, Errorf(EUNAVAILABLE, "Thing %q is offline", in.ThingID)
	}
	r.mu.RLock()
	src := t.Meta.Presence.Via
	tr := r.transports[src]
	if tr == nil {
		src = t.Meta.Origin.Source
		tr = r.transports[src]
	}
	r.mu.RUnlock()
	if tr == nil {
		return nil, "", Thing{}, Errorf(EUNAVAILABLE, "the hub has no transport that reaches Thing %q", in.ThingID)
	}
	return tr, src, t, nil
}

// Deliver checks in (see Check) and delivers it. A one-shot interaction
// whose ctx expires before its final result fails with ETIMEOUT; a stream
// whose ctx ends returns nil.
func (r *Router) Deliver(ctx context.Context, in Interaction, emit func(Result) error) error {
	start := time.Now()
	end := r.trace(&in)
	tr, src, err := r.prepare(&in)
	if err != nil {
		r.routed(in, "", start, "", err, end)
		return err
	}
	final := ""
	err = tr.Deliver(ctx, in, func(res Result) error {
		if res.Final() && final == "" {
			final = res.Status
		}
		return emit(res)
	})
	err = r.delivered(ctx, in, final != "", err)
	r.routed(in, src, start, final, err, end)
	return err
}

// delivered is Deliver's error once tr.Deliver returned err: final says a
// final result was emitted.
func (r *Router) delivered(ctx context.Context, in Interaction, final bool, err error) error {
	switch {
	case in.Op.Streaming() && err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil
	case err == nil && !final && !in.Op.Streaming():
		return Errorf(EINTERNAL, "the transport ended %s without a final result", in.Op)
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: ETIMEOUT, Message: fmt.Sprintf("Thing %q gave no final result in time", in.ThingID), Err: err}
	case err != nil:
		return fmt.Errorf("cannot %s %s of %s: %w", in.Op, in.Name, in.ThingID, err)
	}
	return nil
}

// Validate makes the checks Deliver makes before anything reaches the
// Thing — it exists, the affordance allows the operation, the input fits
// its schema — so that a door can answer a refusal before it commits to
// a response (an HTTP event stream starts with 200).
func (r *Router) Validate(in Interaction) error {
	_, _, err := r.prepare(&in)
	if err != nil {
		r.routed(in, "", time.Now(), "", err, r.trace(&in))
	}
	return err
}

// prepare checks in and fills in its Thing and affordance.
func (r *Router) prepare(in *Interaction) (Transport, Source, error) {
	tr, src, t, err := r.lookup(*in)
	if err != nil {
		return nil, "", err
	}
	in.Thing = &t
	doc, err := r.reg.Document(in.ThingID)
	if err != nil {
		return nil, "", err
	}
	affs, _ := doc[in.Op.affordances()].(map[string]any)
	if in.Affordance, _ = affs[in.Name].(map[string]any); in.Affordance == nil {
		// Replaced since Check without this affordance.
		return nil, "", Errorf(ENOTFOUND, "Thing %q has no %s %q", in.ThingID, singular(in.Op.affordances()), in.Name)
	}
	// The Thing would refuse these anyway, or never answer: say why now.
	if in.Op == OpWriteProperty && in.Affordance["readOnly"] == true {
		return nil, "", Errorf(EMETHOD, "property %q of Thing %q is read-only", in.Name, in.ThingID)
	}
	if (in.Op == OpReadProperty || in.Op == OpObserveProperty) && in.Affordance["writeOnly"] == true {
		return nil, "", Errorf(EMETHOD, "property %q of Thing %q is write-only", in.Name, in.ThingID)
	}
	if err := checkInput(*in, r.reg.Decoder()); err != nil {
		return nil, "", err
	}
	return tr, src, nil
}

// singular names one affordance of a TD member in messages.
func singular(member string) string {
	switch member {
	case "properties":
		return "property"
	case "actions":
		return "action"
	}
	return "event"
}
