package ws

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Group channels over the envelope (a hub extension, PROTOCOL §5/§7):
// subscribeGroup{group, topic} and unsubscribeGroup{group, topic} →
// acknowledgement; publishGroup{group, topic, data} → acknowledgement; the
// hub sends groupMessage{group, topic, data, contentType?} for each message
// on a subscribed channel, whoever published it (MQTT, WebSocket). Topics
// are below lmos/v1/groups/{group}/; a subscription may use MQTT
// wildcards. Only members may: the Thing this connection registered, or
// the Thing its token is bound to (hub.MemberOf); others get an error 401
// (no identity) or 403. When the membership ends, its subscriptions end
// at once: the member gets an error 403 on the subscription's
// correlationId and no group message after it, even one already queued.

// wsMaxGroupSubs bounds the group subscriptions of one connection.
const wsMaxGroupSubs = 64

// wsGroups holds a connection's group subscriptions.
type wsGroups struct {
	mu   sync.Mutex
	subs map[string]*wsGroupSub // group "\x00" filter
}

type wsGroupSub struct {
	cancel func()
	// gone is set when the subscription ends: frames queued for it are
	// not written.
	gone atomic.Bool
	// Fixed at subscribe, read by its deliveries and its end: the
	// subscribeGroup request (correlationId, group, topic, media), its key
	// in wsGroups.subs, and who subscribed (a token is rechecked on each
	// delivery).
	req *wsMessage
	key string
	who hub.Principal
}

func (gs *wsGroups) count() int {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return len(gs.subs)
}

// closeAll cancels every subscription (the connection is gone).
func (gs *wsGroups) closeAll() {
	gs.mu.Lock()
	subs := gs.subs
	gs.subs = nil
	gs.mu.Unlock()
	for _, s := range subs {
		s.gone.Store(true)
		s.cancel()
	}
}

// groupMessage handles subscribeGroup, unsubscribeGroup and publishGroup.
func (wc *wsConn) groupMessage(m *wsMessage) {
	var bad []hub.FieldError
	if m.Group == "" {
		bad = append(bad, hub.FieldError{Field: "/group", Description: "is required"})
	}
	if m.Topic == "" {
		bad = append(bad, hub.FieldError{Field: "/topic", Description: "is required"})
	}
	if len(bad) > 0 {
		wc.replyError(m, &hub.Error{Code: hub.EINVALID, Message: "the message lacks required members", Fields: bad})
		return
	}
	bus := wc.g.cfg.Groups
	if bus == nil {
		wc.replyError(m, hub.Errorf(hub.EUNAVAILABLE, "group channels need the mqtt broker, which is not running"))
		return
	}
	switch m.MessageType {
	case lmos.WSPublishGroup:
		wc.publishGroup(bus, m)
	case lmos.WSSubscribeGroup:
		wc.subscribeGroup(bus, m)
	case lmos.WSUnsubscribeGroup:
		key := m.Group + "\x00" + m.Topic
		wc.groups.mu.Lock()
		s := wc.groups.subs[key]
		delete(wc.groups.subs, key)
		wc.groups.mu.Unlock()
		if s != nil {
			s.gone.Store(true)
			s.cancel()
		}
		wc.ack(m, "unsubscribed")
	}
}

// groupPrincipal is who this connection speaks for on group gid's
// channels: the Thing its token is bound to; else a Thing it registered
// and proved (wsConn.members) and still holds (after an admin deleted
// one, another socket may hold it) that is a member of gid; else its
// consumer, to be refused (a Thing it does not hold or did not prove
// counts as anonymous).
func (wc *wsConn) groupPrincipal(gid string) hub.Principal {
	wc.mu.Lock()
	p := wc.who
	things := make([]string, 0, len(wc.members))
	for id := range wc.members {
		things = append(things, id)
	}
	wc.mu.Unlock()
	if p.Kind == hub.ByToken && p.Token.Thing != "" {
		return p
	}
	slices.Sort(things)
	wc.g.mu.Lock()
	owned := things[:0]
	for _, id := range things {
		if wc.g.agents[id] == wc {
			owned = append(owned, id)
		}
	}
	wc.g.mu.Unlock()
	for _, id := range owned {
		if wc.g.reg.IsMember(gid, id) {
			return hub.ThingPrincipal(id, wc.remote, false)
		}
	}
	if p.Kind == hub.ByThing && !slices.Contains(owned, p.ThingID) {
		return hub.AnonymousFrom(hub.SourceOf(wc.remote))
	}
	return p
}

func (wc *wsConn) publishGroup(bus hub.GroupChannels, m *wsMessage) {
	if !m.HasValue {
		wc.replyError(m, &hub.Error{Code: hub.EINVALID, Message: "publishGroup needs data",
			Fields: []hub.FieldError{{Field: "/data", Description: "is required"}}})
		return
	}
	payload, err := hub.EncodeValue(m.Value, m.Media)
	if err == nil {
		err = bus.PublishGroup(m.Group, m.Topic, payload, m.Media, wc.groupPrincipal(m.Group))
	}
	if err != nil {
		wc.replyError(m, err)
		return
	}
	wc.ack(m, "published")
}

