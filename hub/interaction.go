package hub

import (
	"context"

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
	StatusPending   = lmos.StatusPending
	StatusRunning   = lmos.StatusRunning
	StatusCompleted = lmos.StatusCompleted
	StatusFailed    = lmos.StatusFailed
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
	// Door is the door the consumer asked through (http, ws, mqtt; "" for
	// the hub's own, group actions): metrics count interactions by it.
	Door Source
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

// Publisher makes what a Thing reached over one transport emits visible to
// the consumers of another: the WebSocket transport publishes its agents'
// events, property values and presence through the MQTT broker, where MQTT
// subscribers and the hub's own streams (Router, OpSubscribeEvent and
// OpObserveProperty) see them as if an MQTT agent had published them.
type Publisher interface {
	// PublishEvent emits one event of a Thing.
	PublishEvent(thingID, name string, data []byte, contentType string) error
	// PublishProperty publishes a property's current value (kept for later
	// readers and observers).
	PublishProperty(thingID, name string, value []byte, contentType string) error
	// PublishPresence publishes a Thing's presence status (online, offline)
	// where consumers of the other transport read it.
	PublishPresence(thingID, status string) error
}
