package mqtt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// runConnLoopScenario runs one scenario on a broker whose connections are
// served by loop and returns, per subscriber, what it saw in order: the
// messages, and for the session's paho clients each CONNACK's Session
// Present and each DISCONNECT the server sent.
//
// Two strict subscribers, mosquitto_sub over MQTT 5 (QoS 2) and 3.1.1
// (QoS 1), which exit non-zero on a protocol error, and a Thing's
// persistent paho session (QoS 2) get: a retained message on SUBSCRIBE,
// QoS 0/1/2 publishes to an event and a retained property, a will sent
// when its connection breaks, none after a DISCONNECT 0x00, one after
// DISCONNECT 0x04, one after its Will Delay Interval, one when the
// broker's keep-alive (1.5 × 1 s) ends a silent client. Then the session
// is taken over by a second connection with its client id (the first gets
// DISCONNECT 0x8E, the second finds its session), goes offline while QoS
// 1/2 messages are stored for it, resumes and gets them, and is finally
// replaced by a clean start, which finds no session and gets nothing.
//
// With idlePark > 0 (the hub's loop parking idle connections, park.go),
// every client that should be idle at a step is parked before it:
// subscribers and the publisher before each publish, a will's connection
// before it breaks, the silent client before its keep-alive passes, the
// session before it is taken over.
func runConnLoopScenario(t *testing.T, loop string, idlePark time.Duration) map[string][]string {
	e := newEnv(t, func(c *Config) { c.ConnLoop = loop; c.IdlePark = idlePark })
	waitParked := func(ids ...string) {
		t.Helper()
		if idlePark <= 0 {
			return
		}
		for _, id := range ids {
			testwait.Eventually(t, 5*time.Second, id+" parked", func() bool { return isParked(e, id) })
		}
	}
	const pubID, willID, sessID = "urn:loop:a", "urn:loop:w", "urn:loop:s"
	pub, _ := joinOwner(t, e, pubID, func(c *paho.Connect) { c.ClientID = "loop-pub" })
	willCreds := e.thing(t, willID)
	sessCreds := e.thing(t, sessID)
	topicOf := func(thing, rest string) string { return lmos.ThingsPrefix + lmos.TopicKey(thing) + "/" + rest }
	pub.mustPub(topicOf(pubID, "properties/p"), []byte("retained-before"), 1, true)
	filters := []string{lmos.ThingsPrefix + "+/events/+", lmos.ThingsPrefix + "+/properties/+"}

	recs := map[string]*recorder{}
	want := map[string]int{}
	var waits []func()
	mosq := func(name, version, qos string) {
		r, stop := recordMosquittoSub(t, e, name, version, qos, "%t q%q r%r %p", filters, 60*time.Second)
		recs[name] = r
		waits = append(waits, stop)
	}
	mosq("loop-mosq5", "mqttv5", "2")
	mosq("loop-mosq311", "mqttv311", "1")

	// The Thing's session: every connection with its client id records
	// into one recorder.
	sess, dropped := &recorder{}, &recorder{}
	recs["session"] = sess
	// The DISCONNECTs it gets, apart: one may be handled after the next
	// connection's CONNACK.
	recs["session DISCONNECTs"] = dropped
	const sessClient = "loop-session"
	connectSession := func(clean bool) (*paho.Client, net.Conn) {
		t.Helper()
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				sess.add(pahoLine(pr.Packet))
				return true, nil
			}},
			OnServerDisconnect: func(d *paho.Disconnect) { dropped.add(fmt.Sprintf("server DISCONNECT %#x", d.ReasonCode)) },
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cp := persistentAs(sessCreds, sessClient, 300)
		cp.CleanStart = clean
		cp.Properties.RequestProblemInfo = true
		ack, err := c.Connect(ctx, cp)
		if err != nil {
			t.Fatal(err)
		}
		sess.add(fmt.Sprintf("CONNACK present=%v", ack.SessionPresent))
		t.Cleanup(func() { conn.Close() })
		return c, conn
	}
	sc, scConn := connectSession(true)
	want["session"]++ // its CONNACK
	{
		s := &paho.Subscribe{}
		for _, f := range filters {
			s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: f, QoS: 2})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sa, err := sc.Subscribe(ctx, s)
		cancel()
		if err != nil || len(sa.Reasons) != 2 || sa.Reasons[0] >= 0x80 || sa.Reasons[1] >= 0x80 {
			t.Fatalf("subscribe: %v %v", sa, err)
		}
	}
	online := map[string]bool{"loop-mosq5": true, "loop-mosq311": true, "session": true}
	settle := func(what string) {
		t.Helper()
		testwait.Eventually(t, 6*time.Second, what, func() bool {
			for name, r := range recs {
				if r.count() < want[name] {
					return false
				}
			}
			return true
		})
		for name, r := range recs {
			if n := r.count(); n != want[name] {
				t.Fatalf("%s: %s saw %d lines, want %d: %q", what, name, n, want[name], r.all())
			}
		}
	}
	// owed counts one message for every subscriber online (or, at QoS >
	// 0, keeping a session).
	stored := 0
	owed := func(qos byte) {
		for name := range recs {
			if online[name] {
				want[name]++
			} else if name == "session" && qos > 0 {
				stored++
			}
		}
	}
	owed(1) // the retained message
	settle("retained message on SUBSCRIBE")

	n := 0
	publish := func(count int) {
		t.Helper()
		for range count {
			qos := byte(n % 3)
			topic, retain := topicOf(pubID, "events/e"), false
			if n%4 == 1 {
				topic, retain = topicOf(pubID, "properties/p"), true
			}
			idle := []string{"loop-pub"}
			for name, on := range online {
				if name == "session" {
					name = sessClient
				}
				if on {
					idle = append(idle, name)
				}
			}
			waitParked(idle...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := pub.C.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: fmt.Append(nil, "m", n)})
			cancel()
			if err != nil {
				t.Fatalf("publish %d: %v", n, err)
			}
			n++
			owed(qos)
			settle(fmt.Sprintf("message %d", n-1))
		}
	}
	publish(6)

	// Wills, from the will Thing's connections.
	willConn := func(id, payload string, delay uint32, persistent bool) (*paho.Client, net.Conn) {
		t.Helper()
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn})
		cp := withCreds(willCreds)
		cp.ClientID = id
		if persistent {
			expiry := uint32(60)
			cp.CleanStart = false
			cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &expiry}
		}
		cp.WillMessage = &paho.WillMessage{Topic: topicOf(willID, "events/gone"), Payload: []byte(payload), QoS: 1}
		if delay > 0 {
			cp.WillProperties = &paho.WillProperties{WillDelayInterval: &delay}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Connect(ctx, cp); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return c, conn
	}
	_, wc := willConn("loop-will-now", "will-now", 0, false)
	waitParked("loop-will-now")
	wc.Close()
	owed(1)
	settle("will of a broken connection")
	w, wc := willConn("loop-will-never", "will-never", 0, false)
	_ = w.Disconnect(&paho.Disconnect{ReasonCode: 0})
	wc.Close()
	w, wc = willConn("loop-will-04", "will-04", 0, false)
	_ = w.Disconnect(&paho.Disconnect{ReasonCode: 0x04})
	wc.Close()
	owed(1)
	settle("will after DISCONNECT 0x04 (none after 0x00)")
	_, wc = willConn("loop-will-delayed", "will-delayed", 1, true)
	waitParked("loop-will-delayed")
	wc.Close()
	owed(1)
	settle("will after its delay")

	// A client that goes silent: the broker's keep-alive ends it.
	silent, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ck := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 1, ClientIdentifier: "loop-silent",
			UsernameFlag: true, Username: []byte(willCreds.Username), PasswordFlag: true, Password: []byte(willCreds.Password),
			WillFlag: true, WillTopic: topicOf(willID, "events/gone"), WillPayload: []byte("will-keepalive"), WillQos: 1}}
	var buf bytes.Buffer
	if err := ck.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := silent.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	waitParked("loop-silent")
	_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(silent); len(got) == 0 || got[0] != 0x20 || err != nil {
		t.Fatalf("silent client: CONNACK then EOF expected, got % x, %v", got, err)
	}
	owed(1)
	settle("will of a client past its keep-alive")

	// Takeover: a second connection with the session's client id.
	waitParked(sessClient)
	sc2, sc2Conn := connectSession(false)
	want["session"]++             // CONNACK present to the second
	want["session DISCONNECTs"]++ // 0x8E to the first
	settle("takeover")
	_ = sc
	_ = scConn
	publish(3)

	// Offline: QoS 1/2 messages wait in the session.
	_ = sc2.Disconnect(&paho.Disconnect{})
	sc2Conn.Close()
	online["session"] = false
	testwait.Eventually(t, 5*time.Second, "session offline", func() bool {
		cl, ok := e.b.server.Clients.Get(sessClient)
		return ok && cl.Closed()
	})
	publish(4)
	resumedAt := want["session"] + 1
	sc3, sc3Conn := connectSession(false)
	online["session"] = true
	want["session"] += 1 + stored
	settle("resumed session")
	publish(2)

	// A clean start: no session, no subscription.
	_ = sc3.Disconnect(&paho.Disconnect{})
	sc3Conn.Close()
	connectSession(true)
	want["session"]++
	online["session"] = false
	publish(2)

	for _, w := range waits {
		w()
	}
	got := map[string][]string{}
	for name, r := range recs {
		got[name] = r.all()
	}
	// mochi resends a resumed session's messages sorted by a timestamp in
	// seconds (PROTOCOL §10): compared as a set, with the CONNACK before
	// them, which the recorder gets once paho's Connect has returned,
	// sometimes after paho has handed it the first resent message.
	slices.Sort(got["session"][resumedAt-1 : resumedAt+stored])
	return got
}

