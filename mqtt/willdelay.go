package mqtt

import (
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Wills on the hub's connection loop (connloop.go). mochi's sendLWT and
// its delayed-will table are unexported, so the hub publishes a will as
// mochi would (OnWill, then retain and deliver, then OnWillSent), through
// its own delivery path (fanOut), and keeps the wills with a Will Delay
// Interval on timers of its own, one per client id. A new connection
// that resumes the session cancels its will [MQTT-3.1.3-9]. Unlike
// mochi, a delayed will is also sent when the session ends before the
// delay is over (MQTT 5 §3.1.3.2.2): at once when the session ends with
// its connection (Session Expiry 0), when a clean start with the client
// id replaces it, and at the Session Expiry Interval when that is shorter
// (a DISCONNECT may have shortened it); and a
// retained delayed will is retained whether or not its session still
// exists (mochi retains it only then).

// willTimers are the delayed wills, by client id.
type willTimers struct {
	mu     sync.Mutex
	timers map[string]*delayedWill
	closed bool
}

// delayedWill is one will waiting for its delay.
type delayedWill struct {
	t    *time.Timer
	send func()
}

// add arms a timer running send after d for id, replacing id's earlier one.
func (w *willTimers) add(id string, d time.Duration, send func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.timers == nil {
		w.timers = make(map[string]*delayedWill)
	}
	if old, ok := w.timers[id]; ok {
		old.t.Stop()
	}
	dw := &delayedWill{send: send}
	dw.t = time.AfterFunc(d, func() {
		if w.take(id, dw) {
			send()
		}
	})
	w.timers[id] = dw
}

// take removes dw, id's will, when it is still there; false when it was
// cancelled, sent or replaced meanwhile.
func (w *willTimers) take(id string, dw *delayedWill) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.timers[id] != dw {
		return false
	}
	delete(w.timers, id)
	return true
}

// cancel drops id's delayed will, if any: a new connection to its session
// [MQTT-3.1.3-9].
func (w *willTimers) cancel(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if dw, ok := w.timers[id]; ok {
		dw.t.Stop()
		delete(w.timers, id)
	}
}

// sendNow sends id's delayed will at once, if any: its session ended (a
// clean start with its client id).
func (w *willTimers) sendNow(id string) {
	w.mu.Lock()
	dw, ok := w.timers[id]
	if ok {
		dw.t.Stop()
		delete(w.timers, id)
	}
	w.mu.Unlock()
	if ok {
		dw.send()
	}
}

// len is the number of delayed wills waiting.
func (w *willTimers) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.timers)
}

// close drops every delayed will: the broker is stopping (as mochi's event
// loop ends with its table).
func (w *willTimers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, dw := range w.timers {
		dw.t.Stop()
	}
	w.timers = nil
}

// sendWill publishes cl's will, as mochi's sendLWT does, or keeps it for
// its Will Delay Interval. ending says the session ends with the
// connection: the will goes out now.
func (b *Broker) sendWill(cl *mochi.Client, ending bool) {
	if atomic.LoadUint32(&cl.Properties.Will.Flag) == 0 {
		return
	}
	will := b.onWill(cl, cl.Properties.Will)
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type:   packets.Publish,
			Retain: will.Retain, // [MQTT-3.1.2-14] [MQTT-3.1.2-15]
			Qos:    will.Qos,
		},
		TopicName:  will.TopicName,
		Payload:    will.Payload,
		Properties: packets.Properties{User: will.User},
		Origin:     cl.ID,
		Created:    time.Now().Unix(),
	}
	if delay := cl.Properties.Will.WillDelayInterval; delay > 0 && !ending {
		if cl.Properties.ProtocolVersion == 5 {
			delay = min(delay, cl.Properties.Props.SessionExpiryInterval)
		}
		// Kept in the packet as mochi does: the hooks tell a delayed
		// will by it (hook.go, OnWillSent, onDelayedWill).
		pk.Connect.WillProperties.WillDelayInterval = cl.Properties.Will.WillDelayInterval
		b.wills.add(cl.ID, time.Duration(delay)*time.Second, func() { b.sendDelayedWill(cl, pk) })
		return
	}
	b.publishWill(cl, pk)                           // [MQTT-3.1.2-8]
	atomic.StoreUint32(&cl.Properties.Will.Flag, 0) // [MQTT-3.1.2-10]
	b.onWillSent(cl, pk)
}

// sendDelayedWill publishes a will whose delay is over, as mochi's
// sendDelayedLWT does.
func (b *Broker) sendDelayedWill(cl *mochi.Client, pk packets.Packet) {
	if b.closed.Load() {
		return
	}
	b.publishWill(cl, pk) // [MQTT-3.1.2-8]
	// Only the session the will belongs to forgets it: a connection that
	// took the id over in the meantime keeps its own will.
	if cur, ok := b.server.Clients.Get(cl.ID); ok && cur == cl {
		cur.Properties.Will = mochi.Will{} // [MQTT-3.1.2-10]
		b.onWillSent(cur, pk)
	}
}

// publishWill retains and delivers a will through the hub's delivery path;
// a will dropped by OnWill (no topic) goes nowhere. Should a subscriber be
// on a connection the broker did not wrap, mochi delivers it, from the
// inline client.
func (b *Broker) publishWill(cl *mochi.Client, pk packets.Packet) {
	if pk.TopicName == "" {
		return
	}
	// The hub's path encodes the will itself: the properties mochi's Will
	// does not keep travel in willKey until here (will.go).
	restoreWillProperties(&pk)
	if b.fanOut(cl, pk) {
		return
	}
	pk.PacketID = uint16(pk.FixedHeader.Qos) // mochi checks a QoS > 0 packet has one
	if err := b.server.InjectPacket(b.inline, pk); err != nil {
		b.log.Debug("cannot publish a will", "client", cl.ID, "err", err)
	}
}
