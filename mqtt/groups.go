package mqtt

import (
	"net"
	"strings"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Group channels (PROTOCOL §4.4, §7, §10): lmos/v1/groups/{gid}/… is open
// to the group's members only, for PUBLISH and SUBSCRIBE alike (also
// through $share), and nobody else, not even a token client. Membership is
// asked of the registry (hub.Registry.IsMember) at every step:
//
//   - a SUBSCRIBE filter and a PUBLISH: the ACL (aclCheck). A filter whose
//     group level is a wildcard is refused (it could reach groups the
//     client is not in); broader filters (#, lmos/v1/#, lmos/+/…) are
//     refused by the ACL anyway (mayRead), so group traffic reaches no one
//     through them;
//   - each delivery: mayDeliver, as for every topic that is not open to
//     all (fanout.go; mochi's own delivery asks OnACLCheck);
//   - the moment a delivery is queued on the connection (enqueueMember,
//     under the connection's lock) and stored in the session (deliverQoS).
//
// A removal (Registry.OnMembershipChange, which runs before the removal
// is acknowledged) takes, in every session of that Thing, connected or
// not: its subscriptions under the group, the group's QoS 1/2 messages
// stored in the session, and the group's packets queued on its connection
// and not yet handed to the socket (revokeGroup). A delivery that checked
// membership before the removal was committed and is queued after the
// purge meets the check under the connection's lock, which the purge also
// takes; one stored in the session after the purge meets the check after
// the store. So nothing of the group is written to the connection after
// the removal is acknowledged, and nothing comes back on resume.

// groupChannel returns the group of a topic name or filter (after any
// $share/{name}/) under lmos/v1/groups/, and whether it is under it.
func groupChannel(topic string) (gid string, ok bool) {
	f := topic
	if shared, found := strings.CutPrefix(f, "$share/"); found {
		_, f, _ = strings.Cut(shared, "/")
	}
	return lmos.GroupOfTopic(f)
}

// groupTopicOK reports whether topic (a name or filter, after any $share
// prefix) names one group's channel: lmos/v1/groups/{gid}/{rest}, gid a
// literal level (no wildcard), rest not empty.
func groupTopicOK(topic string) bool {
	f := topic
	if shared, found := strings.CutPrefix(f, "$share/"); found {
		var name string
		if name, f, found = strings.Cut(shared, "/"); !found || name == "" {
			return false
		}
	}
	rest, ok := strings.CutPrefix(f, lmos.GroupsPrefix)
	if !ok {
		return false
	}
	gid, tail, ok := strings.Cut(rest, "/")
	return ok && gid != "" && tail != "" && !strings.ContainsAny(gid, "+#")
}

// thingID is the id of the Thing cl authenticated as ("" for none), kept
// on the connection: asked for every group delivery.
func thingID(cl *mochi.Client) string {
	s := self(cl)
	if s == "" {
		return ""
	}
	c, ok := cl.Net.Conn.(*outConn)
	if ok {
		if id := c.thing.Load(); id != nil {
			return *id
		}
	}
	id, _ := idOf(s)
	if ok {
		c.thing.Store(&id)
	}
	return id
}

// isMember reports whether cl is a member of group gid now.
func (b *Broker) isMember(cl *mochi.Client, gid string) bool {
	id := thingID(cl)
	return id != "" && b.reg.IsMember(gid, id)
}

// groupAllowed is the group half of the ACL for a SUBSCRIBE filter, a
// PUBLISH or a delivery on topic: true when topic is no group channel or
// cl is a member of its group.
func (h *binding) groupAllowed(cl *mochi.Client, topic string) bool {
	gid, ok := groupChannel(topic)
	return !ok || groupTopicOK(topic) && h.b.isMember(cl, gid)
}

// countGroupRefusal counts a refused SUBSCRIBE filter or PUBLISH on a
// group channel (lmos_mqtt_refused_total{reason="forbidden"}).
func (h *binding) countGroupRefusal(cl *mochi.Client, topic string) {
	if _, ok := groupChannel(topic); ok {
		h.b.countRefusalReason(hub.EFORBIDDEN)
		h.b.log.Debug("group channel refused", "client", cl.ID, "topic", topic)
	}
}

// membershipChanged is the broker's Registry.OnMembershipChange: a Thing
// that left a group loses the group's channels in all its sessions before
// the removal is acknowledged. It runs in the registry's write loop, so it
// only takes short locks.
func (b *Broker) membershipChanged(c hub.MembershipChange) {
	if c.Added || b.closed.Load() {
		return
	}
	for _, cl := range b.revokeIndex.sessionsOf(b, c.Batch, lmos.TopicKey(c.Thing)) {
		b.revokeGroup(cl, c.Group)
	}
}

// revokeIndex groups the broker's sessions by the Thing they authenticated
// as, built once per registry batch: a dissolution of 1,024 members, or a
// deleted Thing leaving 64 groups, would otherwise copy mochi's whole
// client map once per membership (~120 µs per 1,000 sessions) in the
// write loop. One look-up per batch is enough: it is taken after the
// batch is installed, and a session that comes after it meets the new
// memberships at every SUBSCRIBE and delivery.
type revokeIndex struct {
	batch uint64
	// things are client ids by Thing (ids, not sessions: the index
	// outlives its batch until the next one, and must not keep the
	// sessions of clients gone since).
	things map[string][]string
}

// sessionsOf returns the sessions of Thing key (its topic key) that batch
// found. A session being taken over right now is among them: its
// subscriptions are in the index under the same client id.
func (x *revokeIndex) sessionsOf(b *Broker, batch uint64, key string) []*mochi.Client {
	if x.things == nil || batch == 0 || x.batch != batch {
		x.batch = batch
		clear(x.things)
		if x.things == nil {
			x.things = make(map[string][]string)
		}
		for id, cl := range b.server.Clients.GetAll() {
			if s := self(cl); s != "" && !cl.Net.Inline {
				x.things[s] = append(x.things[s], id)
			}
		}
	}
	var out []*mochi.Client
	for _, id := range x.things[key] {
		// No other username's session takes an id over (OnConnect), so
		// the session under id now is still this Thing's; asked anyway.
		if cl, ok := b.server.Clients.Get(id); ok && self(cl) == key {
			out = append(out, cl)
		}
	}
	return out
}

// revokeGroup drops cl's subscriptions under group gid, the group's
// messages stored in its session and those queued on its connection.
func (b *Broker) revokeGroup(cl *mochi.Client, gid string) {
	var gone []packets.Subscription
	for filter, sub := range cl.State.Subscriptions.GetAll() {
		if g, ok := groupChannel(filter); !ok || g != gid {
			continue
		}
		cl.State.Subscriptions.Delete(filter)
		if b.server.Topics.Unsubscribe(filter, cl.ID) {
		}
		gone = append(gone, sub)
	}
	if len(gone) > 0 {
		b.subs.changed()
		b.state.OnUnsubscribed(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe}, Filters: gone})
	}
	for _, pk := range cl.State.Inflight.GetAll(false) {
		if pk.FixedHeader.Type != packets.Publish {
			continue // a PUBREL: the message was delivered
		}
		if g, ok := groupChannel(pk.TopicName); ok && g == gid {
			b.dropStored(cl, pk)
			b.dropped[dropRevoked].Add(1)
		}
	}
	if conn, ok := cl.Net.Conn.(*outConn); ok {
		if n := conn.purgeGroup(gid); n > 0 {
			b.dropped[dropRevoked].Add(uint64(n))
		}
	}
	b.log.Debug("group channel revoked", "client", cl.ID, "group", gid, "subscriptions", len(gone))
}

