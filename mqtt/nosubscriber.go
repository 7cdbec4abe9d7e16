package mqtt

import (
	"github.com/eclipse-lmos/lmos-hub/lmos"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// answerUnserved answers a request (an invocation or a property write) that no
// subscription matches, so that the consumer learns at once what the HTTP
// proxy would say (PROTOCOL §10, "no subscriber"): a failed result with
// the problem on its Response Topic, and for a QoS 1 publish of an MQTT 5
// client PUBACK 0x10 No matching subscribers. The request itself is
// dropped: mochi delivers a publish to the subscriptions present when it
// processes it, so this one would reach nobody; dropping it also keeps an
// agent that subscribes a moment later from running a request whose
// consumer was already told it failed.
func (b *Broker) answerUnserved(cl *mochi.Client, t thingTopic, pk packets.Packet) (packets.Packet, error) {
	b.unserved.Add(1)
	if replyTo := pk.Properties.ResponseTopic; replyTo != "" {
		ct := lmos.MediaOf(pk.Properties.ContentType)
		b.publishResult(replyTo, pk.Properties.CorrelationData, ct, hub.StatusFailed, problemPayload(hub.ProblemOf(b.whyUnserved(t)), ct))
	}
	if pk.FixedHeader.Qos == 1 && cl.Properties.ProtocolVersion == 5 {
		return pk, packets.CodeNoMatchingSubscribers
	}
	// MQTT 3.1.1 acknowledgements carry no reason; a QoS 2 flow keeps its
	// plain PUBREC (mochi answers a hook's code with a PUBACK only).
	return pk, packets.CodeSuccessIgnore
}

// whyUnserved says why nobody serves the request on t: the Thing or its
// affordance is unknown (not found), or the Thing is known but no agent
// of it is subscribed (offline, or not connected over MQTT).
func (b *Broker) whyUnserved(t thingTopic) error {
	id, ok := idOf(t.tid)
	if !ok {
		return hub.Errorf(hub.ENOTFOUND, "no Thing has the topic key %q", lmos.Truncate(t.tid, 512))
	}
	th, err := b.reg.Get(id)
	if err != nil {
		if hub.ErrorCode(err) == hub.ENOTFOUND {
			return err
		}
		return hub.Errorf(hub.ENOTFOUND, "no Thing with id %q", id)
	}
	member, what := "actions", "action"
	if t.kind == kindPropertySet {
		member, what = "properties", "property"
	}
	if !th.Summary.HasAffordance(member, t.name) {
		return hub.Errorf(hub.ENOTFOUND, "Thing %q has no %s %q", id, what, t.name)
	}
	if th.Meta.Presence.Status == hub.PresenceOffline {
		return hub.Errorf(hub.EUNAVAILABLE, "Thing %q is offline", id)
	}
	return hub.Errorf(hub.EUNAVAILABLE, "no agent of Thing %q is connected to serve %s %q", id, what, t.name)
}

// publishResult publishes one result of a request the hub answers itself
// (forwarded to another transport, or unserved) to the request's Response
// Topic, as an MQTT agent would (PROTOCOL §4.3): its Correlation Data,
// lmos-status (and user, more user properties) and the request's content
// type.
func (b *Broker) publishResult(replyTo string, corr []byte, ct, status string, payload []byte, user ...packets.UserProperty) {
	rp := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   replyTo,
		Payload:     payload,
		PacketID:    1,
	}
	rp.ProtocolVersion = 5
	rp.Properties.ContentType = ct
	rp.Properties.CorrelationData = corr
	rp.Properties.User = append([]packets.UserProperty{{Key: statusProperty, Val: status}}, user...)
	if err := b.server.InjectPacket(b.inline, rp); err != nil {
		b.log.Debug("cannot publish a result", "topic", replyTo, "err", err)
	}
}

// problemPayload encodes a problem object in ct (JSON or CBOR).
func problemPayload(p lmos.Problem, ct string) []byte {
	v := map[string]any{"type": p.Type, "title": p.Title, "status": p.Status, "detail": p.Detail}
	out, _ := hub.EncodeValue(v, ct)
	return out
}
