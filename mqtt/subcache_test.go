package mqtt

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestSubscriberCacheFollowsEveryChange: the fan-out keeps each topic's
// subscribers while the topic index is unchanged (subcache.go). After each
// kind of change — a SUBSCRIBE, a SUBSCRIBE repeated with another QoS, an
// UNSUBSCRIBE, a clean session ending and its client id coming back, a
// session resumed, a session expired and its id coming back, a shared
// subscription made and removed — the next publish on the same topic
// reaches exactly the subscribers the index has now. A client that must
// not get a publish gets a later one on a second topic first; mosquitto_sub,
// subscribed while the topic's subscribers are kept, counts all it is owed.
func TestSubscriberCacheFollowsEveryChange(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:subcache"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/n"
	other := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/m"
	owner, _ := joinOwner(t, e, id, nil)
	seq := 0
	var owed []string // what mosquitto_sub must get, once it is subscribed
	mosq := false
	pub := func(on string) string {
		t.Helper()
		seq++
		p := fmt.Sprint(seq)
		owner.mustPub(on, []byte(p), 1, false)
		if mosq && on == topic {
			owed = append(owed, p)
		}
		return p
	}
	// got checks that c's next message, on any topic, is p on topic at qos.
	got := func(name string, c *client, on, p string, qos byte) {
		t.Helper()
		select {
		case m := <-c.Msgs:
			if m.Topic != on || string(m.Payload) != p || m.QoS != qos {
				t.Fatalf("%s got %q on %s at QoS %d, want %q on %s at QoS %d", name, m.Payload, m.Topic, m.QoS, p, on, qos)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not get %q on %s", name, p, on)
		}
	}
	// notOwed publishes on topic, which c must not get, then on other,
	// which it must get first.
	notOwed := func(name string, c *client, also ...*client) {
		t.Helper()
		p := pub(topic)
		for _, a := range also {
			got("a subscriber", a, topic, p, 1)
		}
		q := pub(other)
		got(name, c, other, q, 1)
	}
	sub := func(c *client, filter string, qos byte) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.C.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}}); err != nil {
			t.Fatalf("subscribe %s: %v", filter, err)
		}
	}
	unsub := func(c *client, filter string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.C.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{filter}}); err != nil {
			t.Fatalf("unsubscribe %s: %v", filter, err)
		}
	}
	gone := func(clientID string) {
		t.Helper()
		testwait.Eventually(t, 5*time.Second, clientID+" gone", func() bool {
			_, ok := e.b.server.Clients.Get(clientID)
			return !ok
		})
	}
	pubAll := func(subs ...*client) {
		t.Helper()
		p := pub(topic)
		for _, c := range subs {
			got("a subscriber", c, topic, p, 1)
		}
	}

	a := mustDial(t, e.addr, &paho.Connect{ClientID: "a", CleanStart: true, KeepAlive: 30})
	sub(a, topic, 1)
	sub(a, other, 1)
	p := pub(topic) // the topic's subscribers are kept from here
	got("a", a, topic, p, 1)
	p = pub(topic)
	got("a", a, topic, p, 1)

	// SUBSCRIBE.
	b := mustDial(t, e.addr, &paho.Connect{ClientID: "b", CleanStart: true, KeepAlive: 30})
	sub(b, other, 1)
	sub(b, topic, 1)
	const mosqOwed = 14 // the publishes on topic from here
	wait := mosquittoSub(t, e, "mosq", topic, "-V", "mqttv5", "-q", "1", "-C", fmt.Sprint(mosqOwed))
	mosq = true
	pubAll(a, b)

	// The same filter again, at QoS 0.
	sub(a, topic, 0)
	p = pub(topic)
	got("a at QoS 0", a, topic, p, 0)
	got("b", b, topic, p, 1)
	sub(a, topic, 1)

	// UNSUBSCRIBE (each change comes after a publish that kept the
	// topic's subscribers as they were).
	pubAll(a, b)
	unsub(b, topic)
	notOwed("b after UNSUBSCRIBE", b, a)
	got("a", a, other, fmt.Sprint(seq), 1)

	// A clean session ends; its client id comes back without the filter.
	sub(b, topic, 1)
	pubAll(a, b)
	b.close()
	gone("b")
	b = mustDial(t, e.addr, &paho.Connect{ClientID: "b", CleanStart: true, KeepAlive: 30})
	sub(b, other, 1)
	notOwed("b's id again", b, a)
	got("a", a, other, fmt.Sprint(seq), 1)

	// A shared subscription, made and removed.
	s := mustDial(t, e.addr, &paho.Connect{ClientID: "s", CleanStart: true, KeepAlive: 30})
	sub(s, other, 1)
	sub(s, "$share/g/"+topic, 1)
	pubAll(a, s)
	pubAll(a, s)
	unsub(s, "$share/g/"+topic)
	notOwed("s after leaving the group", s, a)
	got("a", a, other, fmt.Sprint(seq), 1)

	// A persistent session: resumed, it gets what it missed and what
	// follows; expired, its id comes back without the filter.
	creds := e.thing(t, "urn:subcache-p")
	ps := mustDial(t, e.addr, persistentAs(creds, "p", 1))
	sub(ps, topic, 1)
	sub(ps, other, 1)
	pubAll(a, ps)
	ps.close()
	offline := func() bool {
		cl, ok := e.b.server.Clients.Get("p")
		return ok && cl.Closed()
	}
	testwait.Eventually(t, 5*time.Second, "p offline", offline)
	missed := pub(topic) // stored in p's session
	got("a", a, topic, missed, 1)
	ps = mustDial(t, e.addr, persistentAs(creds, "p", 1))
	got("p resumed", ps, topic, missed, 1)
	pubAll(a, ps)
	ps.close()
	testwait.Eventually(t, 5*time.Second, "p offline", offline)
	gone("p") // expired after 1 s
	// mochi leaves an expired session's filters in its topic index (they
	// name no client until the id comes back): the topic's subscribers
	// are what they were, and a subscriber made now is one more.
	pubAll(a)
	c := mustDial(t, e.addr, &paho.Connect{ClientID: "c", CleanStart: true, KeepAlive: 30})
	sub(c, topic, 1)
	pubAll(a, c)

	if len(owed) != mosqOwed {
		t.Fatalf("the test published %d messages on %s for mosquitto_sub, not %d", len(owed), topic, mosqOwed)
	}
	if msgs := wait(); strings.Join(msgs, " ") != strings.Join(owed, " ") {
		t.Fatalf("mosquitto_sub got %v, owed %v", msgs, owed)
	}
}