// dropStored removes the QoS 1/2 delivery pk from cl's session.
func (b *Broker) dropStored(cl *mochi.Client, pk packets.Packet) {
	if cl.State.Inflight.Delete(pk.PacketID) {
		cl.State.Inflight.IncreaseSendQuota()
		b.state.OnQosDropped(cl, pk)
	}
}

// purgeGroup removes the packets of group gid queued on c and not yet
// taken by a writer, and the QoS 1/2 ones waiting for the client's window
// or held behind a SUBSCRIBE's retained messages.
// Their bytes count as written once what was queued ahead of them is
// (skipped: mark and reached stay true). It returns how many it removed.
func (c *outConn) purgeGroup(gid string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	keep := func(q net.Buffers, qos0 *int, skipped *uint64) net.Buffers {
		out := q[:0]
		for _, p := range q {
			topic, qos, id, ok := publishOf(p)
			if g, in := lmos.GroupOfTopic(topic); ok && in && g == gid {
				n++
				*skipped += uint64(len(p))
				if qos == 0 && qos0 != nil {
					*qos0 -= len(p)
				}
				if qos > 0 {
					delete(c.unacked, id)
				}
				continue
			}
			out = append(out, p)
		}
		clear(q[len(out):])
		return out
	}
	c.q = keep(c.q, &c.q0, &c.skipped)
	if h := c.sub; h != nil {
		h.held = keep(h.held, &c.held0, &c.skippedHeld)
		h.pre = keep(h.pre, nil, &c.skippedHeld)
	}
	// Not queued yet (not in enqueued): waiting for the window, or held
	// behind a SUBSCRIBE's retained messages; the caller drops their
	// session copies.
	unqueued := func(pks []packets.Packet) []packets.Packet {
		w := pks[:0]
		for _, pk := range pks {
			if g, in := lmos.GroupOfTopic(pk.TopicName); in && g == gid {
				n++
				continue
			}
			w = append(w, pk)
		}
		clear(pks[len(w):])
		return w
	}
	c.waiting = unqueued(c.waiting)
	if h := c.sub; h != nil {
		h.heldQoS = unqueued(h.heldQoS)
	}
	if c.skipped > 0 && len(c.q) == 0 && !c.flushing && !c.dead {
		// Nothing queued would carry the skipped bytes to written: a
		// flush, once it holds wmu, finds the queue empty and does.
		c.flushing = true
		go c.flush()
	}
	c.wakeLocked()
	return n
}

