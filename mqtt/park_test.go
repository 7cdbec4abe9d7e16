package mqtt

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// isParked reports whether the connection of client id is parked now.
func isParked(e *env, id string) bool {
	cl, ok := e.b.server.Clients.Get(id)
	if !ok {
		return false
	}
	c, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.park != nil
}

// testIdlePark parks connections soon, so that tests need not wait long.
const testIdlePark = 20 * time.Millisecond

// A parked client is served as one waiting in its goroutine: the
// connection-loop scenario (runConnLoopScenario), with every client that
// is idle at a step parked before it (the subscribers, mosquitto_sub over
// MQTT 5 and 3.1.1 and a persistent paho session, and the publisher
// before each QoS 0/1/2 publish, retained ones included; the wills'
// connections before they break; the silent client before its keep-alive
// passes; the session before it is taken over), gives every subscriber
// the same lines as the loop that does not park.
func TestParkedServedAlike(t *testing.T) {
	requireSameLines(t, "parked", runConnLoopScenario(t, ConnLoopHub, testIdlePark),
		"waiting", runConnLoopScenario(t, ConnLoopHub, NoIdlePark))
}

// A parked client owes no goroutine: 200 idle clients, once parked, leave
// the process's goroutines and stacks as they were (the loop that does
// not park keeps one goroutine and 4 KB per client:
// TestIdleClientOneSmallStack). The broker's Close then returns with the
// 200 parked: each client gets DISCONNECT 0x8B and its connection ends,
// nothing is left parked, and no goroutine of the broker's is left.
func TestParkedNoGoroutineAndClose(t *testing.T) {
	if raceOn {
		t.Skip("the race detector makes stacks larger")
	}
	const clients = 200
	base := runtime.NumGoroutine()
	e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
	before := settledMem()
	conns := make([]net.Conn, clients)
	for i := range conns {
		conn, err := idleClient(e.addr, fmt.Sprintf("parked-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
	}
	testwait.Eventually(t, 10*time.Second, "every client parked", func() bool { return e.b.ParkedClients() == clients })
	after := settledMem()
	if g := after.goroutines - before.goroutines; g > clients/20 {
		t.Errorf("goroutines: %d more for %d parked clients, want none", g, clients)
	}
	if s := (int64(after.StackInuse) - int64(before.StackInuse)) / clients; s > 512 {
		t.Errorf("stack per parked client: %d B, want none", s)
	}

	e.stop() // fails the test when Close does not return in time
	for i, conn := range conns {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(conn)
		// DISCONNECT, Remaining Length 1 or 2, 0x8B Server shutting down.
		if err != nil || len(got) < 3 || got[0] != 0xe0 || got[2] != 0x8b {
			t.Fatalf("client %d: want DISCONNECT 0x8B and the end of the connection, got % x, %v", i, got, err)
		}
	}
	testwait.Eventually(t, 5*time.Second, "the broker's goroutines gone", func() bool { return runtime.NumGoroutine() <= base })
}

// willConn5 connects an MQTT 5 client with the Thing's credentials, a
// keep-alive of ka seconds and a QoS 1 will (payload will) on the
// Thing's (thing) events/gone, and reads its CONNACK.
func willConn5(t *testing.T, e *env, cred *credentials, thing, id string, ka uint16, will string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ck := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: ka, ClientIdentifier: id,
			UsernameFlag: true, Username: []byte(cred.Username), PasswordFlag: true, Password: []byte(cred.Password),
			WillFlag: true, WillTopic: goneTopic(thing), WillPayload: []byte(will), WillQos: 1}}
	var buf bytes.Buffer
	if err := ck.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ack [3]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil || ack[0] != 0x20 {
		t.Fatalf("%s: want CONNACK, got % x, %v", id, ack, err)
	}
	rest := make([]byte, ack[1]-1)
	if _, err := io.ReadFull(conn, rest); err != nil || rest[0] != 0 {
		t.Fatalf("%s: CONNACK % x % x, %v", id, ack, rest, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn
}

// goneTopic is where willConn5's wills go.
func goneTopic(thing string) string {
	return lmos.ThingsPrefix + lmos.TopicKey(thing) + "/events/gone"
}

// A parked client whose keep-alive passes is ended as one waiting in its
// goroutine: its will goes out (mosquitto_sub gets it, and only it, before
// the hub's marker) and its connection is closed; a parked client with
// keep-alive 0 stays parked, and answers a PINGREQ after.
func TestParkedKeepAlive(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
	const thing = "urn:park:ka"
	cred := e.thing(t, thing)
	wait := mosquittoSub(t, e, "park-ka-sub", goneTopic(thing), "-V", "mqttv5", "-q", "1", "-C", "2", "-F", "%p")
	expiring := willConn5(t, e, cred, thing, "park-ka1", 1, "will-ka1")
	forever := willConn5(t, e, cred, thing, "park-ka0", 0, "will-ka0")
	testwait.Eventually(t, 5*time.Second, "both parked", func() bool { return isParked(e, "park-ka1") && isParked(e, "park-ka0") })
	if w := e.b.parker.waitMillis(); w < 0 || w > 1500 {
		t.Errorf("parker waits %d ms with a keep-alive of 1 s parked, want at most 1,500", w)
	}
	_ = expiring.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(expiring); len(got) != 0 || err != nil {
		t.Fatalf("keep-alive 1 s: want the connection closed, got % x, %v", got, err)
	}
	testwait.Eventually(t, 5*time.Second, "the expired session gone", func() bool {
		_, ok := e.b.server.Clients.Get("park-ka1")
		return !ok
	})
	if !isParked(e, "park-ka0") {
		t.Fatal("keep-alive 0: no longer parked")
	}
	// The next deadline is the subscriber's (keep-alive 60 s): the parker
	// waits for it, not for a shorter poll (an idle hub is not woken).
	testwait.Eventually(t, 5*time.Second, "parker waits for the next deadline", func() bool { return e.b.parker.waitMillis() > 60_000 })
	if err := e.b.publish(goneTopic(thing), []byte("marker"), false, 1, ""); err != nil {
		t.Fatal(err)
	}
	if got := wait(); !slices.Equal(got, []string{"will-ka1", "marker"}) {
		t.Errorf("will topic: %q, want the keep-alive 1 s client's will, then the marker", got)
	}
	if _, err := forever.Write([]byte{0xc0, 0}); err != nil {
		t.Fatal(err)
	}
	_ = forever.SetReadDeadline(time.Now().Add(5 * time.Second))
	var resp [2]byte
	if _, err := io.ReadFull(forever, resp[:]); err != nil || resp != [2]byte{0xd0, 0} {
		t.Fatalf("keep-alive 0: want PINGRESP, got % x, %v", resp, err)
	}
}

// A parked client's socket closed by its peer ends its session once: with
// a reset (RST) or an orderly close (FIN), its will goes out once
// (mosquitto_sub gets it, then the hub's marker, nothing between) and
// the broker counts the client gone once.
func TestParkedPeerGone(t *testing.T) {
	for _, how := range []string{"RST", "FIN"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
			const thing = "urn:park:gone"
			cred := e.thing(t, thing)
			wait := mosquittoSub(t, e, "park-gone-sub", goneTopic(thing), "-V", "mqttv5", "-q", "1", "-C", "2", "-F", "%p")
			clients := e.b.Clients()
			conn := willConn5(t, e, cred, thing, "park-gone", 60, "will-"+how)
			testwait.Eventually(t, 5*time.Second, "parked", func() bool { return isParked(e, "park-gone") })
			if how == "RST" {
				_ = conn.(*net.TCPConn).SetLinger(0)
			}
			conn.Close()
			testwait.Eventually(t, 5*time.Second, "the session gone", func() bool {
				_, ok := e.b.server.Clients.Get("park-gone")
				return !ok
			})
			if err := e.b.publish(goneTopic(thing), []byte("marker"), false, 1, ""); err != nil {
				t.Fatal(err)
			}
			if got := wait(); !slices.Equal(got, []string{"will-" + how, "marker"}) {
				t.Errorf("will topic: %q, want the will once, then the marker", got)
			}
			// Counted gone twice, the count would pass clients-1 before
			// the subscriber has gone.
			testwait.Eventually(t, 5*time.Second, "clients counted gone once", func() bool { return e.b.Clients() == clients-1 })
			if n := e.b.ParkedClients(); n != 0 {
				t.Errorf("parked: %d, want 0", n)
			}
		})
	}
}

