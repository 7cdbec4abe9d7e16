package mqtt

import (
	"errors"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// outConn is the connection mochi serves a client on. It adds a queue of
// encoded packets that the broker's own delivery (fanout.go, qos.go) fills;
// a goroutine, started only while the queue holds something, writes it out
// with one writev per batch. A subscriber that falls behind thus costs one
// system call for many messages, not one per message.
//
// mochi's own writes (acknowledgements, wills, its other packets) still
// come through Write, which first writes out whatever is queued: packets
// reach the wire in the order they were handed over, and every Write
// carries whole packets, so the two writers never interleave inside one.
//
// QoS 0 deliveries waiting (not yet in the batch being written) are
// bounded in bytes (budget), not packets, so a burst of small messages
// fits while memory stays bounded; only they are refused when it is full.
// QoS 1/2 deliveries and retained messages on SUBSCRIBE are always queued,
// and do not count against the budget: the former are bounded by the
// client's window (qos.go), the latter by the retained store.
type outConn struct {
	net.Conn

	// token is the bearer token the client authenticated with (username
	// TokenUsername, access.go); nil for anonymous clients and Things.
	token atomic.Pointer[hub.Token]
	// self is the client's Thing topic key ("" for none), once asked
	// (hook.go, self).
	self atomic.Pointer[string]
	// thing is the id of that Thing, once asked (groups.go, thingID).
	thing atomic.Pointer[string]

	// wmu serialises writes to Conn; it is taken before mu.
	wmu sync.Mutex

	mu    sync.Mutex
	q     net.Buffers // queued packets, oldest first
	spare net.Buffers // the previous batch's slice, for reuse
	// q0 and held0 are the bytes of QoS 0 deliveries waiting in q and in
	// held (not in the batch being written); budget bounds their sum.
	q0, held0 int
	budget    int
	flushing  bool // a flush goroutine is running
	dead      bool // closed, or a write failed: nothing more is queued
	// fullSince is when a QoS 0 delivery was first refused for lack of
	// room since the last batch went out; zero while the client keeps up.
	fullSince monoTime

	// sub is what a SUBSCRIBE being processed holds back (nil: none);
	// allocated per SUBSCRIBE, so that an idle client does not carry it.
	sub *subHold

	// QoS 1/2 flow control (qos.go): window is how many the client takes
	// unacknowledged (its Receive Maximum), unacked the packet identifiers
	// written and not yet acknowledged, waiting the deliveries stored in
	// the session and not yet written, oldest first. room is closed (and
	// replaced) whenever an acknowledgement frees a slot of the session.
	window  int
	unacked map[uint16]struct{}
	waiting []packets.Packet
	room    chan struct{}
	lastAck time.Time // the last acknowledgement, or the CONNECT
	// retainedOut maps each topic whose retained message a SUBSCRIBE sent
	// at QoS 1/2 to its packet identifier (stale once acknowledged).
	retainedOut   map[string]uint16
	retainedPrune int // prune retainedOut when it holds this many

	// enqueued counts the bytes ever queued (under mu) and written those
	// of them written out, so a caller can learn whether one packet
	// reached the connection before it closed (settle, join.go).
	enqueued uint64
	written  atomic.Uint64
	// skipped are bytes counted in enqueued that a revocation took out of
	// q (groups.go, purgeGroup), skippedHeld those it took out of held and
	// pre; they count as written once what was queued ahead of them is:
	// batchSkipped is the share of the batch being written (under wmu).
	skipped, skippedHeld, batchSkipped uint64

	// Writes held until the next read (ackbatch.go): waitRead says the
	// queue holds packets waiting for it (acknowledgements, deliveries
	// queued by this client's own reading goroutine); ackSlab is where
	// acknowledgements are copied.
	waitRead atomic.Bool
	ackSlab  []byte

	// noExpiry is set when an anonymous MQTT 5 client asked for a session
	// that outlives the connection: its CONNACK says Session Expiry
	// Interval 0 (anonymous.go).
	noExpiry atomic.Bool

	// connectBy is when the CONNECT must have been read (awaitConnect);
	// connected is set once it has (OnConnect).
	connectBy monoTime
	connected atomic.Bool

	// served is closed once mochi's handling of the connection has
	// returned, its session cleanup included (sameclientid.go).
	served chan struct{}

	// writeTimeout bounds each write; onStall is told when one ran out.
	// deadlineSet is when the write deadline was last moved (under wmu).
	writeTimeout time.Duration
	onStall      func()
	deadlineSet  monoTime

	// swapOrig is the identifier of the SUBSCRIBE or UNSUBSCRIBE being
	// processed, which mochi sees as swapSub (non-zero) instead
	// (resend.go, unclashID); only the client's reading goroutine uses
	// them.
	swapOrig, swapSub uint16
	// resuming is set from the CONNACK of a resumed session until the
	// hub resends its messages (resend.go).
	resuming atomic.Bool
	// pre is what readConnect read of the CONNECT that mochi has yet to
	// read; keepalive the client's Keep Alive in seconds (OnConnect).
	pre       []byte
	keepalive atomic.Uint32
}

// subHold is what outConn holds back while a SUBSCRIBE is processed
// (retained.go): its retained messages wait in pre and live deliveries in
// held; release queues both, in that order, once mochi has written the
// SUBACK.
type subHold struct {
	pre  net.Buffers
	held net.Buffers
	plan []bool // per filter of that SUBSCRIBE: the hub sends its retained messages
	// heldQoS are the live QoS 1/2 deliveries (stored in the session)
	// that came meanwhile: queued or put in waiting then, one could go out
	// ahead of retained messages the SUBSCRIBE has yet to store. release
	// puts them behind the waiting ones (qos.go, release).
	heldQoS []packets.Packet
}

// monoTime is a time as monotonic nanoseconds since the process started
// (0: unset): 8 bytes where a time.Time takes 24, for the fields every
// connection carries (an idle client's cost, docs/PERFORMANCE.md).
type monoTime int64

var monoBase = time.Now()

func monoOf(t time.Time) monoTime { return monoTime(t.Sub(monoBase)) + 1 }

// sub is m-n.
func (m monoTime) sub(n monoTime) time.Duration { return time.Duration(m - n) }

func newOutConn(c net.Conn, budget int, writeTimeout time.Duration, onStall func()) *outConn {
	return &outConn{Conn: c, budget: budget, served: make(chan struct{}), writeTimeout: writeTimeout, onStall: onStall}
}

// SetDeadline is mochi's keep-alive (MQTT-3.1.2-22): a read deadline. The
// write deadline is write's, which moves it only now and then. mochi
// computes one and a half times the Keep Alive in whole seconds, so a
// client with Keep Alive 1 was cut off after 1 s: the deadline is set
// from the client's Keep Alive here, to the millisecond.
func (c *outConn) SetDeadline(t time.Time) error {
	if ka := c.keepalive.Load(); ka > 0 && !t.IsZero() {
		t = time.Now().Add(time.Duration(ka) * 1500 * time.Millisecond)
	}
	return c.Conn.SetReadDeadline(t)
}

// write writes to the connection within writeTimeout: a client that reads
// nothing for that long (three times Config.SlowClientTimeout, at least
// twice it, so the cut of a full QoS 0 queue, which counts the message it
// refused, comes first) is
// cut off, so what was queued for it (retained messages are queued beyond
// the budget, QoS 1/2 ones beyond the window) is not held for ever.
func (c *outConn) write(p []byte, q net.Buffers) error {
	if c.writeTimeout > 0 {
		// Moving the deadline costs a timer update, too much for every
		// batch of a fan-out: it moves when a third of it is used, so a
		// write has between two thirds of writeTimeout and all of it.
		if now := time.Now(); monoOf(now).sub(c.deadlineSet) > c.writeTimeout/3 {
			_ = c.Conn.SetWriteDeadline(now.Add(c.writeTimeout))
			c.deadlineSet = monoOf(now)
		}
	}
	var err error
	if q != nil {
		_, err = q.WriteTo(c.Conn)
	} else {
		_, err = c.Conn.Write(p)
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// The socket is fine, the client just does not read: close it,
		// so that mochi's read ends and the client with it.
		_ = c.closeRaw()
		if c.onStall != nil {
			c.onStall()
		}
	}
	return err
}

// What enqueue does with a packet.
type queueKind int

const (
	qos0     queueKind = iota // a QoS 0 delivery: refused when the budget is spent
	owed                      // a QoS 1/2 delivery: always queued
	retained                  // a retained message of a SUBSCRIBE: always queued, ahead of what hold holds back
)

// Results of enqueue.
type queueResult int

const (
	queued  queueResult = iota
	full                // refused: the budget is spent
	gone                // refused: the connection is dead
	revoked             // refused: a group delivery to a Thing no longer a member (groups.go)
)

// enqueue queues the encoded packet p, shared read-only with other
// subscribers. from is the connection whose reading goroutine queues it
// (nil: unknown): when it is c, the write waits for c's next read
// (ackbatch.go).
func (c *outConn) enqueue(p []byte, kind queueKind, from *outConn) queueResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enqueueLocked(p, kind, time.Time{}, from)
}

