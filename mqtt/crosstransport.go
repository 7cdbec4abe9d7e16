package mqtt

import (
	"bytes"
	"context"
	"net"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The broker takes MQTT-over-WebSocket connections and carries what
// WebSocket agents emit (PROTOCOL §5).
var _ hub.Publisher = (*Broker)(nil)

// ServeConn serves an MQTT client on a connection accepted elsewhere (the
// HTTP adapter's /mqtt), with the same authentication and ACL as the TCP
// listener. It returns when the client is gone. The broker tracks these
// connections and closes them on shutdown (see connSet).
func (b *Broker) ServeConn(c net.Conn) error {
	if err := b.Err(); err != nil {
		c.Close()
		return err
	}
	if !b.wsConns.add(c) {
		return hub.Errorf(hub.EUNAVAILABLE, "the mqtt broker is closed")
	}
	defer b.wsConns.remove(c)
	oc := newOutConn(c, b.cfg.MaxQueuedBytes, 3*b.cfg.SlowClientTimeout, b.stalled)
	b.awaitConnect(oc)
	return b.establish(oc, "ws", b.server.EstablishConnection)
}

// PublishEvent publishes an event of a Thing on …/events/{name}.
func (b *Broker) PublishEvent(thingID, name string, data []byte, contentType string) error {
	if err := b.Err(); err != nil {
		return err
	}
	return b.publish(lmos.ThingTopic(thingID, "events/"+name), data, false, 0, lmos.MediaOf(contentType))
}

// PublishProperty publishes a property value, retained, on
// …/properties/{name}: readers and observers get it as from an MQTT agent.
func (b *Broker) PublishProperty(thingID, name string, value []byte, contentType string) error {
	if err := b.Err(); err != nil {
		return err
	}
	return b.publish(lmos.ThingTopic(thingID, "properties/"+name), value, true, 0, lmos.MediaOf(contentType))
}

// PublishPresence publishes a Thing's retained status (online, offline),
// where MQTT consumers read presence. The hub's own publish does not set
// presence via mqtt (OnPublish skips the inline client).
func (b *Broker) PublishPresence(thingID, status string) error {
	if err := b.Err(); err != nil {
		return err
	}
	return b.publish(lmos.ThingTopic(thingID, "status"), []byte(status), true, 1, "")
}

// maxForwards bounds the interactions MQTT consumers have in flight with
// Things reached over other transports; beyond it requests are refused.
const maxForwards = 256

// forwardTarget reports whether a request on topic t is for a Thing that
// another transport reaches (a WebSocket agent, a Thing of a paired hub): the hub then carries it
// through the Router rather than leaving it to MQTT subscribers, of which
// there are none.
func (b *Broker) forwardTarget(t thingTopic) (string, bool) {
	if b.cfg.Forward == nil || (t.kind != kindAction && t.kind != kindPropertySet) {
		return "", false
	}
	id, ok := idOf(t.tid)
	if !ok {
		return "", false
	}
	th, err := b.reg.Get(id)
	if err != nil {
		return "", false
	}
	via := th.Meta.Presence.Via
	if via == "" {
		via = th.Meta.Origin.Source
	}
	// A Thing mirrored from a paired hub is reached through that hub
	// (the federation's forwarder).
	return id, via == hub.SourceWS || via == hub.SourceRemote
}

// forward delivers an MQTT consumer's invocation or write to a Thing that
// another transport reaches, and publishes each result to the request's
// Response Topic with its Correlation Data and lmos-status (PROTOCOL
// §4.3), as an MQTT agent would. Without a Response Topic (MQTT 3.1.1) it
// is fire-and-forget.
func (b *Broker) forward(id string, t thingTopic, pk packets.Packet) bool {
	select {
	case b.forwards <- struct{}{}:
	default:
		return false
	}
	op := hub.OpInvokeAction
	if t.kind == kindPropertySet {
		op = hub.OpWriteProperty
	}
	ct := lmos.MediaOf(pk.Properties.ContentType)
	in := hub.Interaction{ThingID: id, Op: op, Name: t.name, Input: bytes.Clone(pk.Payload), ContentType: ct, Accept: ct, Door: hub.SourceMQTT}
	in.Traceparent, _ = userProperty(pk, "traceparent")
	in.Tracestate, _ = userProperty(pk, "tracestate")
	replyTo, corr := pk.Properties.ResponseTopic, pk.Properties.CorrelationData
	b.workers.Go(func() {
		defer func() { <-b.forwards }()
		ctx, cancel := context.WithTimeout(b.ctx, b.cfg.ForwardTimeout)
		defer cancel()
		go func() { // a stopping broker ends the request at once
			select {
			case <-b.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		send := func(status string, payload []byte) {
			if replyTo != "" {
				b.publishResult(replyTo, corr, ct, status, payload)
			}
		}
		problem := func(p lmos.Problem) []byte { return problemPayload(p, ct) }
		err := b.cfg.Forward.Deliver(ctx, in, func(res hub.Result) error {
			if res.Status == hub.StatusFailed {
				send(res.Status, problem(hub.ThingProblem(res.Problem)))
				return nil
			}
			send(res.Status, res.Data)
			return nil
		})
		if err != nil {
			b.log.Debug("forwarded request failed", "id", id, "name", t.name, "err", err)
			send(hub.StatusFailed, problem(hub.ProblemOf(err)))
		}
	})
	return true
}

// defaultForwardTimeout bounds a forwarded request, as the HTTP proxy's.
const defaultForwardTimeout = 30 * time.Second