// A DISCONNECT that comes right when the connection is being parked ends
// the session without its will, every time: 40 clients send it from a
// little before to a little after the grace (testIdlePark). mosquitto_sub
// gets only the hub's marker on the will topic.
func TestParkedDisconnectAtGrace(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
	const thing = "urn:park:bye"
	cred := e.thing(t, thing)
	wait := mosquittoSub(t, e, "park-bye-sub", goneTopic(thing), "-V", "mqttv5", "-q", "1", "-C", "1", "-F", "%p")
	clients := e.b.Clients()
	parksBefore := e.b.parks()
	const rounds = 40
	for i := range rounds {
		id := fmt.Sprintf("park-bye-%d", i)
		conn := willConn5(t, e, cred, thing, id, 60, "will-"+id)
		time.Sleep(testIdlePark - 4*time.Millisecond + time.Duration(i%9)*time.Millisecond)
		if _, err := conn.Write([]byte{0xe0, 0}); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, err := io.ReadAll(conn); len(got) != 0 || err != nil {
			t.Fatalf("%s: want the connection closed, got % x, %v", id, got, err)
		}
		testwait.Eventually(t, 5*time.Second, id+" gone", func() bool {
			_, ok := e.b.server.Clients.Get(id)
			return !ok
		})
		conn.Close()
	}
	t.Logf("%d of %d parked before their DISCONNECT", e.b.parks()-parksBefore, rounds)
	// Counted gone twice, the count would pass below clients.
	testwait.Eventually(t, 5*time.Second, "clients counted gone once", func() bool { return e.b.Clients() == clients })
	if err := e.b.publish(goneTopic(thing), []byte("marker"), false, 1, ""); err != nil {
		t.Fatal(err)
	}
	if got := wait(); !slices.Equal(got, []string{"marker"}) {
		t.Errorf("will topic: %q, want only the marker", got)
	}
}

