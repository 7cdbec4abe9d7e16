package mqtt

import (
	"cmp"
	"slices"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Resending a resumed session's QoS 1/2 messages (PROTOCOL §10, "Session
// resumption").
//
// A session resumed [MQTT-3.1.2-5] must resend its unacknowledged PUBLISH
// and PUBREL packets [MQTT-4.4.0-1]. mochi's ResendInflightMessages writes
// them all at once, whatever Receive Maximum the new connection declared:
// a client resuming with Receive Maximum 5 and 20 stored gets 20, which
// [MQTT-3.3.4-9] forbids, and a strict client disconnects with 0x93. mochi
// has no option for it, but it writes them to the hub's connection
// (outConn), between the CONNACK that says the session is present
// (OnPacketEncode marks the connection resuming) and OnSessionEstablished.
// There outConn.Write keeps the PUBLISHes back (each carries DUP, which no
// other write mochi makes then has), and resend sends them again through
// the client's window:
//
//   - PUBREL (a QoS 2 message the client has PUBREC'd) went out with
//     mochi's resend: a quota of zero does not stop PUBRELs (MQTT 5 §4.9),
//     and it is how the client completes the message. Its slot stays taken
//     until the PUBCOMP: the send quota comes back only then (§4.9).
//   - PUBLISH goes, with DUP set [MQTT-3.3.1-1], ahead of anything
//     waiting for the window (conn.waiting), and leaves it as
//     acknowledgements free slots (acked), as live deliveries do.
//
// What mochi stores for a QoS 2 message the client published (a PUBREC
// awaiting the PUBREL) its resend wrote too.
func (b *Broker) resend(cl *mochi.Client, conn *outConn, window int) {
	conn.resuming.Store(false)
	stored := cl.State.Inflight.GetAll(false)
	slices.SortStableFunc(stored, resendOrder)
	var rels []uint16
	publishes := stored[:0]
	for _, pk := range stored {
		switch pk.FixedHeader.Type {
		case packets.Publish:
			pk.FixedHeader.Dup = true
			publishes = append(publishes, pk)
		case packets.Pubrel:
			rels = append(rels, pk.PacketID)
		}
	}
	t := tally{}
	conn.mu.Lock()
	conn.window = window
	conn.lastAck = time.Now()
	for _, id := range rels {
		conn.markLocked(id)
	}
	// A live delivery stored between the client's listing and now is
	// waiting already (deliverQoS queues while there is no window): it
	// is newer, and must not go out twice.
	queued := make(map[uint16]struct{}, len(conn.waiting))
	for _, pk := range conn.waiting {
		queued[pk.PacketID] = struct{}{}
	}
	var waiting []packets.Packet
	for _, pk := range publishes {
		if _, ok := queued[pk.PacketID]; ok {
			continue
		}
		if _, ok := conn.unacked[pk.PacketID]; ok {
			continue
		}
		waiting = append(waiting, pk)
	}
	conn.waiting = append(waiting, conn.waiting...)
	b.sendWaitingLocked(cl, conn, &t)
	conn.mu.Unlock()
}

// resendOrder orders a session's stored messages oldest first: by the
// second they were published in (Created), then by packet identifier,
// which a session hands out in ascending order.
func resendOrder(a, b packets.Packet) int {
	if c := cmp.Compare(a.Created, b.Created); c != 0 {
		return c
	}
	return cmp.Compare(a.PacketID, b.PacketID)
}

// Packet identifiers are assigned by each side independently (MQTT 5
// §2.2.1), but mochi keeps those of both directions in one table and
// refuses a SUBSCRIBE or UNSUBSCRIBE whose identifier a stored delivery to
// the client uses (0x91, Packet Identifier in use). A resuming client
// meets that at once: mosquitto_sub subscribes again with identifier 1
// while the session's first stored message, identifier 1, waits for the
// client's window. The hub's loop hands mochi such a packet under an
// identifier the table does not hold, and its SUBACK or UNSUBACK gets the
// client's own back (restoreID, from OnPacketEncode). A clash with the
// client's own QoS 2 publish still in progress is a real reuse
// [MQTT-2.2.1-3], left to mochi.

// isResentPublish reports whether p, one packet mochi writes, is a QoS 1/2
// PUBLISH with DUP set: during a resumption, one of mochi's resends.
func isResentPublish(p []byte) bool {
	return len(p) > 0 && p[0]>>4 == packets.Publish && p[0]&0x08 != 0
}

// unclashID gives pk (a SUBSCRIBE or UNSUBSCRIBE) a free identifier if a
// delivery to the client stores its own, and reports whether it did.
func unclashID(cl *mochi.Client, pk *packets.Packet) bool {
	c, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return false
	}
	stored, ok := cl.State.Inflight.Get(pk.PacketID)
	if !ok || (stored.FixedHeader.Type != packets.Publish && stored.FixedHeader.Type != packets.Pubrel) {
		return false
	}
	// From the top: the session hands out identifiers from the bottom.
	for id := uint16(65535); id > 0; id-- {
		if _, used := cl.State.Inflight.Get(id); !used {
			c.swapOrig, c.swapSub = pk.PacketID, id
			pk.PacketID = id
			return true
		}
	}
	return false
}

// endSwap forgets the identifier unclashID swapped in.
func endSwap(cl *mochi.Client) {
	if c, ok := cl.Net.Conn.(*outConn); ok {
		c.swapOrig, c.swapSub = 0, 0
	}
}

// restoreID puts the client's identifier back on the SUBACK or UNSUBACK
// of a packet unclashID renumbered.
func restoreID(cl *mochi.Client, pk *packets.Packet) {
	if c, ok := cl.Net.Conn.(*outConn); ok && c.swapSub != 0 && pk.PacketID == c.swapSub {
		pk.PacketID = c.swapOrig
	}
}

// OnPacketRead gives a SUBSCRIBE or UNSUBSCRIBE whose identifier a stored
// delivery uses one mochi's check does not refuse (unclashID). It is done
// as the packet is read: mochi checks an UNSUBSCRIBE's identifier before
// its OnUnsubscribe hook runs.
func (h *binding) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if t := pk.FixedHeader.Type; t == packets.Subscribe || t == packets.Unsubscribe {
		unclashID(cl, &pk)
	}
	return pk, nil
}