// enqueueLocked is enqueue with c.mu held; now (zero: not needed) dates a
// refusal for slowFor.
func (c *outConn) enqueueLocked(p []byte, kind queueKind, now time.Time, from *outConn) (r queueResult) {
	if c.dead {
		return gone
	}
	defer func() {
		if r == queued {
			c.enqueued += uint64(len(p))
		}
	}()
	// A message larger than the budget still goes out alone.
	if kind == qos0 && c.q0+c.held0 > 0 && c.q0+c.held0+len(p) > c.budget {
		if c.fullSince == 0 {
			if now.IsZero() {
				now = time.Now()
			}
			c.fullSince = monoOf(now)
		}
		return full
	}
	if h := c.sub; h != nil {
		if kind == retained {
			h.pre = append(h.pre, p)
		} else {
			h.held = append(h.held, p)
			if kind == qos0 {
				c.held0 += len(p)
			}
		}
		return queued
	}
	if kind == qos0 {
		c.q0 += len(p)
	}
	c.q = append(c.q, p)
	c.kickLocked(from)
	return queued
}

// slowFor is how long QoS 0 deliveries have been refused without a batch
// going out (0: they are not).
func (c *outConn) slowFor(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fullSince == 0 {
		return 0
	}
	return monoOf(now).sub(c.fullSince)
}

