package mqtt

import (
	"sync/atomic"
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
// Inflight, which the persistence hook writes through and mochi resends on
// reconnect), then written at once if the client has fewer than its
// Receive Maximum unacknowledged on this connection, or else queued on the
// connection and written when an acknowledgement frees a slot. The queue
// keeps the packet, not only its identifier: mochi keeps the identifiers
// of both directions in one map, and deletes a stored delivery when the
// client publishes with the same identifier (server.go, processPublish);
// such a delivery is stored again when it is written. A
// session stores at most maxInflight messages: a publisher whose message
// would exceed that waits for the subscriber to acknowledge, and a
// subscriber that makes it wait Config.SlowClientTimeout is disconnected
// (counted). An
// offline session that is full loses the message (counted).
//
// mochi's own send quota is switched off (ResetSendQuota(0)), so it never
// parks; what it still delivers itself (wills) goes out at once.

// startSession sets up flow control for a connected client: its window and
// the QoS 1/2 messages mochi has just resent from its session.
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
	conn.mu.Lock()
	defer conn.mu.Unlock()
	conn.window = window
	for _, pk := range cl.State.Inflight.GetAll(false) {
		if pk.FixedHeader.Type == packets.Publish || pk.FixedHeader.Type == packets.Pubrel {
			conn.markLocked(pk.PacketID) // resent by mochi
		}
	}
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

// roomSignal returns a channel closed at the next acknowledgement.
func (c *outConn) roomSignal() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if c.room == nil {
		c.room = make(chan struct{})
	}
	return c.room
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
func (b *Broker) deliverQoS(cl *mochi.Client, conn *outConn, pk *packets.Packet, qos byte, retain bool, ids []int, kind queueKind, t *tally) {
	if n := cl.State.Inflight.Len(); kind != retained && n >= maxInflight {
		online := conn != nil && !cl.Closed()
		switch {
		case !online:
			b.dropped[dropSessionFull].Add(1)
			t.dropped++
			return
		case cl.ID == pk.Origin || pk.Origin == mochi.InlineClientId:
			// Its own publish: waiting would be on its own goroutine. The
			// hub's: its join workers, presence changes and proxy must not
			// stall behind one subscriber that does not read.
			if n >= 2*maxInflight {
				b.cutSlow(cl, conn, "own messages unacknowledged")
			}
		case b.waitRoom(cl, conn):
			if cl.State.Inflight.Len() >= maxInflight { // gone offline meanwhile
				b.dropped[dropSessionFull].Add(1)
				t.dropped++
				return
			}
		}
		// Cut off for slowness: the message stays in the session, which
		// may outlive the connection.
	}
	id, err := cl.NextPacketID()
	if err != nil { // 65,535 messages in the session
		b.dropped[dropSessionFull].Add(1)
		t.dropped++
		return
	}
	out := pk.Copy(false)
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
		atomic.AddInt64(&b.server.Info.Inflight, 1)
		b.state.OnQosPublish(cl, out, out.Created, 0)
	}
	if conn == nil || cl.Closed() {
		return // the session keeps it; mochi resends it on reconnect
	}
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if len(conn.waiting) > 0 || len(conn.unacked) >= max(conn.window, 1) {
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
	data := appendPublish(nil, out, v5, out.FixedHeader.Retain, out.FixedHeader.Qos, out.PacketID, ids, time.Now().Unix())
	if m := cl.Properties.Props.MaximumPacketSize; m > 0 && uint32(len(data)) > m {
		b.dropped[dropTooLarge].Add(1)
		if cl.State.Inflight.Delete(out.PacketID) {
			atomic.AddInt64(&b.server.Info.Inflight, -1)
			b.state.OnQosDropped(cl, *out)
		}
		return
	}
	if conn.enqueueLocked(data, kind, time.Time{}) != queued {
		return // dead: the session keeps it
	}
	conn.markLocked(out.PacketID)
	t.sent++
	t.bytes += int64(len(data))
}

// waitRoom waits until cl's session has room for one more message, for at
// most the slow-client timeout; then it disconnects cl and reports false.
func (b *Broker) waitRoom(cl *mochi.Client, conn *outConn) bool {
	timer := time.NewTimer(b.cfg.SlowClientTimeout)
	defer timer.Stop()
	for cl.State.Inflight.Len() >= maxInflight && !cl.Closed() {
		select {
		case <-conn.roomSignal():
		case <-timer.C:
			b.cutSlow(cl, conn, "no acknowledgement")
			return false
		case <-b.stop:
			return true
		}
	}
	return true
}

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
	var t tally
	now := time.Now().Unix()
	conn.mu.Lock()
	delete(conn.unacked, pk.PacketID)
	for len(conn.waiting) > 0 && len(conn.unacked) < max(conn.window, 1) && !conn.dead {
		out := conn.waiting[0]
		conn.waiting[0] = packets.Packet{}
		conn.waiting = conn.waiting[1:]
		if out.Expiry > 0 && out.Expiry <= now {
			continue // expired: may be discarded [MQTT-3.3.2-5]
		}
		if _, ok := cl.State.Inflight.Get(out.PacketID); !ok && cl.State.Inflight.Set(out) {
			atomic.AddInt64(&b.server.Info.Inflight, 1)
			b.state.OnQosPublish(cl, out, out.Created, 0)
		}
		b.sendLocked(cl, conn, &out, owed, &t)
	}
	if len(conn.waiting) == 0 {
		conn.waiting = nil
	}
	conn.wakeLocked()
	conn.mu.Unlock()
	b.count(t)
}
