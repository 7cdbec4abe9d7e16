package ws

import (
	"sync"

	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Membership credentials for WebSocket agents (PROTOCOL §5, §7): the hub
// sends groupCredential{group, credential} to the socket that registered a
// Thing when it becomes a member, and for each of its memberships once a
// registerThing is accepted (the agent's inbox; a consumer without a
// Thing gets none); groupCredential{group} without a credential says the
// membership ended.

// credentialQueue bounds the added memberships waiting to be sent; one
// group write may add up to hub.MaxGroupMembers.
const credentialQueue = 4 * hub.MaxGroupMembers

// credentialSender carries added memberships from the registry's write
// loop (which must not block) to the sockets.
type credentialSender struct {
	once sync.Once
	q    chan hub.MembershipChange
}

// watchCredentials follows the registry's added memberships.
func (g *Transport) watchCredentials() {
	g.creds.q = make(chan hub.MembershipChange, credentialQueue)
	g.reg.OnMembershipChange(func(c hub.MembershipChange) {
		g.creds.once.Do(func() { go g.sendCredentials() })
		select {
		case g.creds.q <- c:
		default:
			g.dropped.Inc() // the agent gets it at its next registerThing
		}
	})
}

// sendCredentials sends each added membership's credential to the socket
// of its Thing, if one is connected, until the transport closes.
func (g *Transport) sendCredentials() {
	for {
		select {
		case <-g.closing:
			return
		case c := <-g.creds.q:
			g.mu.Lock()
			wc := g.agents[c.Thing]
			g.mu.Unlock()
			switch {
			case wc == nil:
			case c.Added:
				wc.sendCredential(c.Thing, c.Group)
			case !g.reg.IsMember(c.Group, c.Thing):
				wc.sendEnded(c.Thing, c.Group)
			}
		}
	}
}

// sendCredentialsOf sends the credential of each of thing's memberships
// (after its registerThing was accepted).
func (wc *wsConn) sendCredentialsOf(thing string) {
	for _, gid := range wc.g.reg.GroupsOf(thing) {
		wc.sendCredential(thing, gid)
	}
}

// sendEnded tells the agent its membership of gid ended: groupCredential
// without a credential.
func (wc *wsConn) sendEnded(thing, gid string) {
	wc.mu.Lock()
	media := wc.media
	wc.mu.Unlock()
	if media == "" {
		media = lmos.MediaJSON
	}
	wc.enqueue(&wsOut{MessageID: uuid.NewString(), MessageType: lmos.WSGroupCredential, ThingID: thing, Group: gid}, media, dropIfFull)
}

// sendCredential sends thing's credential of group gid in the agent's
// encoding; a membership that ended meanwhile sends nothing, nor does a
// Thing this connection did not prove to be (wsConn.members): a
// credential proves membership to whoever holds it.
func (wc *wsConn) sendCredential(thing, gid string) {
	wc.mu.Lock()
	proven := wc.members[thing]
	wc.mu.Unlock()
	if !proven {
		return
	}
	cred, err := wc.g.reg.MemberCredential(gid, thing)
	if err != nil {
		return
	}
	wc.mu.Lock()
	media := wc.media
	wc.mu.Unlock()
	if media == "" {
		media = lmos.MediaJSON
	}
	payload, err := wc.g.reg.Decoder().Transcode(cred, lmos.MediaJSON, media)
	if err != nil {
		wc.log.Warn("cannot encode a membership credential", "thing", thing, "group", gid, "err", err)
		return
	}
	out := &wsOut{MessageID: uuid.NewString(), MessageType: lmos.WSGroupCredential, ThingID: thing,
		Group: gid, Credential: payload}
	wc.enqueue(out, media, dropIfFull)
}
