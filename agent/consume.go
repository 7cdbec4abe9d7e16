package agent

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
)

// request is an Invoke waiting for its results.
type request struct {
	replies chan *paho.Publish
	done    chan struct{}
}

// InvokeOption configures Invoke.
type InvokeOption func(*invokeConfig)

type invokeConfig struct {
	contentType string
	partial     func(Output)
	ack         bool
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
	if a.ws != nil {
		cfg := invokeConfig{}
		for _, o := range opts {
			o(&cfg)
		}
		out, err := a.wsInvoke(ctx, thingID, action, input, cfg)
		if err != nil {
			return out, fmt.Errorf("cannot invoke %s of %s: %w", action, thingID, err)
		}
		return out, nil
	}
	out, err := a.request(ctx, lmos.ThingTopic(thingID, "actions/"+action), input, opts)
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
	if a.ws != nil {
		if err := a.wsWriteProperty(ctx, thingID, name, value); err != nil {
			return fmt.Errorf("cannot write %s of %s: %w", name, thingID, err)
		}
		return nil
	}
	topic := lmos.ThingTopic(thingID, "properties/"+name+"/set")
	cfg := invokeConfig{contentType: JSON}
	for _, o := range opts {
		o(&cfg)
	}
	var err error
	if cfg.ack {
		ctx, cancel := withDefault(ctx, a.opts.InvokeTimeout)
		defer cancel()
		_, err = a.request(ctx, topic, value, opts)
	} else {
		err = a.send(ctx, topic, value, cfg.contentType)
	}
	if err != nil {
		return fmt.Errorf("cannot write %s of %s: %w", name, thingID, err)
	}
	return nil
}

// send publishes input to topic at QoS 1, without a Response Topic, and
// returns once the broker acknowledged it.
func (a *Agent) send(ctx context.Context, topic string, input any, contentType string) error {
	payload, err := encode(input, contentType)
	if err != nil {
		return err
	}
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	return a.publish(ctx, &paho.Publish{
		Topic: topic, Payload: payload, QoS: 1,
		Properties: &paho.PublishProperties{ContentType: contentType},
	})
}

// request publishes input to topic with the agent's inbox as Response
// Topic and returns the final result.
func (a *Agent) request(ctx context.Context, topic string, input any, opts []InvokeOption) (Output, error) {
	cfg := invokeConfig{contentType: JSON}
	for _, o := range opts {
		o(&cfg)
	}
	payload, err := encode(input, cfg.contentType)
	if err != nil {
		return Output{}, err
	}
	corr := make([]byte, 16)
	_, _ = rand.Read(corr)
	req := &request{replies: make(chan *paho.Publish, 16), done: make(chan struct{})}
	a.mu.Lock()
	a.pending[string(corr)] = req
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.pending, string(corr))
		a.mu.Unlock()
		close(req.done)
	}()
	cli, err := a.client(ctx)
	if err != nil {
		return Output{}, err
	}
	ack, err := cli.Publish(ctx, &paho.Publish{
		Topic: topic, Payload: payload, QoS: 1,
		Properties: &paho.PublishProperties{ContentType: cfg.contentType, ResponseTopic: a.inbox + "replies", CorrelationData: corr},
	})
	if err != nil {
		return Output{}, fmt.Errorf("cannot publish to %s: %w", topic, err)
	}
	// PUBACK 0x10: no client subscribes to the topic, so no agent will
	// answer. An LMOS hub publishes a failed result saying why (PROTOCOL
	// §10) before the acknowledgement, but the two travel on different
	// queues; a broker that is not a hub sends none. Wait for it a moment.
	var unserved <-chan time.Time
	if ack != nil && ack.ReasonCode == noMatchingSubscribers {
		t := time.NewTimer(unservedGrace)
		defer t.Stop()
		unserved = t.C
	}
	for {
		select {
		case p := <-req.replies:
			out := Output{Payload: p.Payload, ContentType: contentTypeOr(p.Properties.ContentType, JSON)}
			status, ok := userProperty(p.Properties.User, statusProperty)
			if !ok {
				status = StatusCompleted // a responder that does not say
			}
			switch status {
			case StatusPending:
			case StatusRunning:
				if cfg.partial != nil {
					cfg.partial(out)
				}
			case StatusCompleted:
				return out, nil
			case StatusFailed:
				var prob Problem
				if err := out.Decode(&prob); err != nil {
					prob = Problem{Title: "failed", Detail: fmt.Sprintf("undecodable problem: %v", err)}
				}
				return out, fmt.Errorf("failed: %w", &prob)
			default: // as the hub does: an unknown status is a failure of the agent
				if len(status) > 64 {
					status = status[:64]
				}
				prob := NewProblem(http.StatusBadGateway, fmt.Sprintf("the agent answered with an unknown %s %q", statusProperty, status))
				return out, fmt.Errorf("the agent failed: %w", prob)
			}
		case <-unserved:
			return Output{}, NewProblem(http.StatusServiceUnavailable, "no client subscribes to "+topic)
		case <-ctx.Done():
			return Output{}, fmt.Errorf("no result: %w", ctx.Err())
		case <-a.closed:
			return Output{}, ErrClosed
		}
	}
}

