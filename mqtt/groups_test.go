package mqtt

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// groupEnv is a broker with Things a, b (members of group g1), c (no
// member) and d (member of g2 only), each with its MQTT credentials.
type groupEnv struct {
	*env
	creds map[string]*credentials
}

const (
	thingA = "urn:grp:a"
	thingB = "urn:grp:b"
	thingC = "urn:grp:c"
	thingD = "urn:grp:d"
)

func newGroupEnv(t *testing.T, edit func(*Config)) *groupEnv {
	t.Helper()
	g := &groupEnv{env: newEnv(t, edit), creds: map[string]*credentials{}}
	for _, id := range []string{thingA, thingB, thingC, thingD} {
		g.creds[id] = g.thing(t, id)
	}
	g.createGroup(t, "g1", thingA, thingB)
	g.createGroup(t, "g2", thingD)
	return g
}

func (g *groupEnv) createGroup(t *testing.T, gid string, members ...string) {
	t.Helper()
	if _, err := g.reg.CreateGroup(context.Background(), hub.GroupSpec{ID: gid, Title: gid, Members: members}); err != nil {
		t.Fatal(err)
	}
}

// as connects as Thing id (clean start).
func (g *groupEnv) as(t *testing.T, id string) *client {
	t.Helper()
	return mustDial(t, g.addr, withCreds(g.creds[id]))
}

// subCode subscribes to filter and returns the SUBACK's reason code.
func subCode(t *testing.T, c *client, filter string) byte {
	t.Helper()
	ack, err := c.sub(filter)
	if ack == nil || len(ack.Reasons) != 1 {
		t.Fatalf("subscribe %s: %+v %v", filter, ack, err)
	}
	return ack.Reasons[0]
}

func hasGroupSubscription(g *env, clientID, gid string) bool {
	cl, ok := g.b.server.Clients.Get(clientID)
	if !ok {
		return false
	}
	for f := range cl.State.Subscriptions.GetAll() {
		if x, ok := groupChannel(f); ok && x == gid {
			return true
		}
	}
	return false
}

// Members publish and subscribe on their group's channel (also through
// $share) and get every message; a non-member, a member of another group,
// an anonymous and a token client are refused on SUBSCRIBE (0x87) and
// PUBLISH (PUBACK 0x87), wildcard group levels are refused to members too,
// each refusal is counted, and nothing reaches a refused client.
func TestGroupChannelMembersOnly(t *testing.T) {
	g := newGroupEnv(t, nil)
	a, b := g.as(t, thingA), g.as(t, thingB)
	const topic = "lmos/v1/groups/g1/chat"
	if code := subCode(t, a, "lmos/v1/groups/g1/#"); code != 1 {
		t.Fatalf("member a: SUBACK %#x", code)
	}
	if code := subCode(t, b, "$share/s/lmos/v1/groups/g1/+"); code != 1 {
		t.Fatalf("member b, shared: SUBACK %#x", code)
	}

	refused0 := g.b.Refused(hub.EFORBIDDEN)
	c, d, anon := g.as(t, thingC), g.as(t, thingD), mustDial(t, g.addr, nil)
	for _, tc := range []struct {
		who    string
		cl     *client
		filter string
	}{
		{"non-member", c, "lmos/v1/groups/g1/#"},
		{"non-member, shared", c, "$share/s/lmos/v1/groups/g1/chat"},
		{"member of g2", d, "lmos/v1/groups/g1/chat"},
		{"anonymous", anon, "lmos/v1/groups/g1/chat"},
		{"member, wildcard group", a, "lmos/v1/groups/+/chat"},
		{"member, all groups", a, "lmos/v1/groups/#"},
		{"member, shared wildcard group", a, "$share/s/lmos/v1/groups/+/chat"},
		{"non-member, everything", c, "#"},
		{"non-member, lmos/v1/#", c, "lmos/v1/#"},
		{"non-member, lmos/+/groups/g1/chat", c, "lmos/+/groups/g1/chat"},
	} {
		if code := subCode(t, tc.cl, tc.filter); code != 0x87 {
			t.Errorf("%s: SUBACK %#x for %s, want 0x87", tc.who, code, tc.filter)
		}
	}
	for _, cl := range []*client{c, d, anon} {
		pr, err := cl.pub(topic, []byte("intruder"), 1, false, "")
		if err == nil || pr == nil || pr.ReasonCode != 0x87 {
			t.Fatalf("non-member publish: %+v %v", pr, err)
		}
	}
	// 7 group filters + 3 publishes; the three broad filters are the
	// ACL's old refusals, not the group's.
	if got := g.b.Refused(hub.EFORBIDDEN) - refused0; got != 10 {
		t.Errorf("lmos_mqtt_refused_total{reason=forbidden} grew by %d, want 10", got)
	}

	const n = 50
	for i := range n {
		a.mustPub(topic, fmt.Appendf(nil, "a%d", i), byte(i%2), false)
		b.mustPub(topic, fmt.Appendf(nil, "b%d", i), byte(i%2), true) // retain is cleared
	}
	for _, m := range []*client{a, b} {
		got := map[string]bool{}
		for range 2 * n {
			p := m.next(topic)
			if p.Retain {
				t.Errorf("delivered retained: %s", p.Payload)
			}
			got[string(p.Payload)] = true
		}
		if len(got) != 2*n {
			t.Errorf("a member got %d distinct messages, want %d", len(got), 2*n)
		}
	}
	for _, cl := range []*client{c, d, anon} {
		cl.none(topic, 50*time.Millisecond)
	}
	// Nothing was retained for a later subscriber.
	if ms := g.b.server.Topics.Messages(topic); len(ms) != 0 {
		t.Errorf("retained on a group channel: %d", len(ms))
	}
}

