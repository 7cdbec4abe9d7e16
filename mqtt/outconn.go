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
	broken   bool        // a write failed: the connection is going away
	closed   bool
}

func newOutConn(c net.Conn) *outConn { return &outConn{Conn: c} }

// enqueue queues the encoded packet p, shared read-only with other
// subscribers. It reports false, and drops p, when the queue already holds
// maxWritesPending packets or the connection is broken or closed.
func (c *outConn) enqueue(p []byte) bool {
	c.mu.Lock()
	if c.broken || c.closed || len(c.q) >= maxWritesPending {
		c.mu.Unlock()
		return false
	}
	c.q = append(c.q, p)
	start := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if start {
		go c.flush()
	}
	return true
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
	clear(q)
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
	c.broken = true
	c.flushing = false
	clear(c.q)
	c.q = c.q[:0]
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
		return c.Conn.Write(p)
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
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}
