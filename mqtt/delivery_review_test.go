package mqtt

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
)

// rawConnect5 connects an MQTT 5 client that never acknowledges anything
// (session expiry 3600 s unless clean; Receive Maximum 65,535 by default).
func rawConnect5(t *testing.T, addr, id string, clean bool) net.Conn {
	t.Helper()
	return rawConnect5As(t, addr, id, clean, nil)
}

// rawConnect5As is rawConnect5 with a Thing's credentials (nil: anonymous).
func rawConnect5As(t *testing.T, addr, id string, clean bool, cred *credentials) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	flags := byte(0)
	if clean {
		flags = 2
	}
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', 5, flags, 0, 60, 5, 0x11, 0, 0, 0x0e, 0x10}
	vh = append(vh, 0, byte(len(id)))
	vh = append(vh, id...)
	if cred != nil {
		vh[7] |= 0xc0 // user name and password
		vh = append(vh, 0, byte(len(cred.Username)))
		vh = append(vh, cred.Username...)
		vh = append(vh, 0, byte(len(cred.Password)))
		vh = append(vh, cred.Password...)
	}
	if _, err := conn.Write(append([]byte{0x10, byte(len(vh))}, vh...)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// discard reads conn until it closes, acknowledging nothing.
func discard(conn net.Conn) {
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	}()
}

// subscribeRaw sends a SUBSCRIBE of topic at QoS 1 with packet id.
func subscribeRaw(t *testing.T, conn net.Conn, id uint16, topic string) {
	t.Helper()
	body := []byte{byte(id >> 8), byte(id), 0, byte(len(topic) >> 8), byte(len(topic))}
	body = append(append(body, topic...), 1)
	if _, err := conn.Write(append(appendVarInt([]byte{0x82}, len(body)), body...)); err != nil {
		t.Fatal(err)
	}
}

// Subscribers that stopped acknowledging do not hold a publisher: once
// they have acknowledged nothing for AckGrace, the first publish that finds
// their sessions full cuts them off at once, whatever the slow-client
// timeout, and nothing is dropped.
func TestStuckSubscribersDoNotHoldPublisher(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.SlowClientTimeout = time.Hour
		c.AckGrace = 200 * time.Millisecond
	})
	const id = "urn:stuck-many"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/e"
	owner, _ := joinOwner(t, e, id, nil)
	for i := range 3 {
		conn := rawConnect5(t, e.addr, fmt.Sprintf("stuck-%d", i), true)
		discard(conn)
		subscribeRaw(t, conn, 1, topic)
	}
	eventually(t, 5*time.Second, "three subscribers", func() bool { return e.b.Subscribers(topic) == 3 })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range maxInflight + 1 { // the last one cuts them off, and stays in their sessions
			if _, err := owner.pub(topic, fmt.Appendf(nil, "%d", i), 1, false, ""); err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // bounds a hang: waiting for them would take an hour
		t.Fatal("the publisher waits on subscribers that stopped acknowledging")
	}
	if n := e.b.SlowDisconnects(); n != 3 {
		t.Fatalf("slow disconnects %d, want 3", n)
	}
	if d := e.b.Dropped("session_full"); d != 0 {
		t.Fatalf("session_full drops %d", d)
	}
}

// takeOverWhilePublisherWaits fills the session of a subscriber to topic
// (client id, Clean Start 0, cred nil: anonymous) that acknowledges
// nothing, until owner's next QoS 1 publish waits for room; then another
// connection takes the client id over, and the publisher is released.
func takeOverWhilePublisherWaits(t *testing.T, e *env, owner *client, topic, id string, cred *credentials) {
	t.Helper()
	c1 := rawConnect5As(t, e.addr, id, false, cred)
	discard(c1)
	subscribeRaw(t, c1, 1, topic)
	eventually(t, 5*time.Second, "subscribed", func() bool { return e.b.Subscribers(topic) == 1 })
	var sent atomic.Int64
	go func() {
		for i := range maxInflight + 1 {
			if _, err := owner.pub(topic, fmt.Appendf(nil, "m%d", i), 1, false, ""); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	eventually(t, 10*time.Second, "the publisher waiting", func() bool { return sent.Load() == maxInflight })
	c2 := rawConnect5As(t, e.addr, id, false, cred)
	discard(c2)
	eventually(t, 10*time.Second, "the publisher released", func() bool { return sent.Load() == maxInflight+1 })
}

// A subscriber whose full session is taken over (Clean Start 0) while a
// publisher waits for room gets the waiting message in its new session.
// The subscriber is a Thing connected with its credentials: anonymous
// sessions are never persistent (TestAnonymousTakeoverWhilePublisherWaits).
func TestTakeoverWhilePublisherWaits(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SlowClientTimeout = 20 * time.Second })
	const id = "urn:takeover-wait"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/e"
	owner, _ := joinOwner(t, e, id, nil)
	_, sub := joinOwner(t, e, "urn:takeover-sub", nil)
	takeOverWhilePublisherWaits(t, e, owner, topic, "sess", sub)
	want := fmt.Sprint("m", maxInflight)
	eventually(t, 5*time.Second, "the last message in the new session", func() bool {
		cl, ok := e.b.server.Clients.Get("sess")
		if !ok {
			return false
		}
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if string(pk.Payload) == want {
				return true
			}
		}
		return false
	})
	if d := e.b.Dropped("session_full"); d != 0 {
		t.Fatalf("session_full drops %d", d)
	}
}

