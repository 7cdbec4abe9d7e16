package mqtt

import (
	"crypto/rand"
	"encoding/base32"
	"net/netip"
	"strings"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// A reply inbox belongs to the connection that holds its client id
// (PROTOCOL §4.4, §10 "MQTT client ids"; issue 24).
//
// Anonymous clients all share the empty username, so the rule that binds
// a client id to the username of its session (sessionOfOther) does not
// keep them apart: any of them could connect with another's client id,
// take the session over (the victim gets DISCONNECT 0x8E) and read what is
// published to lmos/v1/clients/{id}/…, the replies owed to the victim. So
// a client without a Thing identity (anonymous, or username token) holds
// its client id while it is connected: a CONNECT with that id from another
// host is refused with CONNACK 0x85 Client Identifier not valid (MQTT
// 3.1.1: 0x02 identifier rejected), whoever sends it — anonymous, a token,
// or a Thing with its credentials (which anyone can get by joining in join
// mode open). The same host may take it over: that is a client whose TCP
// connection died unnoticed coming back.
//
// "Host" is the exact address (an IPv4 address also when mapped into IPv6),
// not the /64 hub.SourceOf uses for quotas: a home LAN's hosts all share
// one IPv6 /64. Clients behind one NAT share an address and are one host
// here; a consumer that must keep its inbox from them too, or after it
// disconnects, connects with an empty client id and gets a random one
// (assignClientID).

// reasonClientIDHeld counts CONNECTs refused because a connected client
// without a Thing identity at another address holds the client id.
const reasonClientIDHeld = "mqtt.clientIdHeld"

// heldElsewhere reports whether cl's client id is held by a connected
// client without a Thing identity at another address than cl's.
func (h *binding) heldElsewhere(cl *mochi.Client) bool {
	existing, ok := h.b.server.Clients.Get(cl.ID)
	if !ok || existing == cl || existing.Net.Inline || existing.Closed() || self(existing) != "" {
		return false
	}
	return !sameHost(existing.Net.Remote, cl.Net.Remote)
}

// sameHost reports whether two remote addresses (host:port) are one host's.
func sameHost(a, b string) bool {
	ha, hb := remoteHost(a), remoteHost(b)
	pa, errA := netip.ParseAddr(ha)
	pb, errB := netip.ParseAddr(hb)
	if errA != nil || errB != nil {
		return ha == hb
	}
	return pa.Unmap() == pb.Unmap()
}

// assignClientID replaces the client id mochi assigned to a CONNECT with
// an empty one (an xid: a timestamp, the host, the pid and a counter, so
// the next one is easy to guess) by 128 random bits, sent back in the v5
// CONNACK's Assigned Client Identifier as mochi does with its own: an
// inbox nobody can guess, even after its client has left.
func assignClientID(cl *mochi.Client) {
	if cl.Properties.Props.AssignedClientID == "" {
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := "lmos-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	cl.ID = id
	cl.Properties.Props.AssignedClientID = id
}

// refuseClientID answers cl's CONNECT with 0x85 Client Identifier not
// valid (mochi writes 0x02 identifier rejected to an MQTT 3.1.1 client)
// and returns the error that ends the connection.
func (h *binding) refuseClientID(cl *mochi.Client) error {
	if c, ok := cl.Net.Conn.(*outConn); ok {
		h.b.gates.leave(c) // the next connection with this id need not wait for this one's end
	}
	if err := h.b.server.SendConnack(cl, packets.ErrClientIdentifierNotValid, false, nil); err != nil {
		return err
	}
	return packets.ErrClientIdentifierNotValid
}
