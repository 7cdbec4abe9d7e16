package hub

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// RefusalLogPeriod is how often a refusal is logged per client at most
// (refused joins per source address, ACL refusals per MQTT client): the
// line written after a quiet period counts those held back.
const RefusalLogPeriod = 10 * time.Second

// Observer is told what the domain did, for the hub's metrics: app plugs
// in one the HTTP adapter implements, so that the hub imports no metrics
// library. Its methods must be quick and safe for concurrent use.
type Observer interface {
	// Joined says a join request on door ended with status
	// (lmos.JoinAccepted, JoinPending, JoinDeleted or JoinRejected);
	// reason is RefusalReason of a rejected one's error, else "".
	Joined(door Source, status, reason string)
	// Routed says an interaction a consumer asked for through door
	// (Interaction.Door; "" for the hub's own, group actions) ended with
	// outcome (one of the Outcome constants) after d; transport is the
	// Thing's ("" when it was refused before reaching one).
	Routed(door, transport Source, outcome string, d time.Duration)
}

// Tracer records a span per routed interaction (OpenTelemetry, in a
// binary built with the otel tag: app/otel.go): the hub imports no tracing
// library. Start is called before the interaction is checked, with the
// consumer's trace context in in.Traceparent and in.Tracestate; it returns
// the trace context to pass on to the Thing (the hub's span as its parent;
// "" keeps the consumer's) and end, which gets the transport ("" when
// refused first) and the outcome (an Outcome constant).
type Tracer interface {
	Start(in Interaction) (traceparent, tracestate string, end func(transport Source, outcome string))
}

// SetTracer makes t trace every routed interaction (nil: none). Call it
// before the doors open.
func (r *Router) SetTracer(t Tracer) { r.tracer = t }

// trace starts in's span and hands in the trace context to pass on; it
// returns the span's end (nil without a tracer).
func (r *Router) trace(in *Interaction) func(Source, string) {
	if r.tracer == nil {
		return nil
	}
	tp, ts, end := r.tracer.Start(*in)
	if tp != "" {
		in.Traceparent, in.Tracestate = tp, ts
	}
	return end
}

// Outcomes of a routed interaction (Observer.Routed).
const (
	OutcomeCompleted = "completed" // a completed final result
	OutcomeFailed    = "failed"    // the Thing answered with a failed result
	OutcomeStreamed  = "streamed"  // an observation or event subscription ended
	OutcomeTimeout   = "timeout"   // no final result in time
	OutcomeCanceled  = "canceled"  // the consumer went away first
	OutcomeRefused   = "refused"   // refused before reaching the Thing (unknown, offline, invalid input)
	OutcomeError     = "error"     // the transport could not deliver it
)

// SetObserver makes o the Router's observer; call it before the Router
// delivers anything.
func (r *Router) SetObserver(o Observer) { r.obs = o }

// SetObserver makes o the observer of joins; call it before the first
// join.
func (a *Admission) SetObserver(o Observer) { a.obs = o }

// SetLogger makes l the log of joins (info: accepted, pending, left,
// refused and why); call it before the first join.
func (a *Admission) SetLogger(l *slog.Logger) { a.log = l }

// logJoin logs how r ended: every accepted, pending and deregistering
// join, and refused ones at most one per source address and
// RefusalLogPeriod, with the count of those held back.
func (a *Admission) logJoin(r *JoinRequest, res JoinResult, err error) {
	if a.log == nil {
		return
	}
	attrs := []any{"door", string(r.Door), "id", r.ID, "addr", r.Addr}
	switch {
	case res.Status == lmos.JoinAccepted && res.Unchanged:
		// An mDNS Thing announcing itself again, an agent rejoining
		// with its description as stored: routine.
		a.log.Debug("join accepted", append(attrs, "unchanged", true)...)
	case res.Status == lmos.JoinAccepted && (res.ByKey || r.Takeover && !res.Created):
		// A new connection took the Thing over: by its bound key's proof
		// (the earlier credential stops working) or a WebSocket
		// registration from another connection than the one that had it.
		a.log.Info("thing taken over by a new connection", append(attrs, "byKey", res.ByKey)...)
	case res.Status == lmos.JoinAccepted:
		a.log.Info("join accepted", append(attrs, "created", res.Created)...)
	case res.Status == lmos.JoinPending:
		a.log.Info("join waits for approval", attrs...)
	case res.Status == lmos.JoinDeleted:
		a.log.Info("thing deregistered", attrs...)
	default:
		ok, held := a.refusedLog.Allow(string(r.Door) + " " + r.Addr)
		if !ok {
			return
		}
		attrs = append(attrs, "reason", RefusalReason(err), "err", ErrorMessage(err))
		if held > 0 {
			attrs = append(attrs, "suppressed", held)
		}
		a.log.Info("join refused", attrs...)
	}
}

// routed tells the observer how in ended.
func (r *Router) routed(in Interaction, tr Source, start time.Time, final string, err error, end func(Source, string)) {
	if r.obs == nil && end == nil {
		return
	}
	out := outcome(in, tr, final, err)
	if r.obs != nil {
		r.obs.Routed(in.Door, tr, out, time.Since(start))
	}
	if end != nil {
		end(tr, out)
	}
}

// outcome names how an interaction delivered over tr ended: final is the
// status of its final result ("" for none), err Deliver's error.
func outcome(in Interaction, tr Source, final string, err error) string {
	var e *Error
	switch {
	case tr == "":
		return OutcomeRefused
	case err == nil && in.Op.Streaming():
		return OutcomeStreamed
	case err == nil && final == StatusFailed:
		return OutcomeFailed
	case err == nil:
		return OutcomeCompleted
	case errors.As(err, &e) && e.Code == ETIMEOUT:
		return OutcomeTimeout
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.As(err, &e) && e.Code == EFAILED:
		return OutcomeFailed
	}
	return OutcomeError
}

// joined tells the observer how a join ended.
func (a *Admission) joined(r *JoinRequest, res JoinResult, err error) {
	if a.obs != nil {
		a.obs.Joined(r.Door, res.Status, RefusalReason(err))
	}
}

// Presence counts the live Things by presence status (online, offline,
// unknown).
func (r *Registry) Presence() map[string]int {
	now := r.opts.Now()
	out := map[string]int{PresenceOnline: 0, PresenceOffline: 0, PresenceUnknown: 0}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, t := range r.things {
		switch st := t.Meta.Presence.Status; {
		case t.expired(now):
		case st == PresenceOnline || st == PresenceOffline:
			out[st]++
		default:
			out[PresenceUnknown]++
		}
	}
	return out
}

// Now is the registry's clock (RegistryOptions.Now): adapters time what
// they rate-limit by it, so tests move it instead of waiting.
func (r *Registry) Now() time.Time { return r.opts.Now() }
