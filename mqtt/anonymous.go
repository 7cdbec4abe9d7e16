package mqtt

import (
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Anonymous sessions are never persistent (PROTOCOL §10).
//
// A session belongs to an identity, and anonymous clients have none: they
// all share the empty username, so a client id alone would let any of
// them resume another's session, with its subscriptions and whatever is
// owed to it (once, an agent's join result with its fresh credentials).
// An anonymous CONNECT therefore always starts a fresh session, whatever
// its Clean Start (MQTT 3.1.1: Clean Session) flag says, and the session
// ends with the connection: CONNACK Session Present 0 and, for MQTT 5,
// Session Expiry Interval 0, which the server may set
// (MQTT 5 §3.2.2.3.2). Nothing is queued for it offline or kept in the
// broker store. Things connected with their credentials keep persistent
// sessions.

// reasonAnonymousSession counts anonymous CONNECTs that asked for a
// persistent or resumed session and got a fresh one that ends with the
// connection.
const reasonAnonymousSession = "mqtt.anonymousSession"

// ephemeral makes the session of the anonymous client cl end with its
// connection. It runs after makeWay and before mochi looks for a session
// to resume (inheritClientSession), so there is none left to find.
func (h *binding) ephemeral(cl *mochi.Client, pk packets.Packet) {
	asked := !pk.Connect.Clean || (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval > 0)
	cl.Properties.Clean = true
	cl.Properties.Props.SessionExpiryInterval = 0
	if asked {
		h.b.countRefusalReason(reasonAnonymousSession)
		if c, ok := cl.Net.Conn.(*outConn); ok && cl.Properties.ProtocolVersion == 5 {
			c.noExpiry.Store(true) // the CONNACK says so (OnPacketEncode)
		}
	}
	// A session left under this id (restored from an older store, or a
	// connection makeWay gave up waiting for) is discarded, not resumed.
	old, ok := h.b.server.Clients.Get(cl.ID)
	if !ok || old == cl || old.Net.Inline {
		return
	}
	h.b.server.UnsubscribeClient(old)
	old.ClearInflights()
	h.b.state.forgetClient(old)
	h.b.server.Clients.Delete(cl.ID)
	if oc, ok := old.Net.Conn.(*outConn); ok {
		// A connection makeWay gave up waiting for: when it ends at last,
		// mochi deletes its clean session by client id, which is cl's
		// entry by then. List cl again, so it keeps its deliveries.
		go func() {
			select {
			case <-oc.served:
			case <-h.b.stop:
				return
			}
			if _, listed := h.b.server.Clients.Get(cl.ID); !listed && !cl.Closed() {
				h.b.server.Clients.Add(cl)
			}
		}()
	}
}
