package mqtt

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
)

// Idle connections without a goroutine (Config.IdlePark, the setting
// mqtt.idlePark).
//
// On the hub's connection loop an idle client still keeps one goroutine
// waiting for its socket: 4 KB of stack (the least the runtime keeps for a
// goroutine parked in a network wait) and its descriptor, half of what an
// idle client costs (docs/PERFORMANCE.md, "Issue 16 — memory"). mosquitto
// keeps none: one epoll loop serves every client. So a connection that
// has had nothing to read for IdlePark is parked: its socket is registered
// in an epoll set of the broker's own (parker_linux.go) and its goroutine
// returns, without ending the session. The broker's one parker goroutine
// waits on the set; when a parked socket becomes readable it starts a
// goroutine that resumes the connection's read loop, where the data is
// waiting. While parked, the parker keeps the keep-alive: a connection
// whose deadline passes is ended as the loop's read deadline would end it.
//
// Whoever sees a parked session end runs its end, exactly once: the
// resumed loop (a DISCONNECT, a read error), the parker (keep-alive), or
// the hub closing the connection (outConn.Close: takeover,
// DisconnectClient, the slow-client rule, shutdown; outConn.closeRaw: a
// write that waited out its timeout, the listener's connection set). The claim is made
// under the connection's lock (outConn.mu), which also covers removing the
// socket from the epoll set before its descriptor can be closed; each
// parking has a token of its own, never reused, so a wake-up that comes
// after the connection was claimed (and its descriptor perhaps reused)
// finds nothing to resume.
//
// Writes are unaffected: the hub writes deliveries from short-lived
// goroutines of its own (outConn). Only connections accepted by the
// broker's listeners with a descriptor park; MQTT over WebSocket, TLS and
// other operating systems wait in their goroutine as before.

// DefaultIdlePark is how long a connection may have nothing to read before
// it is parked. Long enough that a client exchanging messages every few
// hundred milliseconds (a request/response agent, a steady publisher)
// stays on its goroutine, where a packet costs no epoll registration;
// short enough that a burst of connecting clients is parked well before
// the idle figures are read (5 s after the clients connect).
const DefaultIdlePark = time.Second

// NoIdlePark is Config.IdlePark for never parking.
const NoIdlePark time.Duration = -1

// errParked ends a goroutine whose connection was parked: its session goes
// on (not an error of the session's).
var errParked = errors.New("mqtt: connection parked")

// errKeepAlive is what ends a parked connection whose keep-alive passed,
// as the read deadline ends one that waits in its goroutine.
var errKeepAlive = fmt.Errorf("keep-alive passed while parked: %w", os.ErrDeadlineExceeded)

// errClosedParked is what ends a parked connection the hub closed, as the
// read of a closed connection ends one that waits in its goroutine.
var errClosedParked = fmt.Errorf("closed while parked: %w", net.ErrClosed)

// parked is one parking of a connection.
type parked struct {
	c     *outConn
	cl    *mochi.Client
	ln    *listener
	pk    *parker
	token uint64   // this parking's, never reused
	due   monoTime // the keep-alive deadline; 0: none
}

// resumeSlack is the least time a woken connection has to finish reading
// what woke it, when its keep-alive ran out meanwhile.
const resumeSlack = 50 * time.Millisecond

// idleGrace is how long c may wait for its next packet before it is
// parked; 0: it is not parked.
func (b *Broker) idleGrace(c *outConn, ln *listener) time.Duration {
	if b.parker == nil || ln == nil || c.lr.raw == nil {
		return 0
	}
	return b.cfg.IdlePark
}

