package mqtt

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// GroupBus is the broker's side of hub.GroupChannels: members on other
// doors (WebSocket, HTTP SSE) publish on a group channel through the
// broker, so MQTT members get their messages as any other, and receive
// what anyone publishes there through one inline subscription to
// lmos/v1/groups/#, fanned out here to their subscriptions. Membership is
// checked on every publish, subscribe and delivery, and a membership that
// ends drops that member's subscriptions in the registry's write loop,
// before the change is acknowledged (hub.Registry.OnMembershipChange).
// Who may use the channels over MQTT itself is the MQTT ACL's business.
type GroupBus struct {
	b *Broker

	mu sync.RWMutex
	// subs are the subscriptions by group id, then member: adding and
	// removing one costs the same however many there are (a member may
	// hold thousands over many WebSocket connections), and a removal
	// finds the member's at once. A delivery copies the group's out under
	// the read lock and delivers without it.
	subs map[string]map[string]map[*groupSub]struct{}

	delivered, refused atomic.Uint64
}

var _ hub.GroupChannels = (*GroupBus)(nil)

type groupSub struct {
	hub.GroupSubscription
	// done is set by cancel or the end of the membership: nothing is
	// delivered after it.
	done atomic.Bool
}

// NewGroupBus serves group channels for the other doors over the running
// broker b.
func NewGroupBus(b *Broker) (*GroupBus, error) {
	if err := b.Err(); err != nil {
		return nil, err
	}
	g := &GroupBus{b: b, subs: make(map[string]map[string]map[*groupSub]struct{})}
	b.reg.OnMembershipChange(g.membershipChanged)
	if err := b.server.Subscribe(lmos.GroupsPrefix+"#", int(subID.Add(1)), g.onPublish); err != nil {
		return nil, fmt.Errorf("cannot subscribe the group channels: %w", err)
	}
	return g, nil
}

// Counts reports the messages delivered to other doors' members and the
// deliveries refused because the subscriber was no longer a member.
func (g *GroupBus) Counts() (delivered, refused uint64) {
	return g.delivered.Load(), g.refused.Load()
}

// WritePrometheus writes the counts for /metrics.
func (g *GroupBus) WritePrometheus(w io.Writer) {
	d, r := g.Counts()
	fmt.Fprintf(w, "# HELP lmos_group_channel_delivered_total Group channel messages delivered to WebSocket and SSE members.\n# TYPE lmos_group_channel_delivered_total counter\nlmos_group_channel_delivered_total %d\n", d)
	fmt.Fprintf(w, "# HELP lmos_group_channel_refused_total Group channel deliveries not made because the subscriber's membership had ended.\n# TYPE lmos_group_channel_refused_total counter\nlmos_group_channel_refused_total %d\n", r)
}

// PublishGroup publishes payload on lmos/v1/groups/{gid}/{rest} for the
// member from speaks for, at QoS 1 (members subscribed at QoS 1 keep it in
// their sessions), not retained.
func (g *GroupBus) PublishGroup(gid, rest string, payload []byte, contentType string, from hub.Principal) error {
	if err := hub.ValidateGroupID(gid); err != nil {
		return err
	}
	if err := hub.ValidGroupTopic(rest); err != nil {
		return err
	}
	if _, err := g.b.access.ChannelMember(from, gid, g.b.reg.IsMember); err != nil {
		return err
	}
	if err := g.b.Err(); err != nil {
		return err
	}
	return g.b.publish(lmos.GroupTopic(gid, rest), payload, false, 1, contentType)
}

