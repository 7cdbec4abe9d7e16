package mqtt

import (
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Retained messages on SUBSCRIBE go through the fan-out's queue too.
//
// mochi sends them through its own per-client queue, which the fan-out's
// live QoS 0 deliveries do not wait for: with a subscriber that reads
// slowly, a newer live value could reach it before the retained one and
// leave it with the old value. So for each filter whose retained messages
// all go out at QoS 0 (a QoS 0 subscription, or only QoS 0 messages
// retained under it) the hub sends them itself and tells mochi not to
// (Retain Handling 2 on the stored subscription). OnSubscribe holds the
// client's live deliveries back, OnSubscribed queues the retained
// messages, and once mochi has processed the SUBSCRIBE both go out: the
// SUBACK first (as mochi and mosquitto send it), then the retained
// messages, then the live deliveries held. Filters with QoS 1/2 retained
// messages for a QoS 1/2 subscription stay with mochi, whose in-flight
// state they need; their live updates at QoS 1/2 go through mochi's queue
// as well.

// OnSubscribe plans which filters' retained messages the hub sends and
// holds the client's live deliveries until the SUBSCRIBE is processed.
func (h *binding) OnSubscribe(cl *mochi.Client, pk packets.Packet) packets.Packet {
	conn, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return pk
	}
	plan := make([]bool, len(pk.Filters))
	planned := false
	maxQoS := h.b.server.Options.Capabilities.MaximumQos
	for i := range pk.Filters {
		f := &pk.Filters[i]
		if f.RetainHandling == 2 || mochi.IsSharedFilter(f.Filter) {
			continue // nothing to send [MQTT-3.3.1-11], §4.8.2
		}
		if _, existed := cl.State.Subscriptions.Get(f.Filter); existed && f.RetainHandling == 1 {
			continue // [MQTT-3.3.1-10]
		}
		if min(f.Qos, maxQoS) > 0 && !allQoS0(h.b.server.Topics.Messages(f.Filter)) {
			continue // mochi's
		}
		plan[i], planned = true, true
		f.RetainHandling = 2
	}
	if planned {
		conn.hold(plan)
	}
	return pk
}

func allQoS0(pks []packets.Packet) bool {
	for _, pk := range pks {
		if pk.FixedHeader.Qos > 0 {
			return false
		}
	}
	return true
}

// OnSubscribed queues the planned retained messages of the filters
// granted, to go out after the SUBACK. The subscription is in the topic
// index by now, so a publish retained after the read below is delivered
// live, and held until these are out.
func (h *binding) OnSubscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	conn, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return
	}
	plan := conn.takePlan()
	if len(plan) != len(pk.Filters) || len(codes) != len(pk.Filters) { // none planned
		return
	}
	now := time.Now().Unix()
	v5 := cl.Properties.ProtocolVersion == 5
	var t tally
	for i, sub := range pk.Filters {
		if !plan[i] || codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		var ids []int
		if v5 {
			ids = subscriptionIDs(sub) // mochi leaves them out here
		}
		for _, m := range h.b.server.Topics.Messages(sub.Filter) {
			// A QoS 1/2 message retained since OnSubscribe looked goes out
			// at QoS 0 too: the hub has told mochi not to send it.
			if h.OnACLCheck(cl, m.TopicName, false) {
				t.queue(cl, conn, appendPublish(nil, &m, v5, true, ids, now), true) // [MQTT-3.3.1-9]
			}
		}
	}
	h.b.count(t)
}

// OnPacketProcessed releases the deliveries held since OnSubscribe, after
// mochi has processed the SUBSCRIBE (and written its SUBACK).
func (h *binding) OnPacketProcessed(cl *mochi.Client, pk packets.Packet, _ error) {
	if pk.FixedHeader.Type != packets.Subscribe {
		return
	}
	if conn, ok := cl.Net.Conn.(*outConn); ok {
		conn.release()
	}
}
