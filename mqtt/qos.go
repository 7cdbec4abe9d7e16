package mqtt

import (
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// The broker delivers QoS 1 and 2 messages itself too, because mochi loses
// them: it drops a delivery when the client's 128-slot write channel is
// full, and once a client's Receive Maximum is used up it parks further
// messages and releases one per packet it reads, deleting the released one
// from the session, so the quota never comes back and delivery stalls
// (PROTOCOL §10, "MQTT delivery").
//
// Here every QoS 1/2 delivery is first stored in the session (mochi's
// Inflight, which the persistence hook writes through and resend.go resends
// on reconnect), then written at once if the client has fewer than its
// Receive Maximum unacknowledged on this connection, or else queued on the
// connection and written when an acknowledgement frees a slot. The queue
// keeps the packet, not only its identifier: mochi keeps the identifiers
// of both directions in one map, and deletes a stored delivery when the
// client publishes with the same identifier (server.go, processPublish);
// such a delivery is stored again when it is written. A
// session stores at most maxInflight messages: a publisher whose message
// would exceed that waits for the subscriber to acknowledge while it keeps
// acknowledging (waitRoom), else the subscriber is disconnected (counted). An
// offline session that is full loses the message (counted).
//
// mochi's own send quota is switched off (ResetSendQuota(0)), so it never
// parks; what it still delivers itself (wills) goes out at once.

// startSession sets up flow control for a connected client: its window,
// and the QoS 1/2 messages its session holds from an earlier connection,
// resent through the window (resend.go).
func (b *Broker) startSession(cl *mochi.Client) {
	cl.State.Inflight.ResetSendQuota(0)
	conn, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return
	}
	window := maxInflight
	if cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.ReceiveMaximum > 0 {
		window = min(int(cl.Properties.Props.ReceiveMaximum), maxInflight)
	}
	b.resend(cl, conn, window)
}

func (c *outConn) markLocked(id uint16) {
	if c.unacked == nil {
		c.unacked = make(map[uint16]struct{})
	}
	c.unacked[id] = struct{}{}
}

// wakeLocked wakes publishers waiting for room in the session.
func (c *outConn) wakeLocked() {
	if c.room != nil {
		close(c.room)
		c.room = nil
	}
}

// roomSignal returns a channel closed at the next acknowledgement, when
// the client last acknowledged something (or connected), and whether the
// connection is dead (nothing to wait for).
func (c *outConn) roomSignal() (room <-chan struct{}, lastAck time.Time, dead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil, c.lastAck, true
	}
	if c.room == nil {
		c.room = make(chan struct{})
	}
	return c.room, c.lastAck, false
}