// startLocked starts a flush goroutine unless one runs; c.mu is held.
func (c *outConn) startLocked() {
	if !c.flushing && len(c.q) > 0 {
		c.flushing = true
		go c.flush()
	}
}

// hold holds live deliveries back until release, and keeps plan for the
// SUBSCRIBE being processed.
func (c *outConn) hold(plan []bool) {
	c.mu.Lock()
	if c.sub == nil {
		c.sub = &subHold{}
	}
	c.sub.plan = plan
	c.mu.Unlock()
}

// takePlan returns the plan hold kept.
func (c *outConn) takePlan() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sub == nil {
		return nil
	}
	p := c.sub.plan
	c.sub.plan = nil
	return p
}

// releaseLocked queues the held deliveries behind what is queued and puts
// the held QoS 1/2 ones behind those waiting for the client's window
// (c.mu held); it reports whether it did (a hold was on).
func (c *outConn) releaseLocked() bool {
	h := c.sub
	if h == nil {
		return false
	}
	c.sub = nil
	c.q = append(append(c.q, h.pre...), h.held...)
	c.skipped += c.skippedHeld
	c.skippedHeld = 0
	c.q0 += c.held0
	c.held0 = 0
	c.waiting = append(c.waiting, h.heldQoS...)
	c.startLocked()
	return true
}

// take hands the queued packets over to a writer (holding wmu).
func (c *outConn) take() net.Buffers {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.takeLocked()
}

func (c *outConn) takeLocked() net.Buffers {
	q := c.q
	if len(q) == 0 {
		// The taker holds wmu: nothing is being written, so what a
		// revocation skipped is behind everything written.
		c.written.Add(c.skipped)
		c.skipped = 0
		return nil
	}
	c.batchSkipped, c.skipped = c.skipped, 0
	c.q0 = 0
	c.q = c.spare[:0]
	c.spare = nil
	return q
}

// recycle keeps a written batch's slice for the next one, without the
// packets it referenced.
func (c *outConn) recycle(q net.Buffers) {
	clear(q[:cap(q)]) // writeBatch may have appended a packet past len
	c.mu.Lock()
	c.fullSince = 0 // the client took a batch
	if c.spare == nil && cap(q) <= maxSpare {
		c.spare = q[:0]
	}
	c.mu.Unlock()
}

// maxSpare is the largest batch slice kept for reuse.
const maxSpare = 256

