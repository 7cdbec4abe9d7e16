package mqtt

import (
	"strings"

	mochi "github.com/mochi-mqtt/server/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The MQTT door of the one access policy (hub.Access, PROTOCOL §4.4). The
// topic ACL (topic.go) says which topics a kind of client may use at all;
// the policy then decides, as on every other door, what the principal may
// do with the Thing a topic names: a SUBSCRIBE to a property is a read and
// an observation, to an event a subscription, to a td or status topic a
// directory read; a PUBLISH to …/set a write, to an action an invocation.
// What a Thing does on its own topics, joins (…/td publishes and their
// results) and the reply inboxes are not the policy's (the join policy and
// the ACL govern them).

// TokenUsername is the MQTT username of a client that authenticates with a
// bearer token (the password is the secret). No Thing can have it as its
// topic key: a Thing id is a URI and has a scheme.
const TokenUsername = "token"

// principal is who cl is: a token's principal, its Thing, or anonymous.
func (h *binding) principal(cl *mochi.Client) hub.Principal {
	remote := remoteHost(cl.Net.Remote)
	if c, ok := cl.Net.Conn.(*outConn); ok {
		if t := c.token.Load(); t != nil {
			return hub.TokenPrincipal(*t, remote)
		}
	}
	if s := self(cl); s != "" {
		// A Thing while it is registered: the credential of one an admin
		// deleted (kept so that it may re-join) is no Thing's any more.
		if id, ok := idOf(s); ok {
			if t := h.thingOf(s); t != nil {
				return hub.ThingPrincipal(id, remote, t.Meta.Admitted)
			}
		}
	}
	return hub.AnonymousFrom(hub.SourceOf(remote))
}

// governed classifies a topic name or filter (already allowed by the
// ACL) for the policy: the operation it stands for and the Thing's topic
// key ("+" for any Thing); ok false for topics the policy leaves alone.
func governed(topic string, write bool) (op hub.Op, tid string, ok bool) {
	f := topic
	if shared, found := strings.CutPrefix(f, "$share/"); found {
		_, f, _ = strings.Cut(shared, "/")
	}
	if !write && (f == lmos.HubEventsTopic || f == lmos.TopicRoot+lmos.HubLevel+"/#" || f == lmos.TopicRoot+lmos.HubLevel+"/+") {
		// The registry's change feed, as GET /events: a directory read.
		// lmos/v1/hub/status stays open to all: an agent finds the
		// directory there before it has any right.
		return hub.OpReadDirectory, "+", true
	}
	if _, _, isGA := groupActionOf(f); write && isGA {
		// A group action is an invocation; each member is decided again.
		return hub.OpInvokeAction, "+", true
	}
	tail, found := strings.CutPrefix(f, lmos.ThingsPrefix)
	if !found {
		return "", "", false
	}
	tid, rest, found := strings.Cut(tail, "/")
	if !found || tid == "" {
		return "", "", false
	}
	kind, after, _ := strings.Cut(rest, "/")
	_, more, nested := strings.Cut(after, "/")
	switch {
	case write && kind == "actions" && !nested:
		return hub.OpInvokeAction, tid, true
	case write && kind == "properties" && more == "set":
		return hub.OpWriteProperty, tid, true
	case write:
		return "", "", false
	case rest == "td" || rest == "status":
		return hub.OpReadDirectory, tid, true
	case kind == "properties" && !nested:
		return hub.OpObserveProperty, tid, true
	case kind == "events" && !nested:
		return hub.OpSubscribeEvent, tid, true
	}
	return "", "", false
}

// thingOf is the registered Thing of topic key tid, nil for "+" or an id
// that is not registered (nothing of it can be delivered yet; deliveries
// are checked again once it is).
func (h *binding) thingOf(tid string) *hub.Thing {
	id, ok := idOf(tid)
	if !ok {
		return nil
	}
	t, err := h.b.reg.Get(id)
	if err != nil {
		return nil
	}
	return &t
}

// allowTopic asks the policy about cl using topic (a filter, a published
// topic or a delivery); nil when allowed or not the policy's.
func (h *binding) allowTopic(cl *mochi.Client, topic string, write bool) error {
	op, tid, ok := governed(topic, write)
	if !ok {
		return nil
	}
	if s := self(cl); s != "" && s == tid {
		return nil // a Thing's own topics
	}
	return h.b.access.Allow(h.principal(cl), op, h.thingOf(tid))
}

// refusedByPolicy is allowTopic for a SUBSCRIBE or PUBLISH the client
// made: a refusal is logged and counted (lmos_mqtt_refused_total{reason}).
func (h *binding) refusedByPolicy(cl *mochi.Client, topic string, write bool) bool {
	err := h.allowTopic(cl, topic, write)
	if err == nil {
		return false
	}
	h.b.countRefusalReason(hub.RefusalReason(err))
	h.b.logRefusal(cl.ID, topic, write, hub.RefusalReason(err))
	return true
}

// mayDeliver is the check of one delivery to subscriber cl: the ACL and
// the policy (a Thing's TD may have come to require security since the
// subscription was made). Refused deliveries are counted as dropped.
func (h *binding) mayDeliver(cl *mochi.Client, topic string) bool {
	return h.aclCheck(cl, topic, false) && h.allowTopic(cl, topic, false) == nil
}

// openToAll reports whether every subscriber may receive a delivery on
// topic as far as the policy goes (anonymous clients may), so the fan-out
// need not ask for each one.
func (h *binding) openToAll(topic string) bool {
	op, tid, ok := governed(topic, false)
	if !ok {
		return true
	}
	// Asked on every publish: the Thing is looked at here, not copied to
	// the heap as thingOf's result is.
	id, ok := idOf(tid)
	if !ok {
		return h.b.access.OpenToAll(op, nil)
	}
	t, err := h.b.reg.Get(id)
	if err != nil {
		return h.b.access.OpenToAll(op, nil)
	}
	return h.b.access.OpenToAll(op, &t)
}

// authenticateToken checks a CONNECT with username TokenUsername: the
// password must be a valid token (not revoked, not expired).
func (h *binding) authenticateToken(cl *mochi.Client, password []byte) bool {
	if h.b.cfg.Tokens == nil {
		return false
	}
	t, err := h.b.cfg.Tokens.Verify(string(password))
	if err != nil {
		h.b.countRefusalReason(hub.RefusalReason(err))
		h.b.log.Debug("refusing a token connection", "client", cl.ID, "err", err)
		return false
	}
	c, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return false
	}
	c.token.Store(&t)
	return true
}
