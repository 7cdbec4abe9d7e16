package mqtt

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

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
	testwait.Eventually(t, 5*time.Second, "three subscribers", func() bool { return e.b.Subscribers(topic) == 3 })
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
//
// Nothing but the takeover can release it (takeoverEnv: no slow-client
// cut-off, no ack grace, and the publishes have no deadline of their
// own), so each wait is on a state that holds until the awaited event and
// is bounded only against a hang: a loaded machine makes the test slower,
// never wrong. (It used to wait 10 s for the release while the publish
// itself gave up after the test client's 5 s, which a loaded 2-core
// machine missed.)
func takeOverWhilePublisherWaits(t *testing.T, e *env, owner *client, topic, id string, cred *credentials) {
	t.Helper()
	c1 := rawConnect5As(t, e.addr, id, false, cred)
	discard(c1)
	subscribeRaw(t, c1, 1, topic)
	testwait.Eventually(t, hangGuard, "subscribed", func() bool { return e.b.Subscribers(topic) == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range maxInflight + 1 {
			p := &paho.Publish{Topic: topic, Payload: fmt.Appendf(nil, "m%d", i), QoS: 1}
			if _, err := owner.C.Publish(ctx, p); err != nil {
				done <- fmt.Errorf("publish %d: %w", i, err)
				return
			}
			sent.Add(1)
		}
		done <- nil
	}()
	testwait.Eventually(t, hangGuard, "the publisher waiting", func() bool { return sent.Load() == maxInflight })
	c2 := rawConnect5As(t, e.addr, id, false, cred)
	discard(c2)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the publisher: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatalf("the publisher is still waiting %v after the takeover (%d sent)", hangGuard, sent.Load())
	}
	if n := e.b.SlowDisconnects(); n != 0 {
		t.Fatalf("%d slow disconnects: the publisher was released by a cut-off, not the takeover", n)
	}
}

// hangGuard bounds the waits of the takeover tests against a hang only:
// what they wait for happens in milliseconds, or never.
const hangGuard = 2 * time.Minute

// takeoverEnv is a broker where only a takeover releases a publisher
// waiting for room in a full session.
func takeoverEnv(t *testing.T) *env {
	return newEnv(t, func(c *Config) { c.SlowClientTimeout, c.AckGrace = time.Hour, time.Hour })
}

// A subscriber whose full session is taken over (Clean Start 0) while a
// publisher waits for room gets the waiting message in its new session.
// The subscriber is a Thing connected with its credentials: anonymous
// sessions are never persistent (TestAnonymousTakeoverWhilePublisherWaits).
func TestTakeoverWhilePublisherWaits(t *testing.T) {
	e := takeoverEnv(t)
	const id = "urn:takeover-wait"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/e"
	owner, _ := joinOwner(t, e, id, nil)
	_, sub := joinOwner(t, e, "urn:takeover-sub", nil)
	takeOverWhilePublisherWaits(t, e, owner, topic, "sess", sub)
	want := fmt.Sprint("m", maxInflight)
	testwait.Eventually(t, hangGuard, "the last message in the new session", func() bool {
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

// An anonymous subscriber's full session ends when another connection
// takes its client id (anonymous sessions are never persistent): the
// waiting publisher is released, and nothing of the old session — no
// subscription, no message — appears in the new one.
func TestAnonymousTakeoverWhilePublisherWaits(t *testing.T) {
	e := takeoverEnv(t)
	const id = "urn:takeover-anon"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/e"
	owner, _ := joinOwner(t, e, id, nil)
	takeOverWhilePublisherWaits(t, e, owner, topic, "anon-sess", nil)
	testwait.Eventually(t, hangGuard, "the new connection listed", func() bool {
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