// The hub's connection loop and mochi's serve a client alike: one
// scenario (runConnLoopScenario) through both, with identical deliveries
// and session outcomes for every subscriber. Not compared, because the
// hub's loop does them right and mochi's does not (PROTOCOL §10, "MQTT
// connection loop"): a delayed will whose session ends first.
func TestConnLoopsServeAlike(t *testing.T) {
	requireSameLines(t, "hub", runConnLoopScenario(t, ConnLoopHub, NoIdlePark),
		"mochi", runConnLoopScenario(t, ConnLoopMochi, NoIdlePark))
}

// requireSameLines fails the test unless the four subscribers of
// runConnLoopScenario saw the same lines in both runs a and b.
func requireSameLines(t *testing.T, aName string, a map[string][]string, bName string, b map[string][]string) {
	t.Helper()
	for name, la := range a {
		if lb := b[name]; !slices.Equal(la, lb) {
			t.Errorf("%s: the runs differ\n%s: %q\n%s: %q", name, aName, la, bName, lb)
		}
	}
	if len(a) != 4 || len(b) != 4 {
		t.Errorf("subscribers: %d and %d, want 4", len(a), len(b))
	}
}

// An idle client of the hub's loop costs one goroutine whose stack the
// runtime shrinks to the least it gives a goroutine that idles in a
// network wait, 4 KB; mochi's loop costs two, 16 + 4 KB. The figures are
// the process's, over 200 clients, so that goroutines of earlier tests
// still ending move them little: per client, rounded goroutines, and
// stacks under the next size up (8 KB per client on the hub's loop).
func TestIdleClientOneSmallStack(t *testing.T) {
	if raceOn {
		t.Skip("the race detector makes frames larger")
	}
	const clients = 200
	for _, c := range []struct {
		loop       string
		goroutines int
		stack      int64
	}{{ConnLoopHub, 1, 6 << 10}, {ConnLoopMochi, 2, 22 << 10}} {
		t.Run(c.loop, func(t *testing.T) {
			// Not parked (park.go; TestParkedNoGoroutineAndClose): the
			// goroutine that waits is what is measured.
			e := newEnv(t, func(cfg *Config) { cfg.ConnLoop = c.loop; cfg.IdlePark = NoIdlePark })
			before := settledMem()
			for i := range clients {
				conn, err := idleClient(e.addr, fmt.Sprintf("small-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
			}
			after := settledMem()
			if g := after.goroutines - before.goroutines; (g+clients/2)/clients != c.goroutines {
				t.Errorf("goroutines per client: %d/%d, want %d", g, clients, c.goroutines)
			}
			if s := (int64(after.StackInuse) - int64(before.StackInuse)) / clients; s > c.stack {
				t.Errorf("stack per client: %d B, want at most %d", s, c.stack)
			}
			if n := e.b.ParkedClients(); n != 0 {
				t.Errorf("parked: %d with mqtt.idlePark off", n)
			}
			runtime.KeepAlive(e)
		})
	}
}

// A connection whose first packet is not a CONNECT is closed as soon as its
// fixed header is read [MQTT-3.1.0-1], on either loop: the broker does not
// wait for (or buffer) the body it announced, here almost 1 MiB that never
// comes.
func TestFirstPacketNotConnectClosed(t *testing.T) {
	for _, loop := range []string{ConnLoopHub, ConnLoopMochi} {
		t.Run(loop, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.ConnLoop = loop; c.ConnectTimeout = time.Minute })
			conn, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// PUBLISH, Remaining Length 1,000,000 (under the 1 MiB limit).
			if _, err := conn.Write([]byte{0x30, 0xc0, 0x84, 0x3d}); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			if got, err := io.ReadAll(conn); err != nil || len(got) != 0 {
				t.Fatalf("want the connection closed without a reply, got % x, %v", got, err)
			}
		})
	}
}
