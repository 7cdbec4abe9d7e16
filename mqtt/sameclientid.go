package mqtt

import (
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// A client that connects with the id of a session still being served.
//
// mochi ends a connection whose session expires with it (MQTT 5 Session
// Expiry 0, MQTT 3.1.1 clean session) by removing the client from its
// table by id, after unsubscribing it, which runs the hooks and takes a
// while. A new connection with the same id added meanwhile (a reconnect,
// or a takeover: mochi marks the old client taken over only after it has
// disconnected and unsubscribed it) loses its entry: it stays connected
// and subscribed, yet mochi finds no client to deliver to, and every
// message owed to it is lost.
//
// So before mochi looks at the old session (OnSessionEstablish: after
// authentication, before inheritClientSession), the hub ends the old
// connection as a takeover would and waits until mochi's handling of it
// has returned (outConn.served, closed by the hub's listener and
// ServeConn). A gate per client id makes concurrent connections with one
// id pass one after the other, from the checks of their CONNECT
// (OnConnect) to the point where the client is in mochi's table. Both waits are bounded (reuseWait) and counted.

// reuseWait bounds each wait for an earlier connection with the same id.
const reuseWait = 5 * time.Second

// idGates serialises the establishment of connections sharing a client id.
type idGates struct {
	mu    sync.Mutex
	gates map[string]chan struct{} // closed when its holder opens it
	held  map[*outConn]string      // the gate a connection holds
}

// enter takes the gate of id for c, waiting for an earlier holder at most
// until deadline or stop. It reports false when it gave up.
func (g *idGates) enter(id string, c *outConn, deadline *time.Timer, stop <-chan struct{}) bool {
	for {
		g.mu.Lock()
		busy, ok := g.gates[id]
		if !ok {
			if g.gates == nil {
				g.gates = make(map[string]chan struct{})
				g.held = make(map[*outConn]string)
			}
			g.gates[id] = make(chan struct{})
			g.held[c] = id
			g.mu.Unlock()
			return true
		}
		g.mu.Unlock()
		select {
		case <-busy:
		case <-deadline.C:
			return false
		case <-stop:
			return false
		}
	}
}

// holds reports whether c holds a gate.
func (g *idGates) holds(c *outConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.held[c]
	return ok
}

// leave opens the gate c holds, if any.
func (g *idGates) leave(c *outConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	id, ok := g.held[c]
	if !ok {
		return
	}
	delete(g.held, c)
	close(g.gates[id])
	delete(g.gates, id)
}

// enterGate takes the gate of cl's client id (OnConnect), waiting at most
// reuseWait for a connection with that id being established: the checks of
// its CONNECT and the session it takes are then one step against others
// with its id. Left in OnSessionEstablished, on a refusal, or when the
// connection's handling ends.
func (h *binding) enterGate(cl *mochi.Client) {
	c, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return
	}
	b := h.b
	deadline := time.NewTimer(reuseWait)
	defer deadline.Stop()
	if !b.gates.enter(cl.ID, c, deadline, b.stop) {
		b.reuseTimeouts.Add(1)
		b.log.Warn("mqtt client id still being established by another connection; going ahead", "client", cl.ID)
	}
}

// OnSessionEstablish makes way for cl: an earlier connection with its id
// is ended and gone from mochi before mochi takes its session over. An
// anonymous client's session then ends with its connection (anonymous.go).
func (h *binding) OnSessionEstablish(cl *mochi.Client, pk packets.Packet) {
	h.makeWay(cl)
	h.b.sendReplaced(cl, pk) // willdelay.go
	if self(cl) == "" {
		h.ephemeral(cl, pk)
	} else {
		h.b.staleGroupMessages(cl.ID)
	}
}

// makeWay ends an earlier connection with cl's client id and waits until
// mochi is done with it.
func (h *binding) makeWay(cl *mochi.Client) {
	c, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return
	}
	b := h.b
	deadline := time.NewTimer(reuseWait)
	defer deadline.Stop()
	if !b.gates.holds(c) {
		return // enterGate gave up waiting: going ahead, as it logged
	}
	old, ok := b.server.Clients.Get(cl.ID)
	if !ok || old == cl {
		return
	}
	oc, ok := old.Net.Conn.(*outConn)
	if !ok {
		return // a session restored from storage: nothing serves it
	}
	if !old.Closed() {
		b.log.Info("mqtt client id taken over by a new connection", "client", cl.ID,
			"remote", cl.Net.Remote, "previous", old.Net.Remote)
		// As mochi's takeover does [MQTT-3.1.4-3]; a 3.1.1 client has no
		// DISCONNECT from the server, its connection is just closed. The
		// write may block on a client that does not read: not here.
		if old.Properties.ProtocolVersion >= 5 {
			go func() { _ = b.server.DisconnectClient(old, packets.ErrSessionTakenOver) }()
		} else {
			old.Stop(packets.ErrSessionTakenOver)
		}
	}
	select {
	case <-oc.served:
	case <-deadline.C:
		b.reuseTimeouts.Add(1)
		b.log.Warn("earlier mqtt connection with the same client id still not ended; going ahead", "client", cl.ID)
		old.Stop(packets.ErrSessionTakenOver) // closes it, ending a blocked write
	case <-b.stop:
	}
}

// establish serves c on listener through mochi (its EstablishFn, or
// EstablishConnection for ServeConn) and marks its end (see
// OnSessionEstablish).
func (b *Broker) establish(c *outConn, listener string, serve listeners.EstablishFn) error {
	err := c.readConnect(&b.connectHeads)
	if err == nil {
		err = serve(listener, c)
	} else {
		_ = c.closeRaw()
	}
	b.connEnded(c)
	return err
}

// connEnded counts a connection that never sent its CONNECT in time and
// marks the end of c's handling.
func (b *Broker) connEnded(c *outConn) {
	if !c.connected.Load() && c.connectBy != 0 && monoOf(time.Now()) >= c.connectBy {
		b.countRefusalReason(reasonConnectTimeout)
	}
	b.established(c)
}

// established marks the end of c's handling.
func (b *Broker) established(c *outConn) {
	b.gates.leave(c)
	close(c.served)
}

// ReuseTimeouts returns how often a connection went ahead without an
// earlier connection with its client id having ended (reuseWait).
func (b *Broker) ReuseTimeouts() uint64 { return b.reuseTimeouts.Load() }
