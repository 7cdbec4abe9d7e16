package mqtt

import (
	"strings"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The retained descriptions on lmos/v1/things/{tid}/td are served from the
// registry, not stored in the broker (PROTOCOL §10): a stored copy of every
// joined document would be a second copy on disk and, since mochi loads
// every retained message at start, wholly in memory, where the registry
// holds only summaries. A subscriber gets, after its SUBACK, the registry's
// current document of every Thing joined over MQTT (it holds a credential)
// whose …/td topic its filter matches, read one at a time as it is queued.

// tdContentType is the Content Type of a description on …/td (MQTT 5).
const tdContentType = lmos.MediaTD

// queueRegistryTDs queues, as retained messages, the descriptions of the
// Things joined over MQTT whose …/td topic filter matches. An exact Thing
// level in the filter looks that one Thing up; a wildcard there visits the
// registry's summaries.
func (b *Broker) queueRegistryTDs(h *binding, cl *mochi.Client, conn *outConn, filter string, granted byte, v5 bool, ids []int, now int64, t *tally) {
	if mochi.IsSharedFilter(filter) {
		return // no retained messages on a shared subscription
	}
	tid, exact, ok := tdFilterThing(filter)
	if !ok {
		return
	}
	send := func(id string) {
		topic := lmos.ThingTopic(id, "td")
		if !topicMatches(filter, topic) {
			return
		}
		if has, err := b.adm.HasCredential(id); !has {
			if err != nil {
				b.log.Warn("cannot read mqtt credential", "id", id, "err", err)
			}
			return // not joined over MQTT
		}
		if !h.mayDeliver(cl, topic) {
			b.dropped[dropACL].Add(1)
			return
		}
		raw, err := b.reg.Raw(id)
		if err != nil {
			if hub.ErrorCode(err) != hub.ENOTFOUND {
				b.log.Warn("cannot read a description to send retained", "id", id, "err", err)
			}
			return
		}
		b.queueRetainedFromHub(cl, conn, topic, raw, tdContentType, granted, v5, ids, now, t)
	}
	if exact {
		if id, ok := idOf(tid); ok {
			send(id)
		}
		return
	}
	things, _ := b.reg.List(0, 0) // summaries, shared: no document is read here
	for _, th := range things {
		if cl.Closed() {
			return
		}
		send(th.ID)
	}
}

// tdFilterThing reports whether filter may match a topic
// lmos/v1/things/{tid}/td and, when its Thing level is not a wildcard, that
// level (exact).
func tdFilterThing(filter string) (tid string, exact, ok bool) {
	levels := strings.Split(filter, "/")
	prefix := strings.Split(strings.TrimSuffix(lmos.ThingsPrefix, "/"), "/")
	for i, p := range prefix {
		if i >= len(levels) {
			return "", false, false
		}
		switch levels[i] {
		case "#":
			return "", false, true
		case "+", p:
		default:
			return "", false, false
		}
	}
	if len(levels) <= len(prefix) {
		return "", false, false
	}
	switch l := levels[len(prefix)]; l {
	case "#":
		return "", false, true
	case "+":
		// The match does not depend on the Thing level: try any.
		return "", false, topicMatches(filter, lmos.ThingsPrefix+"x/td")
	default:
		return l, true, true
	}
}

// topicMatches reports whether the topic name matches the filter (MQTT 5
// §4.7; topic names here never start with $).
func topicMatches(filter, topic string) bool {
	for {
		f, fRest, fMore := strings.Cut(filter, "/")
		if f == "#" {
			return true // also the parent level [MQTT-4.7.1-2]
		}
		n, nRest, nMore := strings.Cut(topic, "/")
		if f != "+" && f != n {
			return false
		}
		if !fMore || !nMore {
			return !fMore && !nMore || (!nMore && fRest == "#")
		}
		filter, topic = fRest, nRest
	}
}

// queueRetainedFromHub queues payload on topic for cl as a retained message
// the hub holds itself (a registry description, a membership credential):
// sent after the SUBACK with the retain flag set [MQTT-3.3.1-9], at the
// subscription's QoS up to 1.
func (b *Broker) queueRetainedFromHub(cl *mochi.Client, conn *outConn, topic string, payload []byte, contentType string, granted byte, v5 bool, ids []int, now int64, t *tally) {
	m := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName:   topic,
		Payload:     payload,
		Origin:      mochi.InlineClientId,
		Created:     now,
	}
	m.Properties.ContentType = contentType
	if qos := min(1, granted); qos > 0 {
		b.deliverQoS(cl, conn, &m, qos, true, ids, retained, t)
	} else {
		b.queue(t, cl, conn, appendPublish(nil, &m, v5, true, 0, 0, ids, now), retained)
	}
}