// deliverQoS stores the QoS 1/2 delivery of pk to cl (conn nil: offline)
// in its session and sends it when the client's window allows. retain and
// ids are the delivery's retain flag and subscription identifiers.
//
// A live delivery (kind owed) to a connected client whose session is full
// waits for room, unless the client published pk itself (its
// acknowledgements are read by the goroutine running this) or the hub did
// (its own publishes must not wait on a client): then the session may
// hold twice the limit before the client is cut off. A
// retained message of a SUBSCRIBE (kind retained) is processed on the
// subscriber's own goroutine too, and is stored beyond the limit: the
// retained store bounds it.
//
// It stays one function (over 80 lines) on purpose: every QoS 1/2
// delivery runs it, and its steps (room in the session, a packet
// identifier, the stored copy, its encoding, the send under the window)
// share that copy and the tally; split, they would be passed around or
// escape for every delivery, as fanOut's would.
func (b *Broker) deliverQoS(cl *mochi.Client, conn *outConn, pk *packets.Packet, qos byte, retain bool, ids []int, kind queueKind, t *tally) {
	if kind == retained && conn.retainedPending(cl, pk.TopicName) {
		// A SUBSCRIBE repeated before the client acknowledged what the
		// last one sent: one stored copy per retained topic, so a client
		// that subscribes again and again without reading stores no more.
		return
	}
	if n := cl.State.Inflight.Len(); kind != retained && n >= maxInflight {
		online := conn != nil && !cl.Closed()
		switch {
		case !online:
			b.dropped[dropSessionFull].Add(1)
			return
		case cl.ID == pk.Origin || pk.Origin == mochi.InlineClientId:
			// Its own publish: waiting would be on its own goroutine. The
			// hub's: its join workers, presence changes and proxy must not
			// stall behind one subscriber that does not read.
			if n >= 2*maxInflight {
				b.cutSlow(cl, conn, "own messages unacknowledged")
			}
		case b.waitRoom(cl, conn, t):
			if cur := b.successor(cl); cur != cl {
				if cur.Properties.Clean {
					// Taken over by a clean start (an anonymous client's
					// always is): the session this was owed to has ended,
					// and the new one never subscribed.
					return
				}
				// Taken over while this waited: the session lives on there.
				cl = cur
				conn, _ = cur.Net.Conn.(*outConn)
			}
			if cl.State.Inflight.Len() >= maxInflight && (conn == nil || cl.Closed()) { // gone offline meanwhile
				b.dropped[dropSessionFull].Add(1)
				return
			}
		}
		// Cut off for slowness: the message stays in the session, which
		// may outlive the connection.
	}
	id, err := cl.NextPacketID()
	if err != nil { // 65,535 messages in the session
		b.dropped[dropSessionFull].Add(1)
		return
	}
	var out packets.Packet
	if t.share != nil && t.share.left > 1 {
		out = t.share.packet(pk)
	} else if pk.Origin == mochi.InlineClientId {
		out = pk.Copy(false) // the hub's own: its caller's memory
	} else {
		// One session gets a client's publish: it keeps pk's own bytes. mochi decoded
		// them into memory of this packet alone (ReadPacket), the retained
		// store has its own copy (fanOut), and nothing writes to a stored
		// delivery's payload or properties, so a copy would only be
		// garbage (qosShare shares one copy among several sessions the
		// same way).
		out = *pk
	}
	out.FixedHeader.Qos = qos
	out.FixedHeader.Retain = retain
	out.FixedHeader.Dup = false
	out.PacketID = uint16(id)
	out.Properties.SubscriptionIdentifier = ids
	out.Properties.TopicAlias, out.Properties.TopicAliasFlag = 0, false
	if out.Created == 0 {
		out.Created = time.Now().Unix()
	}
	if cl.State.Inflight.Set(out) {
		b.state.OnQosPublish(cl, out, out.Created, 0)
	}
	if kind == retained {
		conn.noteRetained(cl, out.TopicName, out.PacketID)
	}
	if t.group != "" && !b.isMember(cl, t.group) {
		// Removed since fanOut looked: stored after revokeGroup purged
		// the session, so dropped here (groups.go).
		b.dropStored(cl, out)
		b.dropped[dropRevoked].Add(1)
		return
	}
	if conn == nil || cl.Closed() {
		return // the session keeps it; mochi resends it on reconnect
	}
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if t.group != "" && !b.isMember(cl, t.group) {
		// Removed, and the purge of the connection (under conn.mu) is
		// done: this one must not be written after it.
		b.dropStored(cl, out)
		b.dropped[dropRevoked].Add(1)
		return
	}
	if h := conn.sub; h != nil && kind != retained {
		// A SUBSCRIBE is storing its retained messages: a live delivery
		// goes behind them all (release), as a live QoS 0 one does.
		h.heldQoS = append(h.heldQoS, out)
		return
	}
	if len(conn.waiting) > 0 || conn.window == 0 || len(conn.unacked) >= conn.window {
		// No window yet: the session is starting, and what it stored
		// before goes out first (startSession).
		conn.waiting = append(conn.waiting, out)
		return
	}
	b.sendLocked(cl, conn, &out, kind, t)
}