// TestSubscriberCacheBounded: however many topics are published to, the
// kept results stay within their bounds, and a result with many
// subscriptions is not kept.
func TestSubscriberCacheBounded(t *testing.T) {
	e := newEnv(t, nil)
	e.b.server.Topics.Subscribe("w", packets.Subscription{Filter: "bound/+"})
	e.b.subs.changed()
	for i := range 3 * subsCacheTopics {
		topic := fmt.Sprint("bound/", i)
		if s := e.b.subscribers(topic); len(s.Subscriptions) != 1 {
			t.Fatalf("%s: %d subscriptions, want 1", topic, len(s.Subscriptions))
		}
		e.b.subs.mu.RLock()
		topics, subs := len(e.b.subs.m), e.b.subs.subs
		e.b.subs.mu.RUnlock()
		if topics > subsCacheTopics || subs > subsCacheSubs {
			t.Fatalf("after %d topics: %d topics, %d subscriptions kept", i+1, topics, subs)
		}
	}
	for i := range subsCacheSubs / 4 {
		e.b.server.Topics.Subscribe(fmt.Sprint("many-", i), packets.Subscription{Filter: "big/#"})
	}
	e.b.subs.changed()
	e.b.subscribers("big/t")
	e.b.subs.mu.RLock()
	_, kept := e.b.subs.m["big/t"]
	e.b.subs.mu.RUnlock()
	if kept {
		t.Fatal("a result with more than a quarter of the budget was kept")
	}
}

// A topic the cache keeps is its own copy (issue 24): mochi decodes a
// topic name without copying it, so a key aliasing the packet kept the
// whole packet alive — a member's answer of up to 1 MiB to a unique reply
// topic, 256 of them, held hundreds of MB after a burst of group actions.
func TestSubscriberCacheKeepsNoPacket(t *testing.T) {
	e := newEnv(t, nil)
	pkt := []byte("lmos/v1/things/urn:x/events/n and the rest of the packet")
	topic := unsafe.String(&pkt[0], len("lmos/v1/things/urn:x/events/n")) // as mochi's decoder makes it
	e.b.subscribers(topic)
	e.b.subs.mu.RLock()
	defer e.b.subs.mu.RUnlock()
	if _, ok := e.b.subs.m[topic]; !ok {
		t.Fatal("the topic's subscribers are not kept")
	}
	for k := range e.b.subs.m {
		if unsafe.StringData(k) == &pkt[0] {
			t.Fatalf("the cache's key %q is the packet's bytes", k)
		}
	}
}
