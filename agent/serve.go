package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/eclipse-lmos/lmos-hub/lmos"
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
	StatusPending   = lmos.StatusPending
	StatusRunning   = lmos.StatusRunning
	StatusCompleted = lmos.StatusCompleted
	StatusFailed    = lmos.StatusFailed
)

const statusProperty = lmos.StatusProperty

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

// actionHandler is the handler of the action name, nil if none.
func (a *Agent) actionHandler(name string) StreamHandler {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.actions[name]
}

// writeHandler is the handler of writes of the property name, nil if none.
func (a *Agent) writeHandler(name string) WriteHandler {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.writes[name]
}

// noAction is the answer to a request of an action without a handler.
func noAction(name string) *Problem {
	return NewProblem(http.StatusNotFound, fmt.Sprintf("the agent has no action %q", name))
}

// noWritable is the answer to a write of a property without a handler.
func noWritable(name string) *Problem {
	return NewProblem(http.StatusNotFound, fmt.Sprintf("the agent has no writable property %q", name))
}

// SetProperty publishes the property's value, retained, encoded by its
// form's content type. While the agent is reconnecting the value is kept
// and published once it is back; it is also republished after every
// reconnect.
func (a *Agent) SetProperty(name string, value any) error {
	a.mu.Lock()
	a.props[name] = value
	a.mu.Unlock()
	return a.link.setProperty(name, value)
}

// Emit publishes the event with data, encoded by its form's content type.
// It fails with ErrNotConnected while the agent is reconnecting, or (over
// MQTT) when its connection ends before the hub acknowledged the event.
func (a *Agent) Emit(event string, data any) error {
	return a.link.emit(event, data)
}

// contentType is the content type of an affordance's hub form.
func (a *Agent) contentType(key string) string {
	if ct := a.td.types[key]; ct != "" {
		return ct
	}
	return a.opts.ContentType
}

func problemOf(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return NewProblem(http.StatusInternalServerError, err.Error())
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
