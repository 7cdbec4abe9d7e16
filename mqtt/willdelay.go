package mqtt

import (
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Wills with a Will Delay Interval. mochi keeps them in its event loop's
// table (unexported) and sends each once its delay is over, whatever its
// session does meanwhile. MQTT 5 §3.1.3.2.2 sends it when the delay is over
// or the session ends, whichever comes first. Through mochi's hooks:
//
//   - OnWill (shortenWillDelay) sets the delay to what is left of the
//     session: none when the session ends with its connection (Session
//     Expiry 0, a 3.1.1 clean session), so mochi sends the will at once,
//     and a second less than the Session Expiry Interval when that is
//     shorter than the delay (a DISCONNECT may have shortened it), so that
//     mochi's one-second sweeps send the will (and retain it) before they
//     delete the session.
//   - A clean start with the client id within the delay ends the session
//     the will waits in: OnSessionEstablish sends it then (sendReplaced),
//     and mochi forgets its copy as it accepts the new connection.
//
// A connection resuming the session cancels the will [MQTT-3.1.3-9]
// (mochi). The hub counts the wills waiting (lmos_mqtt_delayed_wills).

// delayedWills are the wills mochi holds for their delay, by client id,
// each with the Unix second it is due.
type delayedWills struct {
	mu  sync.Mutex
	due map[string]int64
}

// add notes id's will, due at the Unix second due.
func (w *delayedWills) add(id string, due int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.due == nil {
		w.due = make(map[string]int64)
	}
	w.due[id] = due
}

// remove forgets id's will (sent, or cancelled); it reports whether id had
// one.
func (w *delayedWills) remove(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.due[id]
	delete(w.due, id)
	return ok
}

// len is the number of wills waiting at now (Unix seconds). A will whose
// session mochi deleted first is sent without OnWillSent: it is forgotten
// once it is due.
func (w *delayedWills) len(now int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, due := range w.due {
		if due < now {
			delete(w.due, id)
		}
	}
	return len(w.due)
}

// shortenWillDelay, from OnWill as mochi sends cl's will, bounds its Will
// Delay Interval by what is left of cl's session (see above) and notes the
// will if it still waits. mochi reads the delay from cl after OnWill.
func (b *Broker) shortenWillDelay(cl *mochi.Client, will *mochi.Will) {
	delay := cl.Properties.Will.WillDelayInterval
	if delay == 0 {
		return
	}
	var session uint32 // what is left of the session, in seconds
	switch {
	case cl.Properties.ProtocolVersion < 5:
		if !cl.Properties.Clean {
			session = maxSessionExpiry
		}
	case cl.Properties.Props.SessionExpiryIntervalFlag:
		session = min(cl.Properties.Props.SessionExpiryInterval, maxSessionExpiry)
	default:
		session = 0 // MQTT 5: absent is 0 (§3.1.2.11.2)
	}
	if session <= delay {
		delay = max(session, 1) - 1
	}
	cl.Properties.Will.WillDelayInterval = delay
	will.WillDelayInterval = delay
	if delay > 0 {
		b.wills.add(cl.ID, time.Now().Unix()+int64(delay)+1)
	}
}

// sendReplaced sends the delayed will of the session a clean start with
// cl's id ends (from OnSessionEstablish, before mochi replaces the
// session and drops its copy of the will).
func (b *Broker) sendReplaced(cl *mochi.Client, pk packets.Packet) {
	if !pk.Connect.Clean || !b.wills.remove(cl.ID) {
		return
	}
	old, ok := b.server.Clients.Get(cl.ID)
	if !ok || old == cl || !old.Closed() || old.Properties.Will.Flag == 0 {
		return
	}
	will := b.bind.allowedWill(old, old.Properties.Will)
	if will.TopicName == "" {
		return
	}
	wp := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: will.Retain, Qos: will.Qos}, // [MQTT-3.1.2-14] [MQTT-3.1.2-15]
		TopicName:   will.TopicName,
		Payload:     will.Payload,
		Properties:  packets.Properties{User: will.User},
		Origin:      old.ID,
		Created:     time.Now().Unix(),
	}
	b.publishWill(old, wp) // [MQTT-3.1.2-8]
	old.Properties.Will = mochi.Will{}
	b.bind.OnWillSent(old, wp)
}

// publishWill retains and delivers a will through the hub's delivery path.
// Should a subscriber be on a connection the broker did not wrap, mochi
// delivers it, from the inline client.
func (b *Broker) publishWill(cl *mochi.Client, pk packets.Packet) {
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
