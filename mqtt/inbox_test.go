package mqtt

import (
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// One host is one exact address: the /64 that counts as one client
// address for quotas is a whole home LAN over IPv6.
func TestSameHost(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:5000", "127.0.0.1:6000", true},
		{"127.0.0.1:5000", "127.0.0.2:5000", false},
		{"[::ffff:192.168.1.7]:5000", "192.168.1.7:6000", true},
		{"[2001:db8::1]:5000", "[2001:db8::1]:6000", true},
		{"[2001:db8::1]:5000", "[2001:db8::2]:5000", false}, // one /64, two hosts
		{"[fe80::1%eth0]:5000", "[fe80::1%eth0]:6000", true},
		{"[fe80::1%eth0]:5000", "[fe80::1%eth1]:5000", false},
		{"websocket/unknown-addr", "websocket/unknown-addr", true},
	} {
		if got := sameHost(c.a, c.b); got != c.want {
			t.Errorf("sameHost(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// A connected anonymous client's id, and so its inbox, is not taken from
// another address — anonymously or with a Thing's credentials — on either
// connection loop; its own address takes it over; an empty client id gets
// a random one (issue 24 point 8; the interop test is
// test/e2e TestAnonymousInboxHeldByItsConnection).
func TestClientIDHeldFromAnotherAddress(t *testing.T) {
	e := newEnv(t, nil)
	_, thief := joinOwner(t, e, "urn:thief", nil)
	const cid = "consumer-1"
	inbox := lmos.ClientsPrefix + cid + "/"
	victim, _, err := dialFrom(t, "127.0.0.1", e.addr, &paho.Connect{ClientID: cid, CleanStart: true})
	if err != nil {
		t.Fatal(err)
	}
	victim.mustSub(inbox + "#")
	for _, cp := range []*paho.Connect{{ClientID: cid, CleanStart: true}, withCreds(thief)} {
		cp.ClientID, cp.CleanStart = cid, true
		cl, ack, err := dialFrom(t, "127.0.0.2", e.addr, cp)
		if err == nil {
			cl.close()
			t.Fatalf("user %q from 127.0.0.2 took the client id over", cp.Username)
		}
		if ack == nil || ack.ReasonCode != 0x85 {
			t.Fatalf("user %q from 127.0.0.2: %+v %v, want CONNACK 0x85", cp.Username, ack, err)
		}
	}
	if n := e.b.Refused(reasonClientIDHeld); n != 2 {
		t.Errorf("%s refusals %d, want 2", reasonClientIDHeld, n)
	}
	if cl, ok := e.b.server.Clients.Get(cid); !ok || cl.Closed() || remoteHost(cl.Net.Remote) != "127.0.0.1" {
		t.Fatalf("the holder is gone: %v", ok)
	}
	replier := mustDial(t, e.addr, nil)
	replier.mustPub(inbox+"r", []byte("one"), 1, false)
	if m := victim.next(inbox + "r"); string(m.Payload) != "one" {
		t.Fatalf("the holder got %q", m.Payload)
	}
	// Its own address takes it over, and the inbox with it.
	again, _, err := dialFrom(t, "127.0.0.1", e.addr, &paho.Connect{ClientID: cid, CleanStart: true})
	if err != nil {
		t.Fatalf("the same address: %v", err)
	}
	again.mustSub(inbox + "#")
	replier.mustPub(inbox+"r", []byte("two"), 1, false)
	if m := again.next(inbox + "r"); string(m.Payload) != "two" {
		t.Fatalf("the new connection got %q", m.Payload)
	}
	// An empty client id: 128 random bits.
	_, ack, err := dial(t, e.addr, &paho.Connect{CleanStart: true})
	if err != nil || ack.Properties == nil || !strings.HasPrefix(ack.Properties.AssignedClientID, "lmos-") || len(ack.Properties.AssignedClientID) != 31 {
		t.Fatalf("assigned: %+v %v", ack, err)
	}
}
