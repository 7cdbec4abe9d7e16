package mqtt

import (
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/hooks/storage"

	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// An anonymous client never gets a persistent session (issue 12, attack
// 4): Clean Start 0 and a Session Expiry Interval give a fresh session
// (Session Present 0, CONNACK Session Expiry Interval 0), which ends with
// the connection: nothing is kept for it offline, nothing stored or
// restored after a restart, not even a session an older version stored.
// mosquitto_sub (MQTT 3.1.1, clean session 0) is refused persistence too.
// Each downgrade is counted.
func TestAnonymousSessionNotPersistent(t *testing.T) {
	e := newEnv(t, nil)
	const inbox = "lmos/v1/clients/anon-1/"
	connect := func() (*client, *paho.Connack) {
		t.Helper()
		expiry := uint32(3600)
		c, ack, err := dial(t, e.addr, &paho.Connect{ClientID: "anon-1", CleanStart: false, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		if ack.SessionPresent {
			t.Error("an anonymous client resumed a session")
		}
		if ack.Properties == nil || ack.Properties.SessionExpiryInterval == nil || *ack.Properties.SessionExpiryInterval != 0 {
			t.Errorf("CONNACK Session Expiry Interval %+v, want 0", ack.Properties)
		}
		return c, ack
	}
	c, _ := connect()
	c.mustSub(inbox + "#")
	c.close()
	testwait.Eventually(t, 2*time.Second, "the anonymous session ended with its connection", func() bool {
		_, ok := e.b.server.Clients.Get("anon-1")
		return !ok
	})
	if n := e.b.Subscribers(inbox + "x"); n != 0 {
		t.Fatalf("%d subscribers on the inbox of a gone anonymous client", n)
	}
	// Nothing is kept for it while it is away; it resumes nothing.
	mustDial(t, e.addr, nil).mustPub(inbox+"x", []byte("while away"), 1, false)
	c, _ = connect()
	c.mustSub(inbox + "y")
	c.mustPub(inbox+"y", []byte("marker"), 1, false)
	if m := c.next(inbox + "y"); string(m.Payload) != "marker" {
		t.Fatalf("got %q", m.Payload)
	}
	select {
	case m := <-c.Msgs:
		t.Fatalf("delivered %s %q", m.Topic, m.Payload)
	default:
	}
	c.close()

	// MQTT 3.1.1, clean session 0, a client nobody here wrote.
	bin := requireBin(t, "mosquitto_sub")
	host, port, _ := net.SplitHostPort(e.addr)
	if out, err := exec.Command(bin, "-h", host, "-p", port, "-V", "mqttv311", "-c", "-i", "anon-3", "-q", "1",
		"-t", "lmos/v1/clients/anon-3/#", "-E").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_sub: %v %s", err, out)
	}
	testwait.Eventually(t, 2*time.Second, "the 3.1.1 anonymous session ended with its connection", func() bool {
		_, ok := e.b.server.Clients.Get("anon-3")
		return !ok
	})
	if got := e.b.Refused("mqtt.anonymousSession"); got != 3 {
		t.Errorf("mqtt.anonymousSession refusals %d, want 3", got)
	}

	// A session an older version stored for an anonymous client is
	// dropped at load, with its subscription.
	e.stop()
	cm := storage.Client{ID: "anon-old", T: storage.ClientKey, ProtocolVersion: 5, Properties: storage.ClientProperties{SessionExpiryInterval: 3600}}
	rawc, _ := cm.MarshalBinary()
	sub := storage.Subscription{ID: subscriptionKey("anon-old", "lmos/v1/clients/anon-old/#"), T: storage.SubscriptionKey, Client: "anon-old", Filter: "lmos/v1/clients/anon-old/#", Qos: 1}
	raws, _ := sub.MarshalBinary()
	db, err := store.Open(e.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ApplyBroker([]brokerstate.Record{{Kind: recClient, Key: "anon-old", Value: rawc}, {Kind: recSubscription, Key: sub.ID, Value: raws}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	e.start()
	for _, id := range []string{"anon-1", "anon-3", "anon-old"} {
		if _, ok := e.b.server.Clients.Get(id); ok {
			t.Errorf("anonymous session %s restored", id)
		}
	}
	if n := e.b.Subscribers("lmos/v1/clients/anon-old/x"); n != 0 {
		t.Errorf("%d subscribers restored for an anonymous session", n)
	}
	// Resuming its id gets a fresh session.
	expiry := uint32(60)
	_, ack, err := dial(t, e.addr, &paho.Connect{ClientID: "anon-old", Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil || ack.SessionPresent {
		t.Fatalf("resuming a stored anonymous session: %+v %v", ack, err)
	}
}
