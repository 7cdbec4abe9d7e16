package mqtt

import (
	"net"
	"sync"
)

// outConn is the connection mochi serves a client on. It adds a queue of
// encoded packets that the broker's own fan-out (fanout.go) fills; a
// goroutine, started only while the queue holds something, writes it out
// with one writev per batch. A subscriber that falls behind thus costs one
// system call for many messages, not one per message.
//
// mochi's own writes (acknowledgements, QoS 1/2 deliveries, retained
// messages) still come through Write, which first writes out whatever is
// queued: packets reach the wire in the order they were handed over, and
// every Write carries whole packets, so the two writers never interleave
// inside one.
type outConn struct {
	net.Conn

	// wmu serialises writes to Conn; it is taken before mu.
	wmu sync.Mutex

	mu       sync.Mutex
	q        net.Buffers // queued packets, oldest first
	spare    net.Buffers // the previous batch's slice, for reuse
	flushing bool        // a flush goroutine is running
	dead     bool        // closed, or a write failed: nothing more is queued

	// While a SUBSCRIBE is processed (retained.go) its retained messages
	// wait in pre and live deliveries in held; release queues both, in that
	// order, once mochi has written the SUBACK.
	holding bool
	pre     net.Buffers
	held    net.Buffers
	plan    []bool // per filter of that SUBSCRIBE: the hub sends its retained messages
}

func newOutConn(c net.Conn) *outConn { return &outConn{Conn: c} }

// enqueue queues the encoded packet p, shared read-only with other
// subscribers; retained marks a retained message of a SUBSCRIBE, which goes
// out ahead of the live deliveries held meanwhile (hold). It reports false,
// and drops p, when maxWritesPending packets wait already or the connection
// is dead.
func (c *outConn) enqueue(p []byte, retained bool) bool {
	c.mu.Lock()
	if c.dead || len(c.q)+len(c.pre)+len(c.held) >= maxWritesPending {
		c.mu.Unlock()
		return false
	}
	if c.holding {
		if retained {
			c.pre = append(c.pre, p)
		} else {
			c.held = append(c.held, p)
		}
		c.mu.Unlock()
		return true
	}
	c.q = append(c.q, p)
	c.startLocked()
	c.mu.Unlock()
	return true
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
	c.holding = true
	c.plan = plan
	c.mu.Unlock()
}

// takePlan returns the plan hold kept.
func (c *outConn) takePlan() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.plan
	c.plan = nil
	return p
}

// release queues the held deliveries behind what is queued.
func (c *outConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holding {
		return
	}
	c.holding = false
	c.plan = nil
	c.q = append(append(c.q, c.pre...), c.held...)
	c.pre, c.held = nil, nil
	c.startLocked()
}

// take hands the queued packets over to a writer (holding wmu).
func (c *outConn) take() net.Buffers {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.q
	if len(q) == 0 {
		return nil
	}
	c.q = c.spare[:0]
	c.spare = nil
	return q
}

// recycle keeps a written batch's slice for the next one, without the
// packets it referenced.
func (c *outConn) recycle(q net.Buffers) {
	clear(q[:cap(q)]) // writeBatch may have appended a packet past len
	c.mu.Lock()
	if c.spare == nil && cap(q) <= 2*maxWritesPending {
		c.spare = q[:0]
	}
	c.mu.Unlock()
}

// flush writes batches until the queue is empty.
func (c *outConn) flush() {
	for {
		c.wmu.Lock()
		q := c.take()
		if q == nil {
			c.mu.Lock()
			c.flushing = false
			c.mu.Unlock()
			c.wmu.Unlock()
			return
		}
		err := c.writeBatch(q, nil)
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
	c.q, c.pre, c.held = nil, nil, nil
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
		_, err := q.WriteTo(c.Conn)
		return err
	}
	n := 0
	for _, b := range q {
		n += len(b)
	}
	all := make([]byte, 0, n)
	for _, b := range q {
		all = append(all, b...)
	}
	_, err := c.Conn.Write(all)
	return err
}

// Write is mochi's write of one or more whole packets: it goes out after
// the packets queued before it.
func (c *outConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	q := c.take()
	if q == nil {
		n, err := c.Conn.Write(p)
		if err != nil {
			c.fail()
		}
		return n, err
	}
	err := c.writeBatch(q, p)
	c.recycle(q)
	if err != nil {
		c.fail()
		return 0, err
	}
	return len(p), nil
}

// Close closes the connection; queued packets are dropped.
func (c *outConn) Close() error {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	return c.Conn.Close()
}
