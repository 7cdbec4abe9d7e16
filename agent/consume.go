package agent

import (
	"context"
	"fmt"
)

// InvokeOption configures Invoke.
type InvokeOption func(*invokeConfig)

type invokeConfig struct {
	contentType string
	partial     func(Output)
	ack         bool
}

// newInvokeConfig applies opts to the defaults.
func newInvokeConfig(opts []InvokeOption) invokeConfig {
	cfg := invokeConfig{contentType: JSON}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// WithAck makes WriteProperty a request: it names the agent's inbox as
// Response Topic and waits for the writing agent's result (completed, or
// failed with its problem) until ctx ends. Invoke ignores it.
func WithAck() InvokeOption {
	return func(c *invokeConfig) { c.ack = true }
}

// WithPartial calls fn with every partial ("running") result, in order,
// before Invoke returns the final one.
func WithPartial(fn func(Output)) InvokeOption {
	return func(c *invokeConfig) { c.partial = fn }
}

// WithContentType sends the input as application/json (the default) or
// application/cbor; results come back in the same encoding.
func WithContentType(ct string) InvokeOption {
	return func(c *invokeConfig) { c.contentType = ct }
}

// Invoke invokes the action of the Thing thingID with input (any value, a
// json.RawMessage, or a Value) by MQTT 5 request/response: the request
// names the agent's inbox lmos/v1/clients/{clientId}/replies as Response
// Topic. It returns the completed output; a failed result is an error
// wrapping the *Problem (errors.As): the agent's, or the hub's when nobody
// serves the action (404 not-found for an unknown Thing or action, 503
// unavailable for an offline one), which comes at once. It waits until ctx
// ends, or Options.InvokeTimeout when ctx has no deadline.
func (a *Agent) Invoke(ctx context.Context, thingID, action string, input any, opts ...InvokeOption) (Output, error) {
	ctx, cancel := withDefault(ctx, a.opts.InvokeTimeout)
	defer cancel()
	out, err := a.link.invoke(ctx, thingID, action, input, newInvokeConfig(opts))
	if err != nil {
		return out, fmt.Errorf("cannot invoke %s of %s: %w", action, thingID, err)
	}
	return out, nil
}

// WriteProperty writes a property of the Thing thingID: it publishes the
// value to …/properties/{name}/set at QoS 1 and returns once the broker
// took it (agents do not acknowledge writes, PROTOCOL §10). With WithAck
// it waits for the agent's result instead, as Invoke does; only agents that
// answer writes (such as those of this package) give one.
func (a *Agent) WriteProperty(ctx context.Context, thingID, name string, value any, opts ...InvokeOption) error {
	if err := a.link.writeProperty(ctx, thingID, name, value, newInvokeConfig(opts)); err != nil {
		return fmt.Errorf("cannot write %s of %s: %w", name, thingID, err)
	}
	return nil
}

// ReadProperty returns the retained value of a property of the Thing
// thingID. Without a value it waits until ctx ends (Options.Timeout when
// ctx has no deadline).
func (a *Agent) ReadProperty(ctx context.Context, thingID, name string) (Value, error) {
	return a.link.readProperty(ctx, thingID, name)
}

// Observe calls fn with the current value of a property of the Thing
// thingID and every change, until stop is called; the observation survives
// reconnects. fn runs on the agent's receive goroutine: it must return
// quickly and must not wait for other results of this agent (Invoke,
// ReadProperty).
func (a *Agent) Observe(ctx context.Context, thingID, property string, fn func(Value)) (stop func(), err error) {
	return a.link.observe(ctx, thingID, "properties", property, fn)
}

// Subscribe calls fn with every event of the Thing thingID, until stop is
// called; as Observe.
func (a *Agent) Subscribe(ctx context.Context, thingID, event string, fn func(Value)) (stop func(), err error) {
	return a.link.observe(ctx, thingID, "events", event, fn)
}
