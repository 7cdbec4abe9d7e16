package mqtt

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// A new connection that reuses the client id of a clean session gets every
// message owed to it, whether the old connection has just disconnected
// (mochi's cleanup of it, by id, used to remove the new client) or is
// still up (a takeover). Each round widens the window with many
// subscriptions of the old session. paho-mqtt (Python), MQTT 5 and 3.1.1.
func TestReuseClientIDPaho(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := exec.Command(py, "-c", "import paho.mqtt.client").CombinedOutput(); err != nil {
		if os.Getenv("LMOS_INTEROP") != "" {
			t.Fatalf("python3-paho-mqtt not installed: scripts/test-deps.sh installs it")
		}
		t.Skip("python3-paho-mqtt not installed; set LMOS_INTEROP=1 to make this a failure")
	}
	e := newEnv(t, nil)
	host, port, _ := net.SplitHostPort(e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "../test/interop/paho_reuse_id.py", host, port, "25", "200")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("paho-mqtt:\n%s", out.String())
	if err != nil {
		t.Fatalf("paho-mqtt: %v", err)
	}
	if n := e.b.ReuseTimeouts(); n != 0 {
		t.Errorf("%d connections went ahead without the earlier one having ended", n)
	}
}

// The same with paho.golang (MQTT 5), each round: disconnect then
// reconnect, and a live takeover, over TCP and MQTT over WebSocket
// (ServeConn) on either side; the new connection must get the message.
func TestReuseClientIDReconnect(t *testing.T) {
	e := newEnv(t, nil)
	pub := mustDial(t, e.addr, nil)
	const inbox = "lmos/v1/clients/same/r"
	var many []paho.SubscribeOptions
	for j := range 200 {
		many = append(many, paho.SubscribeOptions{Topic: "lmos/v1/things/x" + strconv.Itoa(j) + "/events/+", QoS: 1})
	}
	many = append(many, paho.SubscribeOptions{Topic: inbox, QoS: 1})
	tcp := func(cp *paho.Connect) (*client, *paho.Connack, error) { return dial(t, e.addr, cp) }
	gw := func(cp *paho.Connect) (*client, *paho.Connack, error) { return gatewayDial(t, e, cp) }
	type dialer func(*paho.Connect) (*client, *paho.Connack, error)
	const rounds = 10
	for _, c := range []struct {
		name     string
		old, new dialer
	}{{"tcp", tcp, tcp}, {"ws to tcp", gw, tcp}, {"tcp to ws", tcp, gw}} {
		lost := map[bool]int{}
		for i := range rounds {
			for _, takeover := range []bool{false, true} {
				old, _, err := c.old(&paho.Connect{ClientID: "same", CleanStart: true})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := old.C.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: many}); err != nil {
					t.Fatal(err)
				}
				if !takeover {
					old.close()
				}
				cl, ack, err := c.new(&paho.Connect{ClientID: "same", CleanStart: true})
				if err != nil {
					t.Fatal(err)
				}
				if ack.SessionPresent {
					t.Errorf("%s round %d: a clean start got session present", c.name, i)
				}
				cl.mustSub(inbox)
				payload := []byte("round " + strconv.Itoa(i))
				pub.mustPub(inbox, payload, 1, false)
				select {
				case m := <-cl.Msgs:
					if !bytes.Equal(m.Payload, payload) {
						t.Errorf("%s round %d: got %q", c.name, i, m.Payload)
					}
				case <-time.After(2 * time.Second):
					lost[takeover]++
				}
				old.close()
				cl.close()
			}
		}
		if lost[false]+lost[true] > 0 {
			t.Errorf("%s: lost after a reconnect %d of %d, after a takeover %d of %d", c.name, lost[false], rounds, lost[true], rounds)
		}
	}
	if n := e.b.ReuseTimeouts(); n != 0 {
		t.Errorf("%d connections went ahead without the earlier one having ended", n)
	}
}

// gatewayDial connects with cp through ServeConn, as the WebSocket
// gateway's connections come (a loopback TCP pair, the server side hidden
// behind another type).
func gatewayDial(t *testing.T, e *env, cp *paho.Connect) (*client, *paho.Connack, error) {
	t.Helper()
	peer, server := loopbackPair(t)
	go func() { _ = e.b.ServeConn(struct{ net.Conn }{server}) }()
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	return connectOver(t, peer, cp)
}

// A persistent session taken over by a new connection (the old one still
// up) is still inherited: session present, and the QoS 1 messages stored
// for it while unacknowledged are delivered again.
func TestReuseClientIDPersistentTakeover(t *testing.T) {
	e := newEnv(t, nil)
	const inbox = "lmos/v1/clients/keep/r"
	// Sessions persist for identities only (anonymous.go): a Thing's.
	creds := e.thing(t, "urn:keep")
	cp := func() *paho.Connect { return persistentAs(creds, "keep", 300) }
	// The old connection receives but never acknowledges.
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan *paho.Publish, 16)
	old := paho.NewClient(paho.ClientConfig{
		Conn:                       conn,
		EnableManualAcknowledgment: true,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			got <- pr.Packet
			return true, nil
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := cp()
	c.CleanStart = true
	c.KeepAlive = 30
	if _, err := old.Connect(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: inbox, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub := mustDial(t, e.addr, nil)
	for i := range 3 {
		pub.mustPub(inbox, []byte("m"+strconv.Itoa(i)), 1, false)
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("old connection: message %d not delivered", i)
		}
	}
	cl, ack, err := dial(t, e.addr, cp())
	if err != nil {
		t.Fatal(err)
	}
	if !ack.SessionPresent {
		t.Fatal("a takeover of a persistent session got no session present")
	}
	seen := map[string]bool{}
	for range 3 {
		select {
		case m := <-cl.Msgs:
			if !m.Duplicate() {
				t.Errorf("redelivered %q without DUP", m.Payload)
			}
			seen[string(m.Payload)] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("stored messages redelivered: %v of 3", len(seen))
		}
	}
	// And the inherited subscription still delivers.
	pub.mustPub(inbox, []byte("after"), 1, false)
	if m := cl.next(inbox); string(m.Payload) != "after" {
		t.Errorf("after the takeover got %q", m.Payload)
	}
	if len(seen) != 3 {
		t.Errorf("redelivered %v", seen)
	}
}

// loopbackPair returns the two ends of a loopback TCP connection: a real
// socket for ServeConn, which a WebSocket connection stands in for.
func loopbackPair(t *testing.T) (peer, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return peer, server
}
