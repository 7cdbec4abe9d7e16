package mqtt

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Outgoing acknowledgements carry only reason codes valid for their packet
// type and the client's protocol version (fixReasonCodes).
func TestOutgoingReasonCodesValidForVersion(t *testing.T) {
	cases := []struct {
		name    string
		pk      packets.Packet
		want    byte
		wantSub []byte
		changed bool
	}{
		{"puback granted qos 1 (mochi #474)", ack(packets.Puback, 5, 0x01), 0x00, nil, true},
		{"puback success", ack(packets.Puback, 5, 0x00), 0x00, nil, false},
		{"puback no matching subscribers", ack(packets.Puback, 5, 0x10), 0x10, nil, false},
		{"puback not authorized", ack(packets.Puback, 5, 0x87), 0x87, nil, false},
		{"puback undefined failure", ack(packets.Puback, 5, 0x8E), 0x80, nil, true},
		{"pubrec granted qos 2", ack(packets.Pubrec, 5, 0x02), 0x00, nil, true},
		{"pubrel undefined failure", ack(packets.Pubrel, 5, 0x87), 0x92, nil, true},
		{"pubcomp id not found", ack(packets.Pubcomp, 5, 0x92), 0x92, nil, false},
		{"connack v5 stray success-range code refuses", ack(packets.Connack, 5, 0x01), 0x80, nil, true},
		{"connack v3 v5 code refuses", ack(packets.Connack, 4, 0x8A), 0x03, nil, true},
		{"connack v3 not authorized", ack(packets.Connack, 4, 0x05), 0x05, nil, false},
		{"connack unknown level, unsupported version", ack(packets.Connack, 6, 0x82), 0x01, nil, true},
		{"connack v3 v5 not authorized", ack(packets.Connack, 4, 0x87), 0x05, nil, true},
		{"suback v3 keeps 0x80", sub(4, 0x00, 0x02, 0x80), 0x00, []byte{0x00, 0x02, 0x80}, false},
		{"suback v3 v5 failure", sub(4, 0x87, 0x01), 0x00, []byte{0x80, 0x01}, true},
		{"suback v5 not authorized", sub(5, 0x87, 0xA1), 0x00, []byte{0x87, 0xA1}, false},
		{"unsuback v5 granted code", sub5unsub(0x01, 0x11), 0x00, []byte{0x00, 0x11}, true},
		{"publish untouched", ack(packets.Publish, 5, 0x01), 0x01, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pk := c.pk
			if got := fixReasonCodes(&pk); got != c.changed {
				t.Errorf("changed = %v, want %v", got, c.changed)
			}
			if pk.ReasonCode != c.want {
				t.Errorf("reason code %#x, want %#x", pk.ReasonCode, c.want)
			}
			if c.wantSub != nil && !bytes.Equal(pk.ReasonCodes, c.wantSub) {
				t.Errorf("reason codes % x, want % x", pk.ReasonCodes, c.wantSub)
			}
		})
	}
}

func ack(typ, version, code byte) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: typ}, ProtocolVersion: version, ReasonCode: code}
}

func sub(version byte, codes ...byte) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, ProtocolVersion: version, ReasonCodes: codes}
}

func sub5unsub(codes ...byte) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsuback}, ProtocolVersion: 5, ReasonCodes: codes}
}

// TestPubackWithUserProperties is the mqtt.js reproduction of issue 10 at
// the byte level: a QoS 1 PUBLISH with a User Property is acknowledged by a
// PUBACK of packet id only (reason 0x00 Success may be omitted, §3.4.2.1),
// not by reason 0x01 and an echo of the publish's properties, which mqtt.js
// rejects and then loses every later packet on the connection.
func TestPubackWithUserProperties(t *testing.T) {
	e := newEnv(t, nil)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	write := func(pk packets.Packet) {
		t.Helper()
		var buf bytes.Buffer
		var err error
		switch pk.FixedHeader.Type {
		case packets.Connect:
			err = pk.ConnectEncode(&buf)
		case packets.Publish:
			err = pk.PublishEncode(&buf)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(buf.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	read := func() []byte {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		head := make([]byte, 2)
		if _, err := io.ReadFull(conn, head); err != nil {
			t.Fatal(err)
		}
		if head[1]&0x80 != 0 {
			t.Fatalf("unexpectedly long packet: % x", head)
		}
		body := make([]byte, head[1])
		if _, err := io.ReadFull(conn, body); err != nil {
			t.Fatal(err)
		}
		return append(head, body...)
	}
	write(packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 5,
		Connect: packets.ConnectParams{
			ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "js-agent",
		},
	})
	if got := read(); got[0] != 0x20 || got[3] != 0x00 {
		t.Fatalf("CONNACK % x", got)
	}
	for _, qos := range []byte{1, 1} { // twice: the second ack must read the same
		write(packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos},
			PacketID:    7,
			TopicName:   "lmos/v1/clients/js-agent/r/1",
			Properties: packets.Properties{
				User:        []packets.UserProperty{{Key: "lmos-status", Val: "completed"}},
				ContentType: "application/json",
			},
			Payload:         []byte(`{}`),
			ProtocolVersion: 5,
		})
		got := read()
		if want := []byte{0x40, 0x02, 0x00, 0x07}; !bytes.Equal(got, want) {
			t.Fatalf("PUBACK % x, want % x", got, want)
		}
	}
	// The broker writes the PUBACK of a delivered QoS 1 publish itself
	// (ackbatch.go, issue 16): mochi's, with its 0x01, is not written at
	// all, so the encode hook has nothing to fix.
	if n := e.b.reasonFixes.Load(); n != 0 {
		t.Errorf("the encode hook fixed %d reason codes: mochi wrote the PUBACK", n)
	}
}