// A client that repeats a SUBSCRIBE without acknowledging what the last
// one sent stores each retained message once, not once per SUBSCRIBE.
func TestRepeatedSubscribeStoresRetainedOnce(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:retained-repeat"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/properties/p"
	owner, _ := joinOwner(t, e, id, nil)
	owner.mustPub(topic, make([]byte, 10<<10), 1, true)
	conn := rawConnect5(t, e.addr, "repeat", true)
	discard(conn)
	for i := 1; i <= 3000; i++ {
		subscribeRaw(t, conn, uint16(i), topic)
	}
	eventually(t, 10*time.Second, "every SUBSCRIBE processed", func() bool {
		cl, ok := e.b.server.Clients.Get("repeat")
		return ok && cl.State.Subscriptions.Len() == 1 && e.b.server.Info.PacketsReceived >= 3001
	})
	cl, _ := e.b.server.Clients.Get("repeat")
	if n := cl.State.Inflight.Len(); n != 1 {
		t.Fatalf("the session stores %d copies of one retained message", n)
	}
}

// A client cannot forge the hub's carrier of will properties on a PUBLISH:
// it would become a Response Topic (here the Thing's own td) that the
// publish-time check never saw.
func TestForgedWillCarrierDropped(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:forge"
	tid := lmos.TopicKey(id)
	owner, _ := joinOwner(t, e, id, nil)
	topic := lmos.ThingsPrefix + tid + "/properties/p"
	props := &paho.PublishProperties{User: paho.UserProperties{{Key: willKey, Value: `{"rt":"lmos/v1/things/` + tid + `/td","ct":"evil"}`}, {Key: "kept", Value: "yes"}}}
	if _, err := owner.C.Publish(t.Context(), &paho.Publish{Topic: topic, Payload: []byte(`1`), QoS: 1, Retain: true, Properties: props}); err != nil {
		t.Fatal(err)
	}
	live := mustDial(t, e.addr, nil)
	live.mustSub(topic)
	if _, err := owner.C.Publish(t.Context(), &paho.Publish{Topic: topic, Payload: []byte(`2`), QoS: 1, Properties: props}); err != nil {
		t.Fatal(err)
	}
	late := mustDial(t, e.addr, nil)
	late.mustSub(topic)
	for name, m := range map[string]*paho.Publish{"retained": live.next(topic), "live": live.next(topic), "retained later": late.next(topic)} {
		if m.Properties.ResponseTopic != "" || m.Properties.ContentType != "" || m.Properties.User.Get("kept") != "yes" || m.Properties.User.Get(willKey) != "" {
			t.Errorf("%s delivery: properties %+v", name, m.Properties)
		}
	}
}

// An anonymous subscriber's full session ends when another connection
// takes its client id (anonymous sessions are never persistent): the
// waiting publisher is released, and nothing of the old session — no
// subscription, no message — appears in the new one.
func TestAnonymousTakeoverWhilePublisherWaits(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SlowClientTimeout = 20 * time.Second })
	const id = "urn:takeover-anon"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/e"
	owner, _ := joinOwner(t, e, id, nil)
	takeOverWhilePublisherWaits(t, e, owner, topic, "anon-sess", nil)
	eventually(t, 5*time.Second, "the new connection listed", func() bool {
		cl, ok := e.b.server.Clients.Get("anon-sess")
		return ok && !cl.Closed()
	})
	cl, _ := e.b.server.Clients.Get("anon-sess")
	if n := cl.State.Inflight.Len(); n != 0 {
		t.Errorf("the new anonymous session holds %d messages of the old one", n)
	}
	if subs := cl.State.Subscriptions.GetAll(); len(subs) != 0 {
		t.Errorf("the new anonymous session holds the old subscriptions %v", subs)
	}
	if n := e.b.Subscribers(topic); n != 0 {
		t.Errorf("%d subscribers left on the topic", n)
	}
}