// awaitPacket waits until the client's next packet is there, within the
// keep-alive [MQTT-3.1.2-22]: one and a half times it, none for 0. A
// connection that has nothing to read within its grace (idleGrace) is
// parked instead: errParked.
//
//go:noinline
func (b *Broker) awaitPacket(cl *mochi.Client, c *outConn, ln *listener, resumed monoTime) error {
	now := time.Now()
	due := keepAliveDeadline(cl.State.Keepalive, now)
	if resumed != 0 {
		// Woken from parking: the keep-alive still runs from the last
		// packet, not from the wake-up [MQTT-3.1.2-22]; the bytes that woke
		// it are read even when they came at its last moment (a read
		// whose deadline has passed fails with the bytes unread).
		if due = resumed.time(); due.Before(now.Add(resumeSlack)) {
			due = now.Add(resumeSlack)
		}
	}
	grace := b.idleGrace(c, ln)
	if grace > 0 && c.lr.chunk.Load() == nil && (due.IsZero() || now.Add(grace).Before(due)) {
		_ = c.Conn.SetReadDeadline(now.Add(grace))
		err := c.awaitRead()
		if err == nil {
			// The rest of the packet is read within the keep-alive, not
			// the grace.
			_ = c.Conn.SetReadDeadline(due)
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if b.parkConn(cl, c, ln, due) {
			return errParked
		}
	}
	_ = c.Conn.SetReadDeadline(due)
	return c.awaitRead()
}

// parkConn parks c until its socket is readable; false: it could not (closed
// meanwhile, or the epoll set refused it), and the goroutine waits on.
func (b *Broker) parkConn(cl *mochi.Client, c *outConn, ln *listener, due time.Time) bool {
	p := &parked{c: c, cl: cl, ln: ln, pk: b.parker}
	if !due.IsZero() {
		p.due = monoOf(due)
	}
	return b.parker.park(p)
}

// resume serves p's connection again on the calling goroutine (the
// parker started it: the socket is readable), until it parks again or its
// session ends.
func (b *Broker) resume(p *parked) {
	err := b.readLoop(p.cl, p.c, p.ln, p.due)
	if err == errParked {
		return
	}
	b.endParked(p, err)
}

// endParked runs, for a connection whose goroutine returned when it was
// parked, what that goroutine would have run once the session ended:
// the session's end (serveClient), the connection's (establish) and the
// listener's.
func (b *Broker) endParked(p *parked, err error) {
	b.sessionEnded(p.cl, err)
	b.connEnded(p.c)
	p.ln.ended(p.c, err)
}

// claimLocked takes c out of its parking (c.mu held), so that the caller
// ends its session: nil when c is not parked. The socket leaves the epoll
// set here, before anyone can close its descriptor.
func (c *outConn) claimLocked() *parked {
	p := c.park
	if p == nil {
		return nil
	}
	c.park = nil
	p.pk.unregister(c)
	return p
}

// claim is claimLocked for p only: false when p's parking is over (it was
// claimed already).
func (c *outConn) claim(p *parked) bool {
	c.mu.Lock()
	ok := c.park == p
	if ok {
		c.claimLocked()
	}
	c.mu.Unlock()
	if ok {
		p.pk.forget(p.token)
	}
	return ok
}

// endClosed ends the session of p, claimed by a close of its connection,
// on a goroutine of its own: the closer may hold locks the end takes, or
// wait for the end (sameclientid.go, makeWay).
func (p *parked) endClosed() {
	p.pk.forget(p.token)
	go p.ln.broker.endParked(p, errClosedParked)
}

// closeRaw closes the connection itself, not sending what is held
// (outConn.Close does): the listener's connection set on shutdown, the
// slow-client rule. A parked connection's session is ended.
func (c *outConn) closeRaw() error {
	c.mu.Lock()
	p := c.claimLocked()
	c.mu.Unlock()
	err := c.Conn.Close()
	if p != nil {
		p.endClosed()
	}
	return err
}

// rawCloser is how the listener's connection set holds a connection: its
// Close is closeRaw.
type rawCloser struct{ *outConn }

func (r rawCloser) Close() error { return r.closeRaw() }

// ParkedClients reports how many connections are parked now.
func (b *Broker) ParkedClients() int {
	if b.parker == nil {
		return 0
	}
	return b.parker.count()
}

// parks counts the parkings so far.
func (b *Broker) parks() uint64 {
	if b.parker == nil {
		return 0
	}
	return b.parker.parks.Load()
}