// mochi's encoder drops a PUBACK/PUBREC success reason other than 0x00
// unless properties follow; after keepSuccessReason the 0x10 is on the
// wire (with its Reason String), and acknowledgements it need not touch
// keep their bytes.
func TestKeepSuccessReason(t *testing.T) {
	encode := func(pk packets.Packet) []byte {
		var buf bytes.Buffer
		if err := pk.PubackEncode(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, typ := range []byte{packets.Puback, packets.Pubrec} {
		pk := ack(typ, 5, 0x10)
		pk.PacketID = 7
		if got := encode(pk); len(got) != 4 {
			t.Fatalf("mochi now writes % x for reason 0x10: drop keepSuccessReason", got)
		}
		keepSuccessReason(&pk)
		got := encode(pk)
		if len(got) < 5 || got[4] != 0x10 || !bytes.Contains(got, []byte("no matching subscribers")) {
			t.Errorf("type %d: % x, want reason 0x10 and its reason string", typ, got)
		}
	}
	for _, pk := range []packets.Packet{ack(packets.Puback, 5, 0x00), ack(packets.Puback, 5, 0x87), ack(packets.Puback, 4, 0x10), ack(packets.Pubcomp, 5, 0x00)} {
		before := pk
		keepSuccessReason(&pk)
		if pk.Properties.ReasonString != before.Properties.ReasonString {
			t.Errorf("%+v got a reason string", before)
		}
	}
}

func TestUnsent(t *testing.T) {
	for _, c := range []struct {
		pk   packets.Packet
		want bool
	}{
		{ack(packets.Disconnect, 4, 0x8B), true},
		{ack(packets.Disconnect, 3, 0x00), true},
		{ack(packets.Disconnect, 5, 0x8B), false},
		{ack(packets.Puback, 4, 0x00), false},
	} {
		if got := unsent(&c.pk); got != c.want {
			t.Errorf("%+v: unsent %v, want %v", c.pk.FixedHeader, got, c.want)
		}
	}
}

// A retained will keeps the properties its client gave it when the hub
// sends it on SUBSCRIBE, at QoS 0 and 1, and never shows the hub's own
// carrier of them (will.go).
func TestRetainedWillKeepsProperties(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:test:will-props"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/gone"
	res := mustDial(t, e.addr, nil).join(lmos.TopicKey(id), tdgen.MakeTD(id, "A"), "")
	if res.Credentials == nil {
		t.Fatalf("join: %+v", res)
	}
	// A raw CONNECT (mochi's encoder): paho.golang v0.22 sent no will
	// properties here.
	owner, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	connect := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 5,
		Connect: packets.ConnectParams{
			ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "will-owner",
			UsernameFlag: true, Username: []byte(res.Credentials.Username),
			PasswordFlag: true, Password: []byte(res.Credentials.Password),
			WillFlag: true, WillTopic: topic, WillPayload: []byte("bye"), WillQos: 1, WillRetain: true,
			WillProperties: packets.Properties{ContentType: "text/plain"},
		},
	}
	if err := connect.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	owner.SetReadDeadline(time.Now().Add(3 * time.Second))
	ack := make([]byte, 4)
	if _, err := io.ReadFull(owner, ack); err != nil || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("CONNACK % x: %v", ack, err)
	}
	owner.Close() // no DISCONNECT: the will is published
	testwait.Eventually(t, 5*time.Second, "the will retained", func() bool { return len(e.b.server.Topics.Messages(topic)) == 1 })
	for _, qos := range []byte{0, 1} {
		sub := mustDial(t, e.addr, nil)
		deadline := time.Now().Add(5 * time.Second)
		var got *paho.Publish
		for got == nil && time.Now().Before(deadline) {
			if _, err := sub.C.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: qos}}}); err != nil {
				t.Fatal(err)
			}
			select {
			case got = <-sub.Msgs:
			case <-time.After(200 * time.Millisecond): // the will is not retained yet
				sub.C.Unsubscribe(context.Background(), &paho.Unsubscribe{Topics: []string{topic}})
			}
		}
		if got == nil {
			t.Fatalf("QoS %d: no retained will", qos)
		}
		if !got.Retain || string(got.Payload) != "bye" || got.Properties.ContentType != "text/plain" {
			t.Errorf("QoS %d: retained will %+v, properties %+v", qos, got, got.Properties)
		}
		for _, u := range got.Properties.User {
			if u.Key == willKey {
				t.Errorf("QoS %d: the hub's carrier %q reached a subscriber", qos, u.Key)
			}
		}
	}
}