// Parked clients nobody in this project wrote: Python paho subscribers
// (MQTT 5 and 3.1.1, QoS 2) get every message while parked before each —
// QoS 0, 1 and 2 events and a retained property from a Python paho
// publisher that is parked before each of its PUBLISHes too (each is
// processed: acknowledged, delivered), a message of the hub's, and the
// will of a parked client whose connection broke — and neither reports
// an error or a disconnection.
func TestParkedPahoPython(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := exec.Command(py, "-c", "import paho.mqtt.client").CombinedOutput(); err != nil {
		if os.Getenv("LMOS_INTEROP") != "" {
			t.Fatalf("python3 paho-mqtt missing: %v", err)
		}
		t.Skip("python3-paho-mqtt not installed")
	}
	e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
	const thing = "urn:park:py"
	cred := e.thing(t, thing)
	host, port, _ := net.SplitHostPort(e.addr)
	const script = "../test/interop/paho_parked.py"
	filters := lmos.ThingsPrefix + "+/events/+," + lmos.ThingsPrefix + "+/properties/+"
	base := lmos.ThingsPrefix + lmos.TopicKey(thing)
	type msg struct{ topic, qos, retain, payload string }
	sent := []msg{
		{base + "/events/e", "0", "0", "q0"},
		{base + "/events/e", "1", "0", "q1"},
		{base + "/events/e", "2", "0", "q2"},
		{base + "/properties/p", "1", "1", "retained"},
	}
	const count = 6 // sent, the hub's, the will

	start := func(args ...string) (*exec.Cmd, *syncBuffer) {
		cmd := exec.Command(py, append([]string{script}, args...)...)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		return cmd, out
	}
	var subs []*exec.Cmd
	var subOuts []*syncBuffer
	for _, v := range []string{"5", "311"} {
		cmd, out := start("sub", host, port, v, "py-park-sub"+v, filters, fmt.Sprint(count))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		subs, subOuts = append(subs, cmd), append(subOuts, out)
		testwait.Eventually(t, 10*time.Second, "paho subscriber ready", func() bool { return strings.Contains(out.String(), "ready\n") })
	}
	pub, pubOut := start("pub", host, port, "5", "py-park-pub", cred.Username, cred.Password)
	stdin, err := pub.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Process.Kill(); _ = pub.Wait() })
	testwait.Eventually(t, 10*time.Second, "paho publisher ready", func() bool { return strings.Contains(pubOut.String(), "ready\n") })
	allParked := func(what string) {
		t.Helper()
		testwait.Eventually(t, 5*time.Second, "parked before "+what, func() bool {
			return isParked(e, "py-park-sub5") && isParked(e, "py-park-sub311") && isParked(e, "py-park-pub")
		})
	}
	for _, m := range sent {
		allParked(m.payload)
		if _, err := fmt.Fprintf(stdin, "%s %s %s %s\n", m.topic, m.qos, m.retain, m.payload); err != nil {
			t.Fatal(err)
		}
		testwait.Eventually(t, 10*time.Second, m.payload+" published", func() bool {
			return strings.Contains(pubOut.String(), "published "+m.payload+"\n")
		})
	}
	allParked("the hub's message")
	if err := e.b.publish(base+"/events/hub", []byte("hub"), false, 1, ""); err != nil {
		t.Fatal(err)
	}
	gone := willConn5(t, e, cred, thing, "py-park-will", 60, "will")
	testwait.Eventually(t, 5*time.Second, "will client parked", func() bool { return isParked(e, "py-park-will") })
	allParked("the will")
	gone.Close()
	stdin.Close()
	if err := pub.Wait(); err != nil {
		t.Errorf("paho publisher: %v\n%s", err, pubOut.String())
	}
	want := []string{"msg " + base + "/events/e q0 r0 q0", "msg " + base + "/events/e q1 r0 q1", "msg " + base + "/events/e q2 r0 q2",
		"msg " + base + "/properties/p q1 r0 retained", "msg " + base + "/events/hub q1 r0 hub", "msg " + base + "/events/gone q1 r0 will"}
	for i, cmd := range subs {
		err := cmd.Wait()
		out := subOuts[i].String()
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "error") || strings.HasPrefix(l, "disconnected") || strings.HasPrefix(l, "refused") {
				t.Errorf("paho subscriber %d reported %q", i, l)
			}
			if strings.HasPrefix(l, "msg ") {
				got = append(got, l)
			}
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("paho subscriber %d: %v, got %q, want %q", i, err, got, want)
		}
	}
	for _, l := range strings.Split(pubOut.String(), "\n") {
		if strings.HasPrefix(l, "error") || strings.HasPrefix(l, "disconnected") || strings.HasPrefix(l, "refused") {
			t.Errorf("paho publisher reported %q", l)
		}
	}
}