// flush writes batches until the queue is empty.
func (c *outConn) flush() {
	for {
		c.wmu.Lock()
		// Finding the queue empty and ending must be one step: a packet
		// queued in between would wait for a flush that never comes.
		c.mu.Lock()
		q := c.takeLocked()
		if q == nil {
			c.flushing = false
			c.mu.Unlock()
			c.wmu.Unlock()
			return
		}
		c.mu.Unlock()
		n := bufsLen(q) + c.batchSkipped
		err := c.writeBatch(q, nil)
		if err == nil {
			c.written.Add(n)
		}
		c.wmu.Unlock()
		c.recycle(q)
		if err != nil {
			c.fail()
			return
		}
	}
}

// fail drops the queue after a failed write; mochi sees the broken
// connection on its side and ends the client.
func (c *outConn) fail() {
	c.mu.Lock()
	c.dead = true
	c.flushing = false
	c.q, c.sub = nil, nil
	c.q0, c.held0 = 0, 0
	c.wakeLocked()
	c.mu.Unlock()
}

// writeBatch writes q and then p (may be nil) to the connection. A TCP
// connection gets a single writev; other connections (MQTT over
// WebSocket, where each Write is a message) get the batch as one Write.
func (c *outConn) writeBatch(q net.Buffers, p []byte) error {
	if p != nil {
		q = append(q, p)
	}
	if _, ok := c.Conn.(*net.TCPConn); ok || len(q) == 1 {
		return c.write(nil, q)
	}
	n := 0
	for _, b := range q {
		n += len(b)
	}
	all := make([]byte, 0, n)
	for _, b := range q {
		all = append(all, b...)
	}
	return c.write(all, nil)
}

// Read is mochi's read of the client's bytes (through its bufio.Reader,
// so only once everything read before is processed): what the hub held
// for the client meanwhile goes out first (ackbatch.go).
func (c *outConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		if c.pre = c.pre[n:]; len(c.pre) == 0 {
			c.pre = nil
		}
		return n, nil
	}
	c.flushBeforeRead()
	return c.Conn.Read(p)
}

// Write is mochi's write of one or more whole packets: it goes out after
// the packets queued before it. An acknowledgement to a publisher waits
// for the next read instead (ackbatch.go).
func (c *outConn) Write(p []byte) (int, error) {
	if c.holdAck(p) {
		return len(p), nil
	}
	if c.resuming.Load() && isResentPublish(p) {
		return len(p), nil // resent through the client's window (resend.go)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	q := c.take()
	if q == nil {
		if err := c.write(p, nil); err != nil {
			c.fail()
			return 0, err
		}
		return len(p), nil
	}
	n := bufsLen(q) + c.batchSkipped
	err := c.writeBatch(q, p)
	if err == nil {
		c.written.Add(n)
	}
	c.recycle(q)
	if err != nil {
		c.fail()
		return 0, err
	}
	return len(p), nil
}

// bufsLen is the number of bytes in q.
func bufsLen(q net.Buffers) uint64 {
	var n uint64
	for _, b := range q {
		n += uint64(len(b))
	}
	return n
}

// mark is the position just past everything queued so far.
func (c *outConn) mark() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enqueued
}

// reached reports whether everything queued up to mark has been written
// (delivered), and whether that is settled: written, or never to be
// written because the connection is dead.
func (c *outConn) reached(mark uint64) (delivered, settled bool) {
	if c.written.Load() >= mark {
		return true, true
	}
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead {
		// A write in progress when the connection died failed.
		return c.written.Load() >= mark, true
	}
	return false, false
}

// Close closes the connection; queued packets are dropped (QoS 1/2 ones
// stay in the session).
func (c *outConn) Close() error {
	c.sendHeld(closeFlushTimeout)
	c.mu.Lock()
	c.dead = true
	c.wakeLocked()
	c.mu.Unlock()
	return c.Conn.Close()
}

// closeRaw closes the connection itself, not sending what is held
// (outConn.Close does): the listener's connection set on shutdown, the
// slow-client rule.
func (c *outConn) closeRaw() error { return c.Conn.Close() }

// rawCloser is how the listener's connection set holds a connection: its
// Close is closeRaw.
type rawCloser struct{ *outConn }

func (r rawCloser) Close() error { return r.closeRaw() }