// SubscribeGroup adds s; the retained messages its filter matches are
// delivered first, before it returns.
func (g *GroupBus) SubscribeGroup(s hub.GroupSubscription) (func(), error) {
	if err := hub.ValidateGroupID(s.Group); err != nil {
		return nil, err
	}
	if err := hub.ValidGroupFilter(s.Filter); err != nil {
		return nil, err
	}
	if s.Deliver == nil || s.Member == "" {
		return nil, hub.Errorf(hub.EINVALID, "a group subscription needs a member and a delivery")
	}
	sub := &groupSub{GroupSubscription: s}
	// Added first, then the membership checked: a removal committed in
	// between either fails the check or finds the subscription to end.
	g.add(sub)
	if !g.b.reg.IsMember(s.Group, s.Member) {
		g.remove(sub)
		return nil, hub.Errorf(hub.EFORBIDDEN, "%q is not a member of group %q", s.Member, s.Group)
	}
	for _, pk := range g.b.server.Topics.Messages(lmos.GroupTopic(s.Group, s.Filter)) {
		g.deliver(sub, pk, pk.Payload)
	}
	return func() { g.remove(sub) }, nil
}

// add files sub under its group and member.
func (g *GroupBus) add(sub *groupSub) {
	g.mu.Lock()
	defer g.mu.Unlock()
	members := g.subs[sub.Group]
	if members == nil {
		members = make(map[string]map[*groupSub]struct{})
		g.subs[sub.Group] = members
	}
	set := members[sub.Member]
	if set == nil {
		set = make(map[*groupSub]struct{})
		members[sub.Member] = set
	}
	set[sub] = struct{}{}
}

// remove ends sub (cancelled, or its membership ended).
func (g *GroupBus) remove(sub *groupSub) {
	sub.done.Store(true)
	g.mu.Lock()
	defer g.mu.Unlock()
	members := g.subs[sub.Group]
	set := members[sub.Member]
	delete(set, sub)
	if len(set) == 0 {
		delete(members, sub.Member)
	}
	if len(members) == 0 {
		delete(g.subs, sub.Group)
	}
}

// membershipChanged ends the subscriptions of a member that left a group:
// called in the registry's write loop before the removal is acknowledged.
func (g *GroupBus) membershipChanged(c hub.MembershipChange) {
	if c.Added {
		return
	}
	g.mu.Lock()
	members := g.subs[c.Group]
	ended := members[c.Thing]
	delete(members, c.Thing)
	if members != nil && len(members) == 0 {
		delete(g.subs, c.Group)
	}
	g.mu.Unlock()
	for sub := range ended {
		if sub.done.CompareAndSwap(false, true) && sub.Ended != nil {
			sub.Ended()
		}
	}
}

// onPublish is the inline subscription to lmos/v1/groups/#: it runs on
// the publisher's goroutine, so each delivery only queues (Deliver must
// not block).
func (g *GroupBus) onPublish(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
	gid, _ := lmos.GroupOfTopic(pk.TopicName)
	g.mu.RLock()
	var subs []*groupSub
	for _, set := range g.subs[gid] {
		for sub := range set {
			subs = append(subs, sub)
		}
	}
	g.mu.RUnlock()
	var payload []byte
	for _, sub := range subs {
		if payload == nil {
			// The packet's payload may be a reused buffer; the doors
			// queue it.
			payload = bytes.Clone(pk.Payload)
			if payload == nil {
				payload = []byte{}
			}
		}
		g.deliver(sub, pk, payload)
	}
}

func (g *GroupBus) deliver(sub *groupSub, pk packets.Packet, payload []byte) {
	rest := strings.TrimPrefix(pk.TopicName, lmos.GroupsPrefix+sub.Group+"/")
	if sub.done.Load() || len(rest) == len(pk.TopicName) || !hub.MatchGroupFilter(sub.Filter, rest) {
		return
	}
	if !g.b.reg.IsMember(sub.Group, sub.Member) {
		// The removal is installed and its notice on its way (it ends
		// this subscription): nothing more for this member.
		g.refused.Add(1)
		return
	}
	g.delivered.Add(1)
	sub.Deliver(hub.GroupMessage{Group: sub.Group, Topic: pk.TopicName, Payload: payload, ContentType: pk.Properties.ContentType})
}
