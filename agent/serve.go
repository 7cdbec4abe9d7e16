package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
)

// Handler serves an action: it returns the output or an error (a *Problem,
// or any error, which becomes a 500 problem).
type Handler func(ctx context.Context, input Input) (any, error)

// StreamHandler serves an action that reports partial results: each emit
// is a "running" result to the requester, in order; the return value is the
// final one.
type StreamHandler func(ctx context.Context, input Input, emit func(partial any) error) (any, error)

// WriteHandler serves a property write (…/properties/{name}/set). It
// usually applies the value and calls SetProperty with the new state.
type WriteHandler func(ctx context.Context, value Value) error

// Status user property values of results (PROTOCOL §4.3).
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

const statusProperty = "lmos-status"

// HandleAction serves the action name. A request with a Response Topic
// in a reply inbox (lmos/v1/clients/{clientId}/…) gets the result there
// (lmos-status completed, or failed with a problem); a request without one
// (MQTT 3.1.1, fire-and-forget), or with a Response Topic elsewhere, still
// runs h and gets no result. At most 64 handlers run at once: beyond that a
// request is answered with a 503 problem (or dropped without a reply
// inbox).
func (a *Agent) HandleAction(name string, h Handler) {
	a.HandleActionStream(name, func(ctx context.Context, in Input, _ func(any) error) (any, error) {
		return h(ctx, in)
	})
}

// HandleActionStream serves the action name with partial results.
func (a *Agent) HandleActionStream(name string, h StreamHandler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.actions[name] = h
}

// HandleWrite serves writes of the property name.
func (a *Agent) HandleWrite(name string, h WriteHandler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writes[name] = h
}

// SetProperty publishes the property's value, retained, encoded by its
// form's content type. While the agent is reconnecting the value is kept
// and published once it is back; it is also republished after every
// reconnect.
func (a *Agent) SetProperty(name string, value any) error {
	a.mu.Lock()
	a.props[name] = value
	cli := a.cli
	a.mu.Unlock()
	if a.ws != nil {
		if err := a.wsProperty(name, value, ""); err != nil && !errors.Is(err, ErrNotConnected) {
			return err
		}
		return nil
	}
	if cli == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.opts.Timeout)
	defer cancel()
	return a.publishProperty(ctx, cli, name, value)
}

func (a *Agent) publishProperty(ctx context.Context, cli *paho.Client, name string, value any) error {
	ct := a.contentType("properties/" + name)
	payload, err := encode(value, ct)
	if err != nil {
		return fmt.Errorf("cannot set property %s: %w", name, err)
	}
	return a.publishOn(ctx, cli, &paho.Publish{
		Topic: lmos.ThingTopic(a.td.id, "properties/"+name), Payload: payload, QoS: 1, Retain: true,
		Properties: &paho.PublishProperties{ContentType: ct},
	})
}

// Emit publishes the event with data, encoded by its form's content type.
// It fails with ErrNotConnected while the agent is reconnecting.
func (a *Agent) Emit(event string, data any) error {
	if a.ws != nil {
		return a.wsEmit(event, data)
	}
	a.mu.Lock()
	cli := a.cli
	a.mu.Unlock()
	if cli == nil {
		return fmt.Errorf("cannot emit %s: %w", event, ErrNotConnected)
	}
	ct := a.contentType("events/" + event)
	payload, err := encode(data, ct)
	if err != nil {
		return fmt.Errorf("cannot emit %s: %w", event, err)
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.opts.Timeout)
	defer cancel()
	return a.publishOn(ctx, cli, &paho.Publish{
		Topic: lmos.ThingTopic(a.td.id, "events/"+event), Payload: payload, QoS: 1,
		Properties: &paho.PublishProperties{ContentType: ct},
	})
}

// contentType is the content type of an affordance's hub form.
func (a *Agent) contentType(key string) string {
	if ct := a.td.types[key]; ct != "" {
		return ct
	}
	return a.opts.ContentType
}

// replier answers one request on its Response Topic, if it has one.
type replier struct {
	a           *Agent
	topic       string
	correlation []byte
	contentType string
	// trace is the request's W3C trace context (user properties
	// traceparent and tracestate), carried back on every result as the
	// WebSocket agent carries it in its replies (PROTOCOL §10).
	trace paho.UserProperties
}