// sendLocked writes the stored delivery out to conn (conn.mu held). A
// packet larger than the client's Maximum Packet Size is discarded as if
// delivered [MQTT-3.1.2-25], and leaves the session.
func (b *Broker) sendLocked(cl *mochi.Client, conn *outConn, out *packets.Packet, kind queueKind, t *tally) {
	v5 := cl.Properties.ProtocolVersion == 5
	var ids []int
	if v5 {
		ids = out.Properties.SubscriptionIdentifier
	}
	var data []byte
	if now := t.unixNow(); t.share != nil && len(ids) == 0 && !out.FixedHeader.Dup {
		data = t.share.encode(out, v5, now)
	} else {
		data = appendPublish(nil, out, v5, out.FixedHeader.Retain, out.FixedHeader.Qos, out.PacketID, ids, now)
		if out.FixedHeader.Dup {
			data[0] |= 0x08 // a resend (resend.go) [MQTT-3.3.1-1]
		}
	}
	if m := cl.Properties.Props.MaximumPacketSize; m > 0 && uint32(len(data)) > m {
		b.dropped[dropTooLarge].Add(1)
		if cl.State.Inflight.Delete(out.PacketID) {
			b.state.OnQosDropped(cl, *out)
		}
		return
	}
	if conn.enqueueLocked(data, kind, time.Time{}, t.from) != queued {
		return // dead: the session keeps it
	}
	conn.markLocked(out.PacketID)
}

// waitRoom waits until cl's session has room for one more message, and
// reports false when it cut cl off instead. It waits only while cl keeps
// acknowledging: a gap of Config.AckGrace without an acknowledgement (or
// since it connected) cuts it off at once, so a client that stopped
// reading never holds a publisher long, however often it comes back. One
// publish waits at most Config.SlowClientTimeout over all its subscribers
// (t.waitUntil); a full subscriber it meets after that is cut off.
func (b *Broker) waitRoom(cl *mochi.Client, conn *outConn, t *tally) bool {
	if t.now != 0 {
		// What is encoded after the wait says the expiry left then.
		defer func() { t.now = time.Now().Unix() }()
	}
	if t.waitUntil.IsZero() {
		t.waitUntil = time.Now().Add(b.cfg.SlowClientTimeout)
	}
	if t.from != nil {
		t.from.sendHeld(0) // what waits for the publisher's next read does not wait with it
	}
	deadline := time.NewTimer(time.Until(t.waitUntil))
	defer deadline.Stop()
	for cl.State.Inflight.Len() >= maxInflight && !cl.Closed() {
		room, last, dead := conn.roomSignal()
		if dead {
			return true // closing: the caller finds it offline
		}
		gap := b.cfg.AckGrace - time.Since(last)
		if gap <= 0 {
			b.cutSlow(cl, conn, "no acknowledgement")
			return false
		}
		stall := time.NewTimer(gap)
		select {
		case <-room:
		case <-stall.C: // checked again above
		case <-deadline.C:
			stall.Stop()
			b.cutSlow(cl, conn, "a publisher waited too long")
			return false
		case <-b.stop:
			stall.Stop()
			return true
		}
		stall.Stop()
	}
	return true
}

// successor is the client that holds cl's session now: cl, or the
// connection that took it over. A takeover closes cl's connection before
// the new client is registered, so a closed cl is given a moment
// (takeoverWait) to be replaced.
func (b *Broker) successor(cl *mochi.Client) *mochi.Client {
	for end := time.Now().Add(takeoverWait); ; time.Sleep(2 * time.Millisecond) {
		if cur, ok := b.server.Clients.Get(cl.ID); ok && cur != cl {
			return cur
		}
		if !cl.Closed() || time.Now().After(end) {
			return cl
		}
	}
}

// takeoverWait is how long successor waits for a takeover to complete.
const takeoverWait = 500 * time.Millisecond

// cutSlow disconnects a client that has not read or acknowledged for the
// slow-client timeout. Its connection is closed without a DISCONNECT: the
// client is not reading. A persistent session keeps its QoS 1/2 messages.
func (b *Broker) cutSlow(cl *mochi.Client, conn *outConn, why string) {
	conn.mu.Lock()
	dead := conn.dead
	conn.mu.Unlock()
	if dead {
		return
	}
	b.slowCuts.Add(1)
	b.log.Info("disconnecting a client too slow to read", "client", cl.ID, "remote", cl.Net.Remote, "reason", why)
	_ = conn.Close()
}