// The grace before parking bounds the wait for a packet, not its reading:
// a PUBLISH whose second half comes well after the grace is processed
// (acknowledged), as it would be within the keep-alive.
func TestParkGraceNotPacketDeadline(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
	const thing = "urn:park:slow"
	cred := e.thing(t, thing)
	conn := willConn5(t, e, cred, thing, "park-slow", 60, "will")
	topic := lmos.ThingsPrefix + lmos.TopicKey(thing) + "/events/e"
	body := append([]byte{0, byte(len(topic))}, topic...)
	body = append(body, 0, 7, 0) // packet id 7, no properties
	body = append(body, "slow"...)
	pk := append([]byte{0x32, byte(len(body))}, body...) // QoS 1
	if _, err := conn.Write(pk[:5]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * testIdlePark)
	if _, err := conn.Write(pk[5:]); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ack [4]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil || ack[0] != 0x40 || ack[3] != 7 {
		t.Fatalf("want PUBACK of packet 7, got % x, %v", ack, err)
	}
}

// A parked connection closed by the hub's connection set (closeRaw, as on
// shutdown or a write that waited out its timeout) ends its session: the
// will goes out once and the client is counted gone.
func TestParkedCloseRaw(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
	const thing = "urn:park:raw"
	cred := e.thing(t, thing)
	wait := mosquittoSub(t, e, "park-raw-sub", goneTopic(thing), "-V", "mqttv5", "-q", "1", "-C", "2", "-F", "%p")
	clients := e.b.Clients()
	willConn5(t, e, cred, thing, "park-raw", 60, "will-raw")
	testwait.Eventually(t, 5*time.Second, "parked", func() bool { return isParked(e, "park-raw") })
	cl, _ := e.b.server.Clients.Get("park-raw")
	if err := (rawCloser{cl.Net.Conn.(*outConn)}).Close(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "the session gone", func() bool {
		_, ok := e.b.server.Clients.Get("park-raw")
		return !ok && e.b.Clients() == clients
	})
	if err := e.b.publish(goneTopic(thing), []byte("marker"), false, 1, ""); err != nil {
		t.Fatal(err)
	}
	if got := wait(); !slices.Equal(got, []string{"will-raw", "marker"}) {
		t.Errorf("will topic: %q, want the will once, then the marker", got)
	}
}