// noMatchingSubscribers is the MQTT 5 PUBACK reason 0x10.
const noMatchingSubscribers = 0x10

// unservedGrace is how long a request acknowledged with 0x10 waits for the
// hub's failed result, which the hub sends at the same instant (a
// variable for tests).
var unservedGrace = 2 * time.Second

// userProperty returns the value of the user property key and whether it
// is present at all.
func userProperty(u paho.UserProperties, key string) (string, bool) {
	for _, p := range u {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// ReadProperty returns the retained value of a property of the Thing
// thingID. Without a value it waits until ctx ends (Options.Timeout when
// ctx has no deadline).
func (a *Agent) ReadProperty(ctx context.Context, thingID, name string) (Value, error) {
	if a.ws != nil {
		v, err := a.wsReadProperty(ctx, thingID, name)
		if err != nil {
			return v, fmt.Errorf("cannot read %s of %s: %w", name, thingID, err)
		}
		return v, nil
	}
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	ch := make(chan Value, 1)
	stop, err := a.watch(ctx, lmos.ThingTopic(thingID, "properties/"+name), true, func(v Value) {
		select {
		case ch <- v:
		default:
		}
	})
	if err != nil {
		return Value{}, fmt.Errorf("cannot read %s of %s: %w", name, thingID, err)
	}
	defer stop()
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return Value{}, fmt.Errorf("no value of %s of %s: %w", name, thingID, ctx.Err())
	case <-a.closed:
		return Value{}, ErrClosed
	}
}

// Observe calls fn with the current value of a property of the Thing
// thingID and every change, until stop is called; the observation survives
// reconnects. fn runs on the agent's receive goroutine: it must return
// quickly and must not wait for other results of this agent (Invoke,
// ReadProperty).
func (a *Agent) Observe(ctx context.Context, thingID, property string, fn func(Value)) (stop func(), err error) {
	if a.ws != nil {
		return a.wsWatch(ctx, "p|"+thingID+"|"+property, fn)
	}
	return a.watch(ctx, lmos.ThingTopic(thingID, "properties/"+property), false, fn)
}

// Subscribe calls fn with every event of the Thing thingID, until stop is
// called; as Observe.
func (a *Agent) Subscribe(ctx context.Context, thingID, event string, fn func(Value)) (stop func(), err error) {
	if a.ws != nil {
		return a.wsWatch(ctx, "e|"+thingID+"|"+event, fn)
	}
	return a.watch(ctx, lmos.ThingTopic(thingID, "events/"+event), false, fn)
}

// watch adds fn as an observer of topic and subscribes to it: always when
// resend (a new SUBSCRIBE delivers the retained message again), else when
// fn is its first observer.
func (a *Agent) watch(ctx context.Context, topic string, resend bool, fn func(Value)) (func(), error) {
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	a.subMu.Lock()
	defer a.subMu.Unlock()
	a.mu.Lock()
	a.nextID++
	id := a.nextID
	first := len(a.watches[topic]) == 0
	if first {
		a.watches[topic] = make(map[uint64]func(Value))
	}
	a.watches[topic][id] = fn
	a.mu.Unlock()
	stop := func() { a.unwatch(topic, id) }
	if first || resend {
		cli, err := a.client(ctx)
		if err == nil {
			err = subscribe(ctx, cli, topic)
		}
		if err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// unwatch removes an observer, and the subscription with the last one.
func (a *Agent) unwatch(topic string, id uint64) {
	a.subMu.Lock()
	defer a.subMu.Unlock()
	a.mu.Lock()
	delete(a.watches[topic], id)
	last := len(a.watches[topic]) == 0
	if last {
		delete(a.watches, topic)
	}
	cli := a.cli
	a.mu.Unlock()
	if last && cli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
		defer cancel()
		if _, err := cli.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{topic}}); err != nil {
			a.log.Debug("cannot unsubscribe", "topic", topic, "err", err)
		}
	}
}