func (wc *wsConn) subscribeGroup(bus hub.GroupChannels, m *wsMessage) {
	if err := hub.ValidateGroupID(m.Group); err != nil {
		wc.replyError(m, err)
		return
	}
	if err := hub.ValidGroupFilter(m.Topic); err != nil {
		wc.replyError(m, err)
		return
	}
	who := wc.groupPrincipal(m.Group)
	member, err := wc.g.access.ChannelMember(who, m.Group, wc.g.reg.IsMember)
	if err != nil {
		wc.replyError(m, err)
		return
	}
	sub := &wsGroupSub{cancel: func() {}, req: m, key: m.Group + "\x00" + m.Topic, who: who}
	if !wc.reserveGroupSub(sub) {
		return
	}
	cancel, err := bus.SubscribeGroup(hub.GroupSubscription{
		Group: m.Group, Filter: m.Topic, Member: member,
		Deliver: func(msg hub.GroupMessage) { wc.deliverGroup(sub, msg) },
		Ended: func() {
			// In the registry's write loop: nothing here waits.
			wc.endGroupSub(sub, hub.Errorf(hub.EFORBIDDEN, "%q is no longer a member of group %q: its subscription ended", member, m.Group), true)
		},
	})
	gs := &wc.groups
	if err != nil {
		gs.mu.Lock()
		if gs.subs[sub.key] == sub {
			delete(gs.subs, sub.key)
		}
		gs.mu.Unlock()
		wc.replyError(m, err)
		return
	}
	gs.mu.Lock()
	if gs.subs[sub.key] == sub && !sub.gone.Load() {
		sub.cancel = cancel
		gs.mu.Unlock()
		wc.ack(m, "subscribed")
		return
	}
	gs.mu.Unlock()
	// Unsubscribed (acknowledged), ended (the member got its error) or the
	// connection closed meanwhile.
	cancel()
}

// reserveGroupSub puts sub in the connection's table before the bus
// subscribes it, so that an unsubscribe or a close meanwhile finds it. It
// answers the request itself and reports false when there is nothing to
// subscribe: the same live subscription exists (acknowledged again) or the
// connection holds wsMaxGroupSubs already.
func (wc *wsConn) reserveGroupSub(sub *wsGroupSub) bool {
	m, gs := sub.req, &wc.groups
	gs.mu.Lock()
	if old := gs.subs[sub.key]; old != nil && !old.gone.Load() {
		gs.mu.Unlock()
		wc.ack(m, "subscribed")
		return false
	}
	delete(gs.subs, sub.key)
	if len(gs.subs) >= wsMaxGroupSubs {
		gs.mu.Unlock()
		wc.replyError(m, hub.Errorf(hub.ERATELIMIT, "too many group subscriptions on this connection (at most %d)", wsMaxGroupSubs))
		return false
	}
	if gs.subs == nil {
		gs.subs = make(map[string]*wsGroupSub)
	}
	gs.subs[sub.key] = sub
	gs.mu.Unlock()
	return true
}

// deliverGroup sends one message of sub's channel, on the publisher's
// goroutine (it queues, never blocks).
func (wc *wsConn) deliverGroup(sub *wsGroupSub, msg hub.GroupMessage) {
	if sub.gone.Load() {
		return
	}
	m := sub.req
	if sub.who.Kind == hub.ByToken {
		// A token revoked or expired since ends the subscription,
		// as it ends every stream opened with it (PROTOCOL §3.5).
		if _, err := wc.g.access.ChannelMember(sub.who, m.Group, wc.g.reg.IsMember); err != nil {
			wc.endGroupSub(sub, err, false)
			return
		}
	}
	prefix := len(lmos.GroupsPrefix) + len(m.Group) + 1
	out := &wsOut{MessageID: uuid.NewString(), MessageType: lmos.WSGroupMessage, CorrelationID: m.MessageID,
		Group: msg.Group, Topic: msg.Topic[prefix:]}
	data, ct := msg.Value(wc.g.reg.Decoder(), m.Media)
	out.Data, out.ContentType = rawValue(data), ct
	wc.enqueueGated(out, m.Media, dropIfFull, &sub.gone)
}

// endGroupSub ends sub once and tells the member why; dropped says the bus
// dropped it already (the membership ended), else it is cancelled here (a
// delivery refused: its token revoked).
func (wc *wsConn) endGroupSub(sub *wsGroupSub, err error, dropped bool) {
	if !sub.gone.CompareAndSwap(false, true) {
		return
	}
	m, gs := sub.req, &wc.groups
	out := reply(m, outError)
	p := hub.ProblemOf(err)
	p.Instance = "/ws"
	out.setProblem(p)
	out.Group, out.Topic = m.Group, m.Topic
	wc.enqueue(out, m.Media, dropIfFull)
	gs.mu.Lock()
	mine := gs.subs[sub.key] == sub
	if mine {
		delete(gs.subs, sub.key)
	}
	cancel := sub.cancel
	gs.mu.Unlock()
	if !dropped {
		wc.g.countRefusal(err)
		if mine {
			// Not on the publisher's goroutine, which delivers. Before
			// SubscribeGroup returned, its caller cancels (gone).
			go cancel()
		}
	}
}