// A wake-up racing a close ends the session once: 100 parked clients each
// send a PINGREQ while the hub disconnects them (DISCONNECT 0x98 from
// another goroutine); every session ends, none is counted gone twice,
// nothing stays parked.
func TestParkedWakeRacesClose(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
	clients := e.b.Clients()
	const n = 100
	conns := make([]net.Conn, n)
	for i := range conns {
		conn, err := idleClient(e.addr, fmt.Sprintf("race-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns[i] = conn
	}
	testwait.Eventually(t, 10*time.Second, "every client parked", func() bool { return e.b.ParkedClients() == n })
	for i, conn := range conns {
		cl, ok := e.b.server.Clients.Get(fmt.Sprintf("race-%d", i))
		if !ok {
			t.Fatalf("client %d gone", i)
		}
		go func() { _ = e.b.server.DisconnectClient(cl, packets.ErrAdministrativeAction) }()
		_, _ = conn.Write([]byte{0xc0, 0})
	}
	testwait.Eventually(t, 10*time.Second, "every session ended once", func() bool {
		return e.b.Clients() == clients && e.b.server.Clients.Len() == 1 // the inline client
	})
	if p := e.b.ParkedClients(); p != 0 {
		t.Errorf("parked: %d, want 0", p)
	}
	for _, conn := range conns {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		// Closed with the PINGREQ unread, the server's side may reset it.
		if _, err := io.ReadAll(conn); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("want the connection closed: %v", err)
		}
	}
	if c := e.b.Clients(); c != clients {
		t.Errorf("clients connected: %d, want %d", c, clients)
	}
}

// The keep-alive runs from the client's last
// packet [MQTT-3.1.2-22], whatever bytes of an unfinished packet arrive
// meanwhile. A client with Keep Alive 1 s sends the first byte of a
// PINGREQ 1 s after its CONNACK and nothing more: the hub closes it 1.5 s
// after the CONNECT, parked or not (a deadline counted from the wake-up
// would close it at 2.5 s).
func TestParkedKeepAliveFromLastPacket(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle time.Duration
	}{{"waiting", NoIdlePark}, {"parked", testIdlePark}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.IdlePark = tc.idle })
			const thing = "urn:park:rv-ka"
			cred := e.thing(t, thing)
			conn := willConn5(t, e, cred, thing, "rv-ka", 1, "will")
			t0 := time.Now() // the CONNACK read: after the CONNECT was read
			if tc.idle > 0 {
				testwait.Eventually(t, time.Second, "parked", func() bool { return isParked(e, "rv-ka") })
			}
			time.Sleep(time.Until(t0.Add(time.Second)))
			if _, err := conn.Write([]byte{0xc0}); err != nil { // half a PINGREQ
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(conn)
			took := time.Since(t0)
			if len(got) != 0 || err != nil {
				t.Fatalf("want the connection closed, got % x, %v", got, err)
			}
			// Due 1.5 s after the CONNECT; from the wake-up it would be 2.5 s.
			if took > 2100*time.Millisecond {
				t.Errorf("closed %v after the last packet, want 1.5 s (1.5 x Keep Alive 1 s)", took.Round(time.Millisecond))
			}
		})
	}
}

// With nothing parked, or only connections without a keep-alive, the
// parker waits for an event without a timeout: an idle hub is not woken
// (Close kicks it).
func TestParkerIdleWaitsForEvents(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.IdlePark = testIdlePark })
	if w := e.b.parker.waitMillis(); w != -1 {
		t.Fatalf("nothing parked: the parker waits %d ms, want until an event (-1)", w)
	}
	cred := e.thing(t, "urn:park:idle")
	c := willConn5(t, e, cred, "urn:park:idle", "park-idle0", 0, "will-idle0")
	testwait.Eventually(t, 5*time.Second, "parked", func() bool { return isParked(e, "park-idle0") })
	// The Thing's join connection (keep-alive 30 s) may still be parked
	// while it closes under load: its deadline goes with it.
	testwait.Eventually(t, 10*time.Second, "only keep-alive 0 parked: the parker waits until an event (-1)",
		func() bool { return e.b.parker.waitMillis() == -1 })
	c.Close()
	done := make(chan struct{})
	go func() { e.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the broker did not close with the parker waiting without a timeout")
	}
}
