package mqtt

import (
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"golang.org/x/time/rate"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// reasonJoinResponseTopic counts joins refused for their Response Topic
// (lmos_mqtt_refused_total).
const reasonJoinResponseTopic = "mqtt.joinResponseTopic"

// A join's result goes to …/td/result on the publishing connection alone
// (PROTOCOL §4.4), whatever Response Topic the join names. A client that
// is not the agent library (mosquitto_rr, a request/response helper of
// another library) waits on its Response Topic: the join's own td/result
// is accepted as one, since the result goes there; any other outside the
// reply inboxes is refused with a reason the client sees.

// joinResponseTopicOK reports whether a join of tid may name rt ("" for
// none) as its Response Topic: none, a reply inbox (the general rule,
// replyTopicOK), or the join's own td/result topic.
func joinResponseTopicOK(tid, rt string) bool {
	return rt == "" || replyTopicOK(rt) || rt == lmos.ThingsPrefix+tid+"/td/result"
}

// joinRefusalLog keeps a client that repeats a refused join from flooding
// the log: the first few, then one a second.
var joinRefusalLog = rate.Sometimes{First: 5, Interval: time.Second}

// refuseJoinResponseTopic refuses a join whose Response Topic is neither a
// reply inbox nor its own td/result. QoS 1: PUBACK 0x83 (Implementation
// specific error: "the PUBLISH is valid but the receiver is not willing to
// accept it", MQTT 5 §3.4.2.1) with a Reason String saying where the result
// comes; 0x87 would say the client lacks a right, 0x90 that the Topic Name
// is wrong, and neither is so. QoS 0 has no acknowledgement: the join is
// dropped and logged (a DISCONNECT would end every other exchange of the
// connection for one bad property); QoS 2 likewise (mochi answers a hook's
// refusal only on PUBACK).
func (h *binding) refuseJoinResponseTopic(cl *mochi.Client, tid string, pk packets.Packet) (packets.Packet, error) {
	h.b.countRefusalReason(reasonJoinResponseTopic)
	joinRefusalLog.Do(func() {
		h.b.log.Info("join refused: its response topic is not where join results go", "client", cl.ID, "thing", tid,
			"response_topic", pk.Properties.ResponseTopic, "qos", pk.FixedHeader.Qos)
	})
	if pk.FixedHeader.Qos != 1 || pk.ProtocolVersion != 5 {
		return pk, packets.CodeSuccessIgnore
	}
	// Written here rather than returned as mochi's error: mochi would log
	// the whole packet at Error for a client's mistake.
	ack := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Puback},
		PacketID:    pk.PacketID,
		ReasonCode:  packets.ErrImplementationSpecificError.Code,
		Properties:  packets.Properties{ReasonString: joinResponseTopicReason(tid)},
	}
	if err := cl.WritePacket(ack); err != nil {
		h.b.log.Debug("cannot refuse a join", "client", cl.ID, "err", err)
	}
	return pk, errRejectPacket
}

// joinResponseTopicReason is the PUBACK's Reason String.
func joinResponseTopicReason(tid string) string {
	return "join refused: its result is published on " + lmos.ThingsPrefix + tid +
		"/td/result to this connection only; subscribe to that topic on this connection and set it as the Response Topic, or none (mosquitto_rr -e " +
		lmos.ThingsPrefix + tid + "/td/result)"
}

// isJoinResultOf reports whether rt is the td/result topic of the join
// published on topic (joinResponseTopicOK has let it through).
func isJoinResultOf(topic, rt string) bool {
	t, ok := parseThingTopic(topic)
	return ok && t.kind == kindTD && rt == lmos.ThingsPrefix+t.tid+"/td/result"
}
