package mqtt

import (
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Acknowledgements the broker owes a publisher (PUBACK, PUBREC, PUBCOMP)
// answer packets it has read. mochi writes each with a system call of its
// own while it processes the packet, so a client that pipelines QoS 1
// publishes cost one write per message (and one wake-up of the client).
// Here such an acknowledgement is queued on the connection instead (held),
// and the queue goes out when the reading goroutine next reads from the
// socket, that is once everything read so far is processed: the
// acknowledgements of all the packets that came in one read leave in one
// writev, with whatever deliveries were queued for the client meanwhile.
//
// What a subscriber's acknowledgements free of its window (qos.go, acked)
// is held for its next read the same way, so the deliveries freed by the
// acknowledgements of one read leave together.
//
// mochi writes those three acknowledgements only from the goroutine that
// reads the client's connection (processPublish, processPubrel; on a
// session's resumption before its first read), and acked runs on it too,
// so what is held always has a Read coming that sends it. A publish that
// waits for room in a subscriber's session sends what its publisher held
// first (waitRoom), and Close sends it too: nothing is held behind a wait
// or the end of a connection.

// ackSlabSize is the size of the buffer held acknowledgements are copied
// into (mochi's buffer is its own): one allocation for dozens of them.
const ackSlabSize = 512

// closeFlushTimeout bounds the last write of held acknowledgements when
// the connection closes: a client that does not read does not hold Close.
const closeFlushTimeout = 50 * time.Millisecond

// isAck reports whether p is exactly one PUBACK, PUBREC or PUBCOMP.
func isAck(p []byte) bool {
	if len(p) < 4 || len(p) > 127+2 {
		return false
	}
	switch p[0] {
	case packets.Puback << 4, packets.Pubrec << 4, packets.Pubcomp << 4:
		return int(p[1])+2 == len(p)
	}
	return false
}

// holdAck queues p if it is an acknowledgement (see above) and reports
// whether it did; Write writes anything else.
func (c *outConn) holdAck(p []byte) bool {
	if !isAck(p) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return false // Write reports the broken connection
	}
	if cap(c.ackSlab)-len(c.ackSlab) < len(p) {
		c.ackSlab = make([]byte, 0, ackSlabSize)
	}
	start := len(c.ackSlab)
	c.ackSlab = append(c.ackSlab, p...)
	end := len(c.ackSlab)
	c.q = append(c.q, c.ackSlab[start:end:end])
	c.enqueued += uint64(len(p))
	c.waitRead.Store(true)
	return true
}

// kickLocked has what c queues written (c.mu held): by a flush goroutine
// now, or, when c's own reading goroutine queued it (from == c: what an
// acknowledgement it read freed of its window), at its next read.
func (c *outConn) kickLocked(from *outConn) {
	if from == c && !c.flushing {
		c.waitRead.Store(true)
		return
	}
	c.startLocked()
}

// flushBeforeRead is called by Read before it waits for the
// client's next bytes: what the hub has to say in answer to the packets
// read before, and the deliveries they made, go out first, in one write.
// Packets already read but not yet handed to mochi are handled before it,
// so acknowledgements of a burst go out together.
func (c *outConn) flushBeforeRead() {
	if c.waitRead.Load() {
		c.sendHeld(0)
	}
}

// sendHeld writes c's queue, held packets included, on the calling
// goroutine. When another writer holds the
// connection it leaves the queue to a flush goroutine instead of waiting.
// timeout > 0 bounds the write (Close's last attempt).
func (c *outConn) sendHeld(timeout time.Duration) {
	if !c.waitRead.Swap(false) {
		return
	}
	if !c.wmu.TryLock() {
		c.mu.Lock()
		c.startLocked()
		c.mu.Unlock()
		return
	}
	q := c.take()
	if q == nil {
		c.wmu.Unlock()
		return
	}
	if timeout > 0 {
		now := time.Now()
		_ = c.Conn.SetWriteDeadline(now.Add(timeout))
		c.deadlineSet = monoOf(now) // write leaves it
	}
	n := bufsLen(q) + c.batchSkipped
	err := c.writeBatch(q, nil)
	if err == nil {
		c.written.Add(n)
	}
	if timeout > 0 {
		c.deadlineSet = 0 // the next write moves it back
	}
	c.wmu.Unlock()
	c.recycle(q)
	if err != nil {
		c.fail()
	}
}

// ackPublish acknowledges cl's QoS 1 publish pk, delivered, itself and
// reports whether it did. mochi's acknowledgement of a QoS 1 publish
// stores the PUBACK in the session, runs the session hooks, encodes it
// (its property encoder) and deletes it again; the PUBACK it writes is
// the same four bytes as this one (Success needs no reason code in MQTT
// 5, §3.4.2.1; mochi's 0x01 is made 0x00 by OnPacketEncode), and the
// session's store and delete are a no-op together. QoS 2 publishes stay
// with mochi, whose session keeps the PUBREC until the PUBREL.
func (b *Broker) ackPublish(cl *mochi.Client, pk packets.Packet) bool {
	if pk.FixedHeader.Qos != 1 || cl.Net.Inline {
		return false
	}
	conn, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return false
	}
	ack := [4]byte{packets.Puback << 4, 2, byte(pk.PacketID >> 8), byte(pk.PacketID)}
	if !conn.holdAck(ack[:]) {
		return false // a dead connection: mochi's write finds out
	}
	return true
}
