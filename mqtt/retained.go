package mqtt

import (
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Retained messages on SUBSCRIBE are sent by the hub, not mochi.
//
// mochi sends them through its own per-client queue, which drops what does
// not fit in 128 packets, and which the hub's live deliveries do not wait
// for: with a subscriber that reads slowly, a newer live value could reach
// it before the retained one and leave it with the old value. So the hub
// sends every filter's retained messages itself and tells mochi not to
// (Retain Handling 2 on the stored subscription). OnSubscribe holds the
// client's live deliveries back, OnSubscribed queues the retained
// messages, and once mochi has processed the SUBSCRIBE both go out: the
// SUBACK first (as mochi and mosquitto send it), then the retained
// messages, then the live deliveries held. Retained messages are never
// dropped for lack of room: QoS 0 ones are queued beyond the client's
// budget, QoS 1/2 ones are stored in the session beyond its limit (the
// subscriber's own goroutine runs this and cannot wait for its
// acknowledgements) and go out under its flow control, ahead of any live
// QoS 1/2 delivery.

// OnSubscribe plans which filters' retained messages the hub sends and
// holds the client's live deliveries until the SUBSCRIBE is processed.
func (h *binding) OnSubscribe(cl *mochi.Client, pk packets.Packet) packets.Packet {
	conn, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return pk
	}
	plan := make([]bool, len(pk.Filters))
	planned := false
	for i := range pk.Filters {
		f := &pk.Filters[i]
		if f.RetainHandling == 2 || mochi.IsSharedFilter(f.Filter) {
			continue // nothing to send [MQTT-3.3.1-11], §4.8.2
		}
		if _, existed := cl.State.Subscriptions.Get(f.Filter); existed && f.RetainHandling == 1 {
			continue // [MQTT-3.3.1-10]
		}
		plan[i], planned = true, true
		f.RetainHandling = 2
	}
	if planned {
		conn.hold(plan)
	}
	return pk
}

// OnSubscribed queues the planned retained messages of the filters
// granted, to go out after the SUBACK. The subscription is in the topic
// index by now, so a publish retained after the read below is delivered
// live, and held until these are out.
func (h *binding) OnSubscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	h.b.subs.changed() // first: before the retained store is read (subcache.go)
	h.recheckGroupFilters(cl, pk, codes)
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
	maxQoS := h.b.server.Options.Capabilities.MaximumQos
	var t tally
	for i, sub := range pk.Filters {
		if !plan[i] || codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		var ids []int
		if v5 {
			ids = subscriptionIDs(sub) // mochi leaves them out here
		}
		granted := min(sub.Qos, codes[i], maxQoS)
		for _, m := range h.b.server.Topics.Messages(sub.Filter) {
			// A retained will still carries its properties in willKey:
			// these deliveries do not pass the encode hook.
			restoreWillProperties(&m)
			if !h.mayDeliver(cl, m.TopicName) {
				h.b.dropped[dropACL].Add(1)
				continue
			}
			// [MQTT-3.3.1-9]: the retain flag is set.
			if qos := min(m.FixedHeader.Qos, granted); qos > 0 {
				h.b.deliverQoS(cl, conn, &m, qos, true, ids, retained, &t)
			} else {
				h.b.queue(&t, cl, conn, appendPublish(nil, &m, v5, true, 0, 0, ids, now), retained)
			}
		}
		// The descriptions on …/td are not in the retained store.
		h.b.queueRegistryTDs(h, cl, conn, sub.Filter, granted, v5, ids, now, &t)
		// Nor are membership credentials (credentials.go).
		h.b.queueCredentials(h, cl, conn, sub.Filter, granted, v5, ids, now, &t)
	}
}

// OnPacketProcessed releases the deliveries held since OnSubscribe, after
// mochi has processed the SUBSCRIBE (and written its SUBACK), and writes
// the QoS 1/2 deliveries an acknowledgement makes room for.
func (h *binding) OnPacketProcessed(cl *mochi.Client, pk packets.Packet, _ error) {
	switch pk.FixedHeader.Type {
	case packets.Subscribe:
		endSwap(cl) // resend.go
		if conn, ok := cl.Net.Conn.(*outConn); ok {
			h.b.release(cl, conn)
		}
	case packets.Unsubscribe:
		endSwap(cl)
	case packets.Puback, packets.Pubrec, packets.Pubcomp:
		h.b.acked(cl, pk)
	}
}

// OnSessionEstablished starts the client's QoS 1/2 flow control (qos.go).
// The client is in mochi's table now: the next connection with its id
// may go ahead (sameclientid.go).
func (h *binding) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	h.b.subs.changed() // a resumed session's subscriptions (subcache.go)
	if c, ok := cl.Net.Conn.(*outConn); ok {
		h.b.gates.leave(c)
	}
	h.b.wills.remove(cl.ID) // mochi cancelled it [MQTT-3.1.3-9]
	h.b.startSession(cl)
	if self(cl) != "" {
		h.b.revokeStaleOf(cl) // groups.go
	}
}

// OnUnsubscribed follows every removal of subscriptions from mochi's topic
// index (subcache.go).
func (h *binding) OnUnsubscribed(*mochi.Client, packets.Packet) {
	h.b.subs.changed()
}
