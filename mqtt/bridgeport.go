package mqtt

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The broker's side of the MQTT bridge (package bridge, PROTOCOL §9). The
// bridge publishes what comes from upstream through an inline client of
// its own, BridgeClientID, so every publish it makes carries that id as
// its origin: its local subscriptions (inline ones) tell its own messages
// apart and never send them back up. No connection may take the id
// (OnConnectAuthenticate). What never leaves the hub is not shown to it:
// join results and membership credentials, reply inboxes and group
// channels.

// BridgeClientID is the client id of the bridge's publishes on the broker.
const BridgeClientID = "inline-bridge"

// bridgeSubIDBase numbers the bridge's inline subscriptions apart from the
// broker's own.
const bridgeSubIDBase = 1 << 20

// BridgePort publishes and subscribes on the broker for the bridge.
type BridgePort struct {
	b  *Broker
	cl *mochi.Client
	mu sync.Mutex
	n  int
}

// BridgePort returns the bridge's door to the broker. Call it after Serve.
func (b *Broker) BridgePort() *BridgePort {
	cl := b.server.NewClient(nil, mochi.LocalListener, BridgeClientID, true)
	cl.Properties.ProtocolVersion = 5 // keeps MQTT 5 properties
	return &BridgePort{b: b, cl: cl}
}

// Publish publishes pk as the bridge; the ACL does not apply (the bridge
// publishes only on topics its configuration names, outside lmos/).
func (p *BridgePort) Publish(pk packets.Packet) error {
	if p.b.closed.Load() {
		return errors.New("the mqtt broker is closed")
	}
	pk.FixedHeader.Type = packets.Publish
	if err := p.b.server.InjectPacket(p.cl, pk); err != nil {
		return fmt.Errorf("cannot publish %s on the broker: %w", pk.TopicName, err)
	}
	return nil
}

// Subscribe calls handler with every publish filter matches, retained ones
// first; own is true for the bridge's own. handler runs on the publisher's
// goroutine.
func (p *BridgePort) Subscribe(filter string, handler func(pk packets.Packet, own bool)) (func(), error) {
	p.mu.Lock()
	p.n++
	id := bridgeSubIDBase + p.n
	p.mu.Unlock()
	fn := func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		if hubOnly(pk.TopicName) {
			return
		}
		handler(pk, pk.Origin == BridgeClientID)
	}
	if err := p.b.server.Subscribe(filter, id, fn); err != nil {
		return nil, fmt.Errorf("cannot subscribe the bridge to %s: %w", filter, err)
	}
	var once sync.Once
	return func() { once.Do(func() { _ = p.b.server.Unsubscribe(filter, id) }) }, nil
}

// hubOnly reports whether a topic's messages never leave the hub: join
// results (credentials), membership credentials, reply inboxes and group
// channels.
func hubOnly(topic string) bool {
	if strings.HasPrefix(topic, lmos.ClientsPrefix) || strings.HasPrefix(topic, lmos.GroupsPrefix) {
		return true
	}
	t, ok := parseThingTopic(topic)
	return ok && (t.kind == kindTDResult || strings.HasPrefix(t.rest, "credentials/"))
}

// Who may use a bridged area (BridgedArea.Subscribe, .Publish), by the
// one access policy (hub.Access) on no particular Thing.
const (
	// BridgeNone: nobody (the bridge alone publishes there).
	BridgeNone = "none"
	// BridgeRead: whoever may subscribe to the events of a Thing that
	// requires no security: tokens of any scope, admitted Things, and
	// anonymous clients when access.anonymous allows reads.
	BridgeRead = "read"
	// BridgeOperate: whoever may invoke the actions of such a Thing:
	// operate and admin tokens, admitted Things, and anonymous clients
	// when access.anonymous is operate.
	BridgeOperate = "operate"
	// BridgeAuthenticated: operate and admin tokens and admitted Things,
	// never an anonymous client.
	BridgeAuthenticated = "authenticated"
)

// BridgeAccessLevels are the valid values of BridgedArea.Subscribe and
// .Publish.
var BridgeAccessLevels = []string{BridgeNone, BridgeRead, BridgeOperate, BridgeAuthenticated}

// BridgedArea is the local side of a bridged topic outside lmos/ (a topic
// filter whose first level is a literal): the topic ACL opens it to whom
// Subscribe and Publish name (PROTOCOL §4.4). The first area that covers a
// filter or topic decides.
type BridgedArea struct {
	Filter    string
	Subscribe string // "" is BridgeRead
	Publish   string // "" is BridgeNone
}

// bridgeACL decides a SUBSCRIBE filter, a PUBLISH or a delivery (write
// false, the topic name) inside a bridged area; decided is false for
// topics no area covers, which the rest of the ACL refuses outside lmos/.
func (h *binding) bridgeACL(cl *mochi.Client, topic string, write bool) (decided, ok bool) {
	areas := h.b.cfg.Bridged
	if len(areas) == 0 {
		return false, false
	}
	f := topic
	if shared, found := strings.CutPrefix(f, "$share/"); found && !write {
		var group string
		if group, f, found = strings.Cut(shared, "/"); !found || group == "" {
			return false, false
		}
	}
	first, _, _ := strings.Cut(f, "/")
	if first == "" || first == "lmos" || strings.HasPrefix(first, "$") || strings.ContainsAny(first, "+#") {
		return false, false
	}
	for _, a := range areas {
		if write && !lmos.TopicMatch(a.Filter, f) || !write && !lmos.FilterCovers(a.Filter, f) {
			continue
		}
		rule := a.Subscribe
		if write {
			rule = a.Publish
		} else if rule == "" {
			rule = BridgeRead
		}
		return true, h.bridgeAllowed(cl, rule)
	}
	return false, false
}

// bridgeAllowed applies one of the Bridge* rules to cl.
func (h *binding) bridgeAllowed(cl *mochi.Client, rule string) bool {
	p := h.principal(cl)
	switch rule {
	case BridgeRead:
		return h.b.access.Allow(p, hub.OpSubscribeEvent, nil) == nil
	case BridgeOperate:
		return h.b.access.Allow(p, hub.OpInvokeAction, nil) == nil
	case BridgeAuthenticated:
		return p.Authenticated() && h.b.access.Allow(p, hub.OpInvokeAction, nil) == nil
	}
	return false // BridgeNone, ""
}
