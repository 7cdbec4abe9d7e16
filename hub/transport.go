package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Op is a W3C WoT operation type: what an Interaction does.
type Op string

// The operations the hub routes (PROTOCOL §3.3, §4.3, §5).
const (
	OpReadProperty    Op = "readproperty"
	OpWriteProperty   Op = "writeproperty"
	OpObserveProperty Op = "observeproperty"
	OpInvokeAction    Op = "invokeaction"
	OpSubscribeEvent  Op = "subscribeevent"
)

// Streaming reports whether op delivers a stream of values until its
// context ends rather than one final result.
func (op Op) Streaming() bool { return op == OpObserveProperty || op == OpSubscribeEvent }

// affordances is the TD member holding op's affordance.
func (op Op) affordances() string {
	switch op {
	case OpReadProperty, OpWriteProperty, OpObserveProperty:
		return "properties"
	case OpInvokeAction:
		return "actions"
	case OpSubscribeEvent:
		return "events"
	}
	return ""
}

// Result statuses (the lmos-status of PROTOCOL §4.3).
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// Interaction is one request of a consumer to a Thing, whatever transport
// carries it.
type Interaction struct {
	ThingID string
	Op      Op
	// Name is the property, action or event name.
	Name string
	// Input is the action input or the property value to write, encoded
	// as ContentType says (lmos.MediaJSON or lmos.MediaCBOR; "" is JSON).
	Input       []byte
	ContentType string
	// Accept is the encoding the consumer wants results in ("" = as
	// ContentType). Transports transcode the Thing's payloads to it.
	Accept string
	// Traceparent and Tracestate are the consumer's W3C trace context,
	// passed on where the transport can carry it.
	Traceparent, Tracestate string
	// Thing is the registered Thing and Affordance its property, action or
	// event description (parsed for this interaction); the Router fills
	// them in.
	Thing      *Thing
	Affordance map[string]any
}

// Result is one answer of a Thing: for invokeaction any number of pending
// or running results and then one completed or failed one; for
// readproperty and writeproperty one completed result; for the streams
// (observeproperty, subscribeevent) one pending result without data once
// the stream is in place, then one running result per value.
type Result struct {
	Status string
	// Data is the output, value or event data, encoded as ContentType
	// (the Interaction's Accept); empty when there is none.
	Data        []byte
	ContentType string
	// Problem says why a failed result failed.
	Problem *lmos.Problem
}

// Final reports whether r ends an interaction.
func (r Result) Final() bool { return r.Status == StatusCompleted || r.Status == StatusFailed }

// Transport delivers interactions to the Things it reaches (MQTT agents,
// WebSocket agents …).
//
// Deliver calls emit with each result in order, from one goroutine, and
// returns nil after the final one (for streams: once ctx ends); an error
// from emit ends the delivery and is returned. A transport cleans up
// whatever it set up for the interaction (subscriptions, routes) before
// Deliver returns, whatever the reason. Errors are hub errors: ENOTFOUND,
// EUNAVAILABLE (nobody serves the affordance now), EINVALID (payloads),
// or ctx's error.
type Transport interface {
	Deliver(ctx context.Context, in Interaction, emit func(Result) error) error
}

// Router is the Transport consumers use (the HTTP proxy, the WebSocket
// gateway): it checks that the Thing and its affordance exist and that the
// Thing is not offline, then hands the interaction to the transport that
// reaches the Thing: the one its lmos:presence came through, else the one
// its description came through. internal/app registers the transports.
type Router struct {
	reg *Registry

	mu         sync.RWMutex
	transports map[Source]Transport
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
// committing to a response.
func (r *Router) Check(in Interaction) (Transport, Thing, error) {
	t, err := r.reg.Get(in.ThingID)
	if err != nil {
		return nil, Thing{}, err
	}
	member := in.Op.affordances()
	if member == "" {
		return nil, Thing{}, Errorf(EINVALID, "unknown operation %q", in.Op)
	}
	if !t.Summary.HasAffordance(member, in.Name) {
		return nil, Thing{}, Errorf(ENOTFOUND, "Thing %q has no %s %q", in.ThingID, singular(member), in.Name)
	}
	if t.Meta.Presence.Status == PresenceOffline {
		return nil, Thing{}, Errorf(EUNAVAILABLE, "Thing %q is offline", in.ThingID)
	}
	r.mu.RLock()
	tr := r.transports[t.Meta.Presence.Via]
	if tr == nil {
		tr = r.transports[t.Meta.Origin.Source]
	}
	r.mu.RUnlock()
	if tr == nil {
		return nil, Thing{}, Errorf(EUNAVAILABLE, "the hub has no transport that reaches Thing %q", in.ThingID)
	}
	return tr, t, nil
}

// Deliver checks in (see Check) and delivers it. A one-shot interaction
// whose ctx expires before its final result fails with ETIMEOUT; a stream
// whose ctx ends returns nil.
func (r *Router) Deliver(ctx context.Context, in Interaction, emit func(Result) error) error {
	tr, t, err := r.Check(in)
	if err != nil {
		return err
	}
	in.Thing = &t
	doc, err := r.reg.Document(in.ThingID)
	if err != nil {
		return err
	}
	affs, _ := doc[in.Op.affordances()].(map[string]any)
	if in.Affordance, _ = affs[in.Name].(map[string]any); in.Affordance == nil {
		// Replaced since Check without this affordance.
		return Errorf(ENOTFOUND, "Thing %q has no %s %q", in.ThingID, singular(in.Op.affordances()), in.Name)
	}
	// The Thing would refuse these anyway, or never answer: say why now.
	if in.Op == OpWriteProperty && in.Affordance["readOnly"] == true {
		return Errorf(EMETHOD, "property %q of Thing %q is read-only", in.Name, in.ThingID)
	}
	if (in.Op == OpReadProperty || in.Op == OpObserveProperty) && in.Affordance["writeOnly"] == true {
		return Errorf(EMETHOD, "property %q of Thing %q is write-only", in.Name, in.ThingID)
	}
	if err := checkInput(in); err != nil {
		return err
	}
	final := false
	err = tr.Deliver(ctx, in, func(res Result) error {
		final = final || res.Final()
		return emit(res)
	})
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

// checkInput checks a written value or an action's input against the data
// schema the TD gives for it (a property's own schema, an action's
// "input"), so that no consumer, whatever its transport, reaches an agent
// with a value the TD rules out.
func checkInput(in Interaction) error {
	var schema map[string]any
	var key string
	switch in.Op {
	case OpWriteProperty:
		schema, key = in.Affordance, "properties/"+in.Name
	case OpInvokeAction:
		schema, _ = in.Affordance["input"].(map[string]any)
		key = "actions/" + in.Name
	}
	if schema == nil || len(in.Input) == 0 {
		return nil
	}
	v, err := DecodeValue(in.Input, in.ContentType)
	if err != nil {
		return err
	}
	var cache *dataSchemas
	if in.Thing != nil && in.Thing.Summary != nil {
		cache = in.Thing.Summary.schemas
	}
	return checkDataSchema(cache, key, schema, v)
}

func singular(member string) string {
	switch member {
	case "properties":
		return "property"
	case "actions":
		return "action"
	}
	return "event"
}