// Removing a member drops its group subscriptions at once, before
// RemoveMember returns, in every session of the Thing, connected or not;
// its publishes are refused from then on; re-adding restores nothing by
// itself (it subscribes again).
func TestGroupRemovalDropsSubscriptions(t *testing.T) {
	g := newGroupEnv(t, nil)
	a := g.as(t, thingA)
	a.mustSub("lmos/v1/groups/g1/#")
	// An offline persistent session of b with a group subscription.
	b := mustDial(t, g.addr, persistentAs(g.creds[thingB], "b-persist", 3600))
	b.mustSub("$share/s/lmos/v1/groups/g1/chat")
	b.mustSub(lmos.ThingsPrefix + "+/td")
	b.close()
	testwait.Eventually(t, 5*time.Second, "b's session offline", func() bool {
		cl, ok := g.b.server.Clients.Get("b-persist")
		return ok && cl.Closed()
	})

	ctx := context.Background()
	if _, err := g.reg.RemoveMember(ctx, "g1", thingA); err != nil {
		t.Fatal(err)
	}
	if hasGroupSubscription(g.env, a.C.ClientID(), "g1") {
		t.Error("a still subscribed after its removal was acknowledged")
	}
	if g.b.Subscribers("lmos/v1/groups/g1/chat") != 1 {
		t.Errorf("subscribers of the channel: %d, want 1 (b's offline session)", g.b.Subscribers("lmos/v1/groups/g1/chat"))
	}
	pr, err := a.pub("lmos/v1/groups/g1/chat", []byte("x"), 1, false, "")
	if err == nil || pr == nil || pr.ReasonCode != 0x87 {
		t.Fatalf("removed member publish: %+v %v", pr, err)
	}

	// Dissolving drops b's offline session's subscription, not its others.
	if err := g.reg.DissolveGroup(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if hasGroupSubscription(g.env, "b-persist", "g1") {
		t.Error("b's offline session still subscribed after the group was dissolved")
	}
	cl, _ := g.b.server.Clients.Get("b-persist")
	if _, ok := cl.State.Subscriptions.Get(lmos.ThingsPrefix + "+/td"); !ok {
		t.Error("b lost a subscription outside the group")
	}
	// The dropped subscription is gone from the broker store too.
	g.restart()
	if hasGroupSubscription(g.env, "b-persist", "g1") {
		t.Error("b's group subscription came back after a restart")
	}
}