// publishOf reads the topic, QoS and packet identifier of an encoded
// PUBLISH; ok false for any other packet.
func publishOf(p []byte) (topic string, qos byte, id uint16, ok bool) {
	if len(p) < 2 || p[0]>>4 != packets.Publish {
		return "", 0, 0, false
	}
	qos = p[0] >> 1 & 3
	i := 1
	for ; i < len(p) && i < 5; i++ {
		if p[i]&0x80 == 0 {
			break
		}
	}
	i++ // past the remaining length
	if i+2 > len(p) {
		return "", 0, 0, false
	}
	l := int(p[i])<<8 | int(p[i+1])
	i += 2
	if i+l > len(p) {
		return "", 0, 0, false
	}
	topic = string(p[i : i+l])
	i += l
	if qos > 0 && i+2 <= len(p) {
		id = uint16(p[i])<<8 | uint16(p[i+1])
	}
	return topic, qos, id, true
}

// enqueueMember is enqueue for a delivery on group gid's channel to Thing
// thing: membership is checked under c.mu, which purgeGroup holds, so a
// delivery either is purged or finds the member gone (revoked).
func (c *outConn) enqueueMember(p []byte, kind queueKind, from *outConn, reg *hub.Registry, gid, thing string) queueResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !reg.IsMember(gid, thing) {
		return revoked
	}
	return c.enqueueLocked(p, kind, time.Time{}, from)
}

// recheckGroupFilters takes back a group filter of a SUBSCRIBE that was
// granted while the client's membership was being removed: the ACL said
// yes before the removal was committed, revokeGroup ran before the filter
// was in the index. OnSubscribed runs before the SUBACK is written, and
// codes are its reason codes: the SUBACK says 0x87 (MQTT 3.1.1: 0x80).
func (h *binding) recheckGroupFilters(cl *mochi.Client, pk packets.Packet, codes []byte) {
	if cl.Net.Inline {
		return // the hub's own subscriptions (the group bus, groupbus.go)
	}
	for i, f := range pk.Filters {
		if i >= len(codes) || codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		gid, ok := groupChannel(f.Filter)
		if !ok || h.b.isMember(cl, gid) {
			continue
		}
		cl.State.Subscriptions.Delete(f.Filter)
		if h.b.server.Topics.Unsubscribe(f.Filter, cl.ID) {
		}
		codes[i] = packets.ErrNotAuthorized.Code
		if cl.Properties.ProtocolVersion < 5 {
			codes[i] = packets.ErrUnspecifiedError.Code
		}
		h.b.countRefusalReason(hub.EFORBIDDEN)
	}
}

// staleGroupMessages drops, from the session a Thing's connection is
// about to resume (client id), the stored messages of groups the Thing is
// no longer in: mochi resends a session's messages before anything else
// sees them. revokeGroup took them at the removal; this covers a session
// resumed while the removal ran.
func (b *Broker) staleGroupMessages(clientID string) {
	old, ok := b.server.Clients.Get(clientID)
	if !ok || old.Net.Inline {
		return
	}
	for _, pk := range old.State.Inflight.GetAll(false) {
		if pk.FixedHeader.Type != packets.Publish {
			continue
		}
		if gid, ok := groupChannel(pk.TopicName); ok && !b.isMember(old, gid) {
			b.dropStored(old, pk)
			b.dropped[dropRevoked].Add(1)
		}
	}
}

// revokeStale takes from the sessions loaded from the broker store the
// group subscriptions and stored messages of groups their Thing is no
// longer in: memberships removed while the broker was not running (the
// registry written by another process, or a removal the broker store had
// not yet written when the hub stopped: it writes every flush interval).
func (b *Broker) revokeStale() {
	for _, cl := range b.server.Clients.GetAll() {
		if !cl.Net.Inline {
			b.revokeStaleOf(cl)
		}
	}
}

// revokeStaleOf revokes cl's groups its Thing is no longer in. Also asked
// once a session is established: a removal that ran while mochi moved a
// session to a new connection (between taking the old one over and
// registering the new) did not find the new one.
func (b *Broker) revokeStaleOf(cl *mochi.Client) {
	var gids map[string]bool
	note := func(topic string) {
		if gid, ok := groupChannel(topic); ok {
			if gids == nil {
				gids = map[string]bool{}
			}
			gids[gid] = true
		}
	}
	for f := range cl.State.Subscriptions.GetAll() {
		note(f)
	}
	for _, pk := range cl.State.Inflight.GetAll(false) {
		note(pk.TopicName)
	}
	for gid := range gids {
		if !b.isMember(cl, gid) {
			b.revokeGroup(cl, gid)
		}
	}
}