// stalled counts a client cut off because a write to it did not complete
// within the slow-client timeout: it read nothing for that long.
func (b *Broker) stalled() {
	b.slowCuts.Add(1)
	b.log.Info("disconnecting a client too slow to read", "reason", "a write waited for the slow-client timeout")
}

// acked frees cl's window slot of an acknowledged QoS 1/2 delivery and
// writes what waited for it. pk is a PUBACK, PUBCOMP or PUBREC mochi has
// processed (it has updated the session).
func (b *Broker) acked(cl *mochi.Client, pk packets.Packet) {
	conn, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return
	}
	if pk.FixedHeader.Type == packets.Pubrec && pk.ReasonCode < packets.ErrUnspecifiedError.Code {
		return // a PUBREL follows; the slot is freed by PUBCOMP
	}
	// What the acknowledgement frees goes out at the client's next read,
	// with what the other acknowledgements read with it free.
	ackAt := time.Now()
	now := ackAt.Unix()
	t := tally{from: conn, now: now}
	conn.mu.Lock()
	conn.lastAck = ackAt
	delete(conn.unacked, pk.PacketID)
	b.sendWaitingLocked(cl, conn, &t)
	conn.wakeLocked()
	conn.mu.Unlock()
}

// release ends the hold of a SUBSCRIBE's processing (retained.go): the
// SUBACK is written, its retained messages and the live deliveries held
// go out, and the live QoS 1/2 deliveries held wait for the client's
// window behind its retained ones. It runs on the client's reading
// goroutine, as acked does.
func (b *Broker) release(cl *mochi.Client, conn *outConn) {
	t := tally{from: conn}
	conn.mu.Lock()
	if conn.releaseLocked() {
		b.sendWaitingLocked(cl, conn, &t)
	}
	conn.mu.Unlock()
}

// sendWaitingLocked writes the deliveries waiting in cl's session, oldest
// first, while its window has room (conn.mu held).
func (b *Broker) sendWaitingLocked(cl *mochi.Client, conn *outConn, t *tally) {
	now := t.unixNow()
	for len(conn.waiting) > 0 && len(conn.unacked) < max(conn.window, 1) && !conn.dead {
		out := conn.waiting[0]
		conn.waiting[0] = packets.Packet{}
		conn.waiting = conn.waiting[1:]
		if out.Expiry > 0 && out.Expiry <= now && !out.FixedHeader.Dup {
			// Expired: may be discarded [MQTT-3.3.2-5]. A resend (Dup)
			// is not: its delivery had started.
			continue
		}
		if _, ok := cl.State.Inflight.Get(out.PacketID); !ok && cl.State.Inflight.Set(out) {
			b.state.OnQosPublish(cl, out, out.Created, 0)
		}
		b.sendLocked(cl, conn, &out, owed, t)
	}
	if len(conn.waiting) == 0 {
		conn.waiting = nil
	}
}

// retainedPending reports whether a retained message on topic, sent to cl
// on an earlier SUBSCRIBE of this connection, is still stored
// unacknowledged in its session.
func (c *outConn) retainedPending(cl *mochi.Client, topic string) bool {
	c.mu.Lock()
	id, ok := c.retainedOut[topic]
	c.mu.Unlock()
	if !ok {
		return false
	}
	pk, ok := cl.State.Inflight.Get(id)
	return ok && pk.TopicName == topic
}

// noteRetained records that the retained message on topic went to cl's
// session as packet id. Entries of acknowledged messages are pruned as the
// map grows, so it holds about what is still unacknowledged.
func (c *outConn) noteRetained(cl *mochi.Client, topic string, id uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retainedOut == nil {
		c.retainedOut = make(map[string]uint16)
	}
	if len(c.retainedOut) >= max(c.retainedPrune, 256) {
		for t, id := range c.retainedOut {
			if _, ok := cl.State.Inflight.Get(id); !ok {
				delete(c.retainedOut, t)
			}
		}
		c.retainedPrune = 2 * len(c.retainedOut)
	}
	c.retainedOut[topic] = id
}
