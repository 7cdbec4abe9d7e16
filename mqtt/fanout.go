package mqtt

import (
	"slices"
	"strings"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The broker delivers QoS 0 publishes itself instead of leaving them to
// mochi. mochi copies the packet for every subscriber, queues it on a
// channel read by the subscriber's own goroutine, encodes it there (its
// property encoder does two map look-ups per property kind) and writes it
// with one system call. Here a publish is encoded once per distinct
// encoding (MQTT 3.1.1 or 5, retain flag; a subscription identifier makes
// a subscriber's own) and the bytes are queued on each subscriber's
// outConn, which writes what has piled up in one writev. With 50
// subscribers this halves the broker's CPU time per delivery
// (docs/PERFORMANCE.md).
//
// Everything mochi does for such a delivery is kept: shared subscriptions
// (one subscriber per group), inline subscriptions (the hub's own), No
// Local, Retain As Published, subscription identifiers, the client's
// Maximum Packet Size, the read half of the ACL, a bounded queue that drops
// QoS 0 messages for a subscriber that falls behind (counted). QoS 1 and 2
// deliveries go the same way into the session and out under the client's
// flow control (qos.go). Wills stay with mochi (its sendLWT delivers them
// through its own writer goroutine per client), but for the delayed will
// of a session a clean start ends (willdelay.go).

// fanTarget is one client a publish is delivered to.
type fanTarget struct {
	cl   *mochi.Client
	conn *outConn
	sub  packets.Subscription
}

var fanTargets = sync.Pool{New: func() any { s := make([]fanTarget, 0, 64); return &s }}

// fanOut retains the publish pk from cl if it says so and delivers it to
// every subscriber, each at the lower of its QoS and the subscription's. It reports false, having delivered nothing, when
// a subscriber is connected on a connection the broker did not wrap: then
// mochi must deliver (and retains again, which replaces the message with
// itself).
//
// It retains before it looks up the subscribers, as mochi does: a
// SUBSCRIBE that the look-up misses reads the retained store after it, so
// the new subscriber gets the message one way or the other.
//
// It is one function (over 80 lines) on purpose: it is the hot path of
// every delivery, one pass over the subscribers that shares the
// per-variant encodings (protocol version × retain flag), the tally and
// the pooled target slice across the loop; split up, those would have to
// be passed around or escape for every subscriber.
func (b *Broker) fanOut(cl *mochi.Client, pk packets.Packet) bool {
	b.messages.Add(1)
	if pk.FixedHeader.Retain && b.server.Options.Capabilities.RetainAvailable != 0 { // [MQTT-3.3.1-5]
		r := b.server.Topics.RetainMessage(pk.Copy(false))
		b.state.OnRetainMessage(cl, pk, r)
	}
	subs := b.subscribers(pk.TopicName) // read only, unless shared (subcache.go)
	if len(subs.Shared) > 0 {
		subs.SelectShared()
		subs.MergeSharedSelected()
	}
	tp := fanTargets.Get().(*[]fanTarget)
	targets := (*tp)[:0]
	defer func() {
		clear(targets)
		*tp = targets[:0]
		fanTargets.Put(tp)
	}()
	for id, sub := range subs.Subscriptions {
		cl, ok := b.server.Clients.Get(id)
		if !ok {
			continue
		}
		var conn *outConn
		if c := cl.Net.Conn; c != nil {
			if conn, ok = c.(*outConn); !ok {
				return false
			}
		}
		targets = append(targets, fanTarget{cl, conn, sub})
	}

	for _, in := range subs.InlineSubscriptions {
		in.Handler(b.inline, in.Subscription, pk)
	}

	open := readableByAll(pk.TopicName) && b.bind.openToAll(pk.TopicName)
	maxQoS := b.server.Options.Capabilities.MaximumQos
	// encoded holds the shared encodings: [MQTT 5][retain].
	var encoded [2][2][]byte
	now := time.Now().Unix()
	n := tally{now: now}
	if !open {
		n.group, _ = lmos.GroupOfTopic(pk.TopicName)
	}
	n.from, _ = cl.Net.Conn.(*outConn)
	if len(targets) > 1 && pk.FixedHeader.Qos > 0 {
		n.share = &qosShare{left: len(targets)}
	}
	sent := uint64(0)
	for _, t := range targets {
		cl, sub := t.cl, t.sub
		if sub.NoLocal && pk.Origin == cl.ID { // [MQTT-3.8.3-3]
			continue
		}
		qos := min(pk.FixedHeader.Qos, sub.Qos, maxQoS)
		online := t.conn != nil && !cl.Closed()
		if !online && qos == 0 {
			continue // an offline session: QoS 0 messages are not kept for it
		}
		// A group channel's subscriber is asked once, where the delivery
		// is queued or stored (groups.go): its filter named this group
		// (the ACL refuses wildcard group levels and broader filters),
		// so membership is all there is to decide.
		if !open && n.group == "" && !b.bind.mayDeliver(cl, pk.TopicName) {
			b.dropped[dropACL].Add(1)
			continue
		}
		v5 := cl.Properties.ProtocolVersion == 5
		// [MQTT-3.3.1-12], [MQTT-3.3.1-13]; MQTT 3.1.1 clears it on live
		// deliveries.
		retain := pk.FixedHeader.Retain && (sub.FwdRetainedFlag || (v5 && sub.RetainAsPublished))
		if qos > 0 {
			var ids []int
			if hasSubscriptionID(sub) {
				ids = subscriptionIDs(sub)
			}
			conn := t.conn
			if !online {
				conn = nil
			}
			b.deliverQoS(cl, conn, &pk, qos, retain, ids, owed, &n)
			sent++
			continue
		}
		var data []byte
		if v5 && hasSubscriptionID(sub) { // [MQTT-3.3.4-3]
			data = appendPublish(nil, &pk, true, retain, 0, 0, subscriptionIDs(sub), now)
		} else {
			e := &encoded[b2i(v5)][b2i(retain)]
			if *e == nil {
				*e = appendPublish(nil, &pk, v5, retain, 0, 0, nil, now)
			}
			data = *e
		}
		kind := qos0
		if !open && isTDResult(pk.TopicName) {
			// A join result (credentials) goes only to the connection
			// that asked and is never refused for a full QoS 0 budget:
			// a Thing whose credential reached nobody could never be
			// joined again.
			kind = owed
		}
		b.queue(&n, cl, t.conn, data, kind)
		sent++
	}
	b.deliveries.Add(sent)
	return true
}

// tally counts what a fan-out queued for mochi's counters.
type tally struct {
	// waitUntil bounds how long one publish waits for room in full
	// sessions, over all its subscribers (qos.go, waitRoom).
	waitUntil time.Time
	// from is the publisher's connection (nil: the hub's own publish),
	// whose held acknowledgements go out before a wait (ackbatch.go).
	from *outConn
	// share is what the QoS 1/2 deliveries of one publish share (nil:
	// nothing, each is copied and encoded on its own).
	share *qosShare
	// now is the Unix time the deliveries are encoded at (0: ask the
	// clock); reading the clock once per publish, not per delivery, is
	// measurable on a VM.
	now int64
	// group is the group whose channel the publish is on ("" for none):
	// membership is checked again where each delivery is queued or
	// stored (groups.go).
	group string
}

// unixNow is t.now, or the clock's time if t has none.
func (t *tally) unixNow() int64 {
	if t.now == 0 {
		return time.Now().Unix()
	}
	return t.now
}

// queue queues the QoS 0 delivery data for cl on conn (kind qos0, or
// retained: a retained message of a SUBSCRIBE), unless it is larger than
// cl's Maximum Packet Size: such a packet is discarded as if delivered
// [MQTT-3.1.2-25]. A QoS 0 delivery the client has no room for is dropped;
// a client that has had no room for the slow-client timeout is
// disconnected. Both are counted.
func (b *Broker) queue(t *tally, cl *mochi.Client, conn *outConn, data []byte, kind queueKind) {
	if max := cl.Properties.Props.MaximumPacketSize; max > 0 && uint32(len(data)) > max {
		b.dropped[dropTooLarge].Add(1)
		return
	}
	var r queueResult
	if t.group != "" {
		r = conn.enqueueMember(data, kind, t.from, b.reg, t.group, thingID(cl))
	} else {
		r = conn.enqueue(data, kind, t.from)
	}
	switch r {
	case revoked:
		b.dropped[dropRevoked].Add(1)
	case queued:
	case full:
		if conn.slowFor(time.Now()) >= b.cfg.SlowClientTimeout {
			b.dropped[dropSlowClient].Add(1)
			b.cutSlow(cl, conn, "queue full")
		} else {
			b.dropped[dropQueueFull].Add(1)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hasSubscriptionID reports whether subscriptionIDs(sub) is not empty,
// without allocating.
func hasSubscriptionID(sub packets.Subscription) bool {
	if sub.Identifier > 0 {
		return true
	}
	for _, id := range sub.Identifiers {
		if id > 0 {
			return true
		}
	}
	return false
}

// subscriptionIDs are the non-zero subscription identifiers of the
// client's matching subscriptions, in ascending order (mochi keeps one per
// filter, 0 when the SUBSCRIBE had none).
func subscriptionIDs(sub packets.Subscription) []int {
	var ids []int
	if sub.Identifier > 0 && len(sub.Identifiers) == 0 {
		ids = append(ids, sub.Identifier)
	}
	for _, id := range sub.Identifiers {
		if id > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// appendPublish appends pk encoded as a PUBLISH (MQTT 5 §3.3, MQTT 3.1.1
// §3.3) at qos with packet identifier id (QoS 1/2) for a client of MQTT 5
// (v5) or earlier. The properties
// forwarded are those of [MQTT-3.3.2]: Payload Format Indicator, the
// Message Expiry Interval left at now, Content Type, Response Topic,
// Correlation Data, the subscription identifiers ids and User Properties,
// in ascending identifier order as mochi writes them. User Properties are
// forwarded whatever the client's Request Problem Information says: that
// flag only concerns CONNACK and DISCONNECT [MQTT-3.1.2-29].
func appendPublish(dst []byte, pk *packets.Packet, v5, retain bool, qos byte, id uint16, ids []int, now int64) []byte {
	p := &pk.Properties
	expiry := int64(p.MessageExpiryInterval)
	if pk.Expiry > 0 {
		expiry = max(pk.Expiry-now, 1) // [MQTT-3.3.2-6]
	}
	responseTopic := p.ResponseTopic
	if strings.ContainsAny(responseTopic, "+#") {
		responseTopic = "" // not a topic name [MQTT-3.3.2-14]
	}
	props := 0
	if v5 {
		if p.PayloadFormatFlag {
			props += 2
		}
		if expiry > 0 {
			props += 5
		}
		if p.ContentType != "" {
			props += 3 + len(p.ContentType)
		}
		if responseTopic != "" {
			props += 3 + len(responseTopic)
		}
		if len(p.CorrelationData) > 0 {
			props += 3 + len(p.CorrelationData)
		}
		for _, id := range ids {
			props += 1 + varIntLen(id)
		}
		for _, u := range p.User {
			props += 5 + len(u.Key) + len(u.Val)
		}
	}
	remaining := 2 + len(pk.TopicName) + len(pk.Payload)
	if qos > 0 {
		remaining += 2
	}
	if v5 {
		remaining += varIntLen(props) + props
	}
	dst = slices.Grow(dst, 1+varIntLen(remaining)+remaining)

	header := byte(packets.Publish<<4) | qos<<1
	if retain {
		header |= 1
	}
	dst = append(dst, header)
	dst = appendVarInt(dst, remaining)
	dst = appendString(dst, pk.TopicName)
	if qos > 0 {
		dst = append(dst, byte(id>>8), byte(id))
	}
	if v5 {
		dst = appendVarInt(dst, props)
		if p.PayloadFormatFlag {
			dst = append(dst, packets.PropPayloadFormat, p.PayloadFormat)
		}
		if expiry > 0 {
			e := uint32(expiry)
			dst = append(dst, packets.PropMessageExpiryInterval, byte(e>>24), byte(e>>16), byte(e>>8), byte(e))
		}
		if p.ContentType != "" {
			dst = appendString(append(dst, packets.PropContentType), p.ContentType)
		}
		if responseTopic != "" {
			dst = appendString(append(dst, packets.PropResponseTopic), responseTopic)
		}
		if len(p.CorrelationData) > 0 {
			dst = appendString(append(dst, packets.PropCorrelationData), string(p.CorrelationData))
		}
		for _, id := range ids {
			dst = appendVarInt(append(dst, packets.PropSubscriptionIdentifier), id)
		}
		for _, u := range p.User {
			dst = appendString(appendString(append(dst, packets.PropUser), u.Key), u.Val)
		}
	}
	return append(dst, pk.Payload...)
}

// appendString appends s with its two-byte length; mochi's decoder has
// already refused longer strings.
func appendString(dst []byte, s string) []byte {
	return append(append(dst, byte(len(s)>>8), byte(len(s))), s...)
}

// appendVarInt appends n as an MQTT Variable Byte Integer (§1.5.5).
func appendVarInt(dst []byte, n int) []byte {
	for {
		b := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			b |= 0x80
		}
		dst = append(dst, b)
		if n == 0 {
			return dst
		}
	}
}

func varIntLen(n int) int {
	l := 1
	for n >= 0x80 {
		n >>= 7
		l++
	}
	return l
}