// replyTopic reports whether the agent may publish results on topic: only
// a reply inbox lmos/v1/clients/{clientId}/…. Anything else would let a
// requester make the agent publish on its own topics (an empty result on
// its td topic deregisters it; a result on its events fakes an event).
func replyTopic(topic string) bool {
	rest, ok := strings.CutPrefix(topic, lmos.ClientsPrefix)
	client, _, _ := strings.Cut(rest, "/")
	return ok && client != "" && !strings.ContainsAny(rest, "+#\x00")
}

func (a *Agent) replierFor(p *paho.Publish, formType string) (Input, replier) {
	in := Input{Payload: p.Payload, ContentType: contentTypeOr(p.Properties.ContentType, formType)}
	// Results go back in the request's encoding when it is one we speak.
	ct := formType
	if mt := lmos.MediaType(in.ContentType); mt == JSON || mt == CBOR {
		ct = mt
	}
	topic := p.Properties.ResponseTopic
	if topic != "" && !replyTopic(topic) {
		a.log.Debug("the Response Topic is not a reply inbox (lmos/v1/clients/…): serving the request without results",
			"topic", p.Topic, "response_topic", topic)
		topic = ""
	}
	var trace paho.UserProperties
	for _, up := range p.Properties.User {
		if up.Key == "traceparent" || up.Key == "tracestate" {
			trace = append(trace, up)
		}
	}
	return in, replier{a: a, topic: topic, correlation: p.Properties.CorrelationData, contentType: ct, trace: trace}
}

func (r replier) send(status string, v any) error {
	if r.topic == "" {
		return nil
	}
	payload, err := encode(v, r.contentType)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.a.hctx, r.a.opts.Timeout)
	defer cancel()
	props := &paho.PublishProperties{ContentType: r.contentType, CorrelationData: r.correlation}
	props.User.Add(statusProperty, status)
	props.User = append(props.User, r.trace...)
	return r.a.publish(ctx, &paho.Publish{Topic: r.topic, Payload: payload, QoS: 1, Properties: props})
}

// fail answers with the problem err stands for.
func (r replier) fail(err error) {
	if serr := r.send(StatusFailed, problemOf(err)); serr != nil {
		r.a.log.Warn("cannot send a failed result", "topic", r.topic, "err", serr)
	}
}

func problemOf(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return NewProblem(http.StatusInternalServerError, err.Error())
}

func (a *Agent) serveAction(name string, p *paho.Publish) {
	in, r := a.replierFor(p, a.contentType("actions/"+name))
	a.mu.Lock()
	h := a.actions[name]
	a.mu.Unlock()
	if h == nil {
		r.fail(NewProblem(http.StatusNotFound, fmt.Sprintf("the agent has no action %q", name)))
		return
	}
	emit := func(partial any) error { return r.send(StatusRunning, partial) }
	out, err := call(func() (any, error) { return h(a.hctx, in, emit) })
	if err != nil {
		a.log.Debug("action failed", "action", name, "err", err)
		r.fail(err)
		return
	}
	if err := r.send(StatusCompleted, out); err != nil {
		a.log.Warn("cannot send an action result", "action", name, "err", err)
	}
}

func (a *Agent) serveWrite(name string, p *paho.Publish) {
	in, r := a.replierFor(p, a.contentType("properties/"+name))
	a.mu.Lock()
	h := a.writes[name]
	a.mu.Unlock()
	if h == nil {
		r.fail(NewProblem(http.StatusNotFound, fmt.Sprintf("the agent has no writable property %q", name)))
		return
	}
	if _, err := call(func() (any, error) { return nil, h(a.hctx, in) }); err != nil {
		a.log.Debug("property write failed", "property", name, "err", err)
		r.fail(err)
		return
	}
	if err := r.send(StatusCompleted, nil); err != nil {
		a.log.Warn("cannot acknowledge a property write", "property", name, "err", err)
	}
}

// call runs a handler, turning a panic into an internal problem.
func call(f func() (any, error)) (out any, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, NewProblem(http.StatusInternalServerError, fmt.Sprintf("the handler panicked: %v", v))
		}
	}()
	return f()
}
