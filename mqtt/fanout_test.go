package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	pahopk "github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// mochiEncoding is what mochi's own delivery writes for pk to a client of
// the given protocol version (Client.WritePacket with the defaults the
// broker runs with): the reference appendPublish must match byte for byte.
func mochiEncoding(t testing.TB, pk packets.Packet, version byte, retain bool, ids []int, now int64) []byte {
	return mochiEncodingQoS(t, pk, version, retain, 0, 0, ids, now)
}

func mochiEncodingQoS(t testing.TB, pk packets.Packet, version byte, retain bool, qos byte, id uint16, ids []int, now int64) []byte {
	t.Helper()
	out := pk.Copy(false)
	out.ProtocolVersion = version
	out.FixedHeader.Qos = qos
	out.PacketID = id
	out.FixedHeader.Retain = retain
	out.Properties.SubscriptionIdentifier = ids
	out.Mods.AllowResponseInfo = true
	if pk.Expiry > 0 {
		out.Properties.MessageExpiryInterval = uint32(max(pk.Expiry-now, 1))
	}
	var buf bytes.Buffer
	if err := out.PublishEncode(&buf); err != nil {
		t.Fatalf("mochi encode: %v", err)
	}
	return buf.Bytes()
}

// pahoDecode reads an encoding with paho's MQTT 5 decoder, an
// implementation independent of both mochi and appendPublish.
func pahoDecode(t testing.TB, b []byte) *pahopk.Publish {
	t.Helper()
	cp, err := pahopk.ReadPacket(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("paho cannot read % x: %v", b, err)
	}
	p, ok := cp.Content.(*pahopk.Publish)
	if !ok {
		t.Fatalf("paho read %T", cp.Content)
	}
	return p
}

func publishPacket(topic string, payload []byte) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: topic, Payload: payload}
}

func TestAppendPublishMatchesMochi(t *testing.T) {
	now := time.Now().Unix()
	full := publishPacket("lmos/v1/things/x/events/e", []byte(`{"t":21.5}`))
	full.Properties = packets.Properties{
		PayloadFormat: 1, PayloadFormatFlag: true,
		MessageExpiryInterval: 60,
		ContentType:           "application/cbor",
		ResponseTopic:         "lmos/v1/clients/c/replies",
		CorrelationData:       []byte{1, 2, 3},
		User:                  []packets.UserProperty{{Key: "traceparent", Val: "00-ab-cd-01"}, {Key: "k", Val: ""}},
	}
	full.Expiry = now + 60
	wildReply := publishPacket("a/b", nil)
	wildReply.Properties.ResponseTopic = "a/+"                    // not a topic name: dropped
	big := publishPacket("a", bytes.Repeat([]byte{'x'}, 200_000)) // 3-byte remaining length
	cases := map[string]packets.Packet{
		"bare":        publishPacket("a/b", []byte("hi")),
		"empty":       publishPacket("a", nil),
		"properties":  full,
		"wild reply":  wildReply,
		"big payload": big,
	}
	for name, pk := range cases {
		for _, v := range []byte{3, 4, 5} {
			for _, retain := range []bool{false, true} {
				for _, ids := range [][]int{nil, {1}, {3, 200, 70000}} {
					if v < 5 && ids != nil {
						continue
					}
					t.Run(fmt.Sprintf("%s/v%d/retain=%v/ids=%v", name, v, retain, ids), func(t *testing.T) {
						got := appendPublish(nil, &pk, v == 5, retain, 0, 0, ids, now)
						if want := mochiEncoding(t, pk, v, retain, ids, now); !bytes.Equal(got, want) {
							t.Fatalf("encoding differs from mochi's\n got % x\nwant % x", head(got), head(want))
						}
						if v != 5 {
							return
						}
						p := pahoDecode(t, got)
						if p.Topic != pk.TopicName || !bytes.Equal(p.Payload, pk.Payload) || p.Retain != retain || p.QoS != 0 {
							t.Fatalf("paho read %s %q retain %v qos %d", p.Topic, head(p.Payload), p.Retain, p.QoS)
						}
						if ct := pk.Properties.ContentType; p.Properties.ContentType != ct {
							t.Fatalf("content type %q", p.Properties.ContentType)
						}
						if len(ids) > 0 && p.Properties.SubscriptionIdentifier == nil {
							t.Fatal("no subscription identifier")
						}
					})
				}
			}
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 64)] }

// QoS 1/2 deliveries (qos.go) carry the QoS bits and the packet identifier.
func TestAppendPublishQoSMatchesMochi(t *testing.T) {
	now := time.Now().Unix()
	pk := publishPacket("lmos/v1/things/x/status", []byte(`{"status":"online"}`))
	pk.Properties.ContentType = "application/json"
	for _, v := range []byte{4, 5} {
		for _, qos := range []byte{1, 2} {
			for _, id := range []uint16{1, 0x1234, 0xffff} {
				got := appendPublish(nil, &pk, v == 5, true, qos, id, nil, now)
				if want := mochiEncodingQoS(t, pk, v, true, qos, id, nil, now); !bytes.Equal(got, want) {
					t.Fatalf("v%d qos %d id %d: encoding differs from mochi's\n got % x\nwant % x", v, qos, id, got, want)
				}
				if v == 5 {
					if p := pahoDecode(t, got); p.QoS != qos || p.PacketID != id || p.Topic != pk.TopicName {
						t.Fatalf("paho read qos %d id %d topic %s", p.QoS, p.PacketID, p.Topic)
					}
				}
			}
		}
	}
}

// FuzzAppendPublish checks appendPublish against mochi's encoder and paho's
// decoder on arbitrary packets.
func FuzzAppendPublish(f *testing.F) {
	f.Add("a/b", []byte("hi"), "", []byte(nil), "", "", uint32(0), uint32(0), true, false, byte(0))
	f.Add("lmos/v1/things/x/events/e", []byte{0xa1, 0x61, 0x74, 0x01}, "application/cbor", []byte{9}, "traceparent", "00-1", uint32(7), uint32(3600), true, true, byte(1))
	f.Add("x", bytes.Repeat([]byte{1}, 300), "text/plain", []byte(nil), "k", "", uint32(268435455), uint32(1), false, true, byte(1))
	f.Fuzz(func(t *testing.T, topic string, payload []byte, ct string, corr []byte, key, val string, id, expiry uint32, v5, retain bool, format byte) {
		if topic == "" || len(topic) > 0xffff || len(ct) > 0xffff || len(corr) > 0xffff || len(key) > 0xffff || len(val) > 0xffff {
			t.Skip()
		}
		now := time.Now().Unix()
		pk := publishPacket(topic, payload)
		pk.Properties.ContentType = ct
		pk.Properties.CorrelationData = corr
		pk.Properties.PayloadFormat, pk.Properties.PayloadFormatFlag = format&1, format&2 != 0
		if key != "" {
			pk.Properties.User = []packets.UserProperty{{Key: key, Val: val}}
		}
		if expiry > 0 {
			pk.Properties.MessageExpiryInterval = expiry
			pk.Expiry = now + int64(expiry)
		}
		var ids []int
		if id = id % 268435456; id > 0 && v5 {
			ids = []int{int(id)}
		}
		version := byte(4)
		if v5 {
			version = 5
		}
		got := appendPublish(nil, &pk, v5, retain, 0, 0, ids, now)
		if want := mochiEncoding(t, pk, version, retain, ids, now); !bytes.Equal(got, want) {
			t.Fatalf("encoding differs from mochi's\n got % x\nwant % x", head(got), head(want))
		}
		if !v5 {
			return
		}
		p := pahoDecode(t, got)
		if p.Topic != topic || !bytes.Equal(p.Payload, payload) || p.Retain != retain || p.Properties.ContentType != ct ||
			!bytes.Equal(p.Properties.CorrelationData, corr) {
			t.Fatalf("paho read %+v", p)
		}
		if len(ids) > 0 && (p.Properties.SubscriptionIdentifier == nil || *p.Properties.SubscriptionIdentifier != ids[0]) {
			t.Fatalf("subscription identifier %v, want %v", p.Properties.SubscriptionIdentifier, ids)
		}
		if key != "" && (len(p.Properties.User) != 1 || p.Properties.User[0].Key != key || p.Properties.User[0].Value != val) {
			t.Fatalf("user properties %+v", p.Properties.User)
		}
	})
}

// subscribe makes one SUBSCRIBE with the given options.
func (c *client) subscribe(opts []paho.SubscribeOptions, id int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := &paho.Subscribe{Subscriptions: opts}
	if id > 0 {
		s.Properties = &paho.SubscribeProperties{SubscriptionIdentifier: &id}
	}
	ack, err := c.C.Subscribe(ctx, s)
	if err != nil {
		c.t.Fatalf("subscribe %+v: %v", opts, err)
	}
	for _, code := range ack.Reasons {
		if code >= 0x80 {
			c.t.Fatalf("subscribe %+v refused: %#x", opts, code)
		}
	}
}

// rawClient is a hand-written subscriber of MQTT 3.1.1 (paho.golang speaks
// only v5) or 5 (to see every subscription identifier, of which paho keeps
// one).
type rawClient struct {
	t      testing.TB
	v5     bool
	conn   net.Conn
	r      *bufio.Reader
	lastID byte
}

func dialRaw(t testing.TB, addr, clientID string, v5 bool) *rawClient {
	t.Helper()
	return dialRawWith(t, &net.Dialer{}, addr, clientID, v5)
}

// dialRawWith is dialRaw through d (to set socket options before the
// connection is made).
func dialRawWith(t testing.TB, d *net.Dialer, addr, clientID string, v5 bool) *rawClient {
	t.Helper()
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	level := byte(4)
	if v5 {
		level = 5
	}
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', level, 2, 0, 30} // clean session
	if v5 {
		vh = append(vh, 0) // no properties
	}
	vh = append(vh, 0, byte(len(clientID)))
	vh = append(vh, clientID...)
	if _, err := conn.Write(append([]byte{0x10, byte(len(vh))}, vh...)); err != nil {
		t.Fatal(err)
	}
	c := &rawClient{t: t, v5: v5, conn: conn, r: bufio.NewReader(conn)}
	if typ, body := c.read(); typ != 0x20 || body[1] != 0 {
		t.Fatalf("CONNACK %#x % x", typ, body)
	}
	return c
}

// read returns the next packet's first byte and body.
func (c *rawClient) read() (byte, []byte) {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, err := c.r.ReadByte()
	if err != nil {
		c.t.Fatalf("raw read: %v", err)
	}
	n, shift := 0, 0
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			c.t.Fatalf("raw read: %v", err)
		}
		n |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			break
		}
		shift += 7
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		c.t.Fatalf("raw read: %v", err)
	}
	return h, body
}

// subscribe subscribes to filter at QoS 0, with subscription identifier id
// (v5, 0 for none).
func (c *rawClient) subscribe(filter string, id int) {
	c.t.Helper()
	c.subscribeOpts(filter, id, 0)
}

// subscribeOpts subscribes with the subscription options byte opts (QoS,
// No Local, Retain As Published, Retain Handling << 4).
func (c *rawClient) subscribeOpts(filter string, id int, opts byte) {
	c.t.Helper()
	c.lastID++
	body := []byte{0, c.lastID}
	if c.v5 {
		if id > 0 {
			props := appendVarInt([]byte{0x0b}, id)
			body = append(appendVarInt(body, len(props)), props...)
		} else {
			body = append(body, 0)
		}
	}
	body = append(body, byte(len(filter)>>8), byte(len(filter)))
	body = append(append(body, filter...), opts)
	if _, err := c.conn.Write(append([]byte{0x82, byte(len(body))}, body...)); err != nil {
		c.t.Fatal(err)
	}
	typ, ack := c.read()
	if typ != 0x90 || ack[len(ack)-1] != opts&3 {
		c.t.Fatalf("SUBACK %#x % x", typ, ack)
	}
}

// rawPublish is a QoS 0 PUBLISH as read off the wire.
type rawPublish struct {
	retain  bool
	topic   string
	payload []byte
	ids     []int // subscription identifiers, in wire order
	props   int   // number of properties
}

func (c *rawClient) next() rawPublish {
	c.t.Helper()
	h, body := c.read()
	if h>>4 != 3 || h&0x06 != 0 {
		c.t.Fatalf("not a QoS 0 PUBLISH: %#x % x", h, body)
	}
	n := int(body[0])<<8 | int(body[1])
	p := rawPublish{retain: h&1 == 1, topic: string(body[2 : 2+n])}
	rest := body[2+n:]
	if c.v5 {
		l, k := readVarInt(rest)
		props := rest[k : k+l]
		rest = rest[k+l:]
		for len(props) > 0 {
			p.props++
			id := props[0]
			props = props[1:]
			switch id {
			case 0x01:
				props = props[1:]
			case 0x02:
				props = props[4:]
			case 0x03, 0x08, 0x09:
				props = props[2+(int(props[0])<<8|int(props[1])):]
			case 0x0b:
				v, k := readVarInt(props)
				p.ids = append(p.ids, v)
				props = props[k:]
			case 0x26:
				for range 2 {
					props = props[2+(int(props[0])<<8|int(props[1])):]
				}
			default:
				c.t.Fatalf("unexpected property %#x", id)
			}
		}
	}
	p.payload = rest
	return p
}

func readVarInt(b []byte) (n, size int) {
	for i, shift := 0, 0; i < len(b); i, shift = i+1, shift+7 {
		n |= int(b[i]&0x7f) << shift
		if b[i]&0x80 == 0 {
			return n, i + 1
		}
	}
	return n, len(b)
}

// A QoS 0 publish reaches MQTT 5 subscribers with its properties and MQTT
// 3.1.1 subscribers without, with subscription identifiers, No Local and
// Retain As Published honoured, and is retained by the fan-out as mochi
// would.
func TestFanOutDeliveries(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:fan"
	tid := lmos.TopicKey(id)
	events := lmos.ThingsPrefix + tid + "/events/"
	props := lmos.ThingsPrefix + tid + "/properties/temp"
	owner, _ := joinOwner(t, e, id, nil)
	// The owner reads its own events but not with No Local.
	owner.subscribe([]paho.SubscribeOptions{{Topic: events + "+", QoS: 0, NoLocal: true}}, 0)

	plain := mustDial(t, e.addr, nil)
	plain.subscribe([]paho.SubscribeOptions{{Topic: events + "alarm", QoS: 1}}, 0)
	// Two matching filters with identifiers: one message carrying both.
	withIDs := dialRaw(t, e.addr, "with-ids", true)
	withIDs.subscribe(events+"+", 7)
	withIDs.subscribe(events+"alarm", 3)
	v3 := dialRaw(t, e.addr, "old-one", false)
	v3.subscribe(events+"alarm", 0)
	// Request Problem Information 0 (paho sends it with any properties):
	// User Properties still come [MQTT-3.1.2-29]; mochi's delivery drops them.
	quiet := mustDial(t, e.addr, &paho.Connect{CleanStart: true, Properties: &paho.ConnectProperties{}})
	quiet.subscribe([]paho.SubscribeOptions{{Topic: events + "alarm", QoS: 0}}, 0)

	traceparent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	_, err := pubProps(owner, events+"alarm", []byte(`{"level":3}`), 0, &paho.PublishProperties{
		ContentType:     "application/json",
		CorrelationData: []byte("c1"),
		ResponseTopic:   "lmos/v1/clients/x/replies",
		MessageExpiry:   ptr(uint32(120)),
		PayloadFormat:   ptr(byte(1)),
		User:            paho.UserProperties{{Key: "traceparent", Value: traceparent}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := plain.next(events + "alarm")
	p := m.Properties
	if string(m.Payload) != `{"level":3}` || m.QoS != 0 || m.Retain || p.ContentType != "application/json" ||
		string(p.CorrelationData) != "c1" || p.ResponseTopic != "lmos/v1/clients/x/replies" ||
		p.MessageExpiry == nil || *p.MessageExpiry < 119 || *p.MessageExpiry > 120 ||
		p.PayloadFormat == nil || *p.PayloadFormat != 1 || p.User.Get("traceparent") != traceparent || p.SubscriptionIdentifier != nil {
		t.Fatalf("delivered %+v with %+v", m, p)
	}
	if m := quiet.next(events + "alarm"); m.Properties.User.Get("traceparent") != traceparent {
		t.Fatalf("user properties lost with Request Problem Information 0: %+v", m.Properties.User)
	}
	// One message (the next one proves it was not sent twice) with both
	// identifiers.
	if r := withIDs.next(); r.topic != events+"alarm" || !slices.Equal(r.ids, []int{3, 7}) || r.props != 8 {
		t.Fatalf("with identifiers: %+v", r)
	}
	if r := v3.next(); r.retain || r.topic != events+"alarm" || string(r.payload) != `{"level":3}` {
		t.Fatalf("v3 got %+v", r)
	}
	owner.mustPub(events+"other", []byte("2"), 0, false)
	if r := withIDs.next(); r.topic != events+"other" || !slices.Equal(r.ids, []int{7}) {
		t.Fatalf("with identifiers, second message: %+v", r)
	}
	owner.none(events+"alarm", 50*time.Millisecond) // No Local

	// Retain As Published, and the retained message kept for later readers.
	rap := mustDial(t, e.addr, nil)
	rap.subscribe([]paho.SubscribeOptions{{Topic: props, QoS: 0, RetainAsPublished: true}}, 0)
	plain.subscribe([]paho.SubscribeOptions{{Topic: props, QoS: 0}}, 0)
	v3.subscribe(props, 0)
	owner.mustPub(props, []byte("21.5"), 0, true)
	if m := rap.next(props); !m.Retain || string(m.Payload) != "21.5" {
		t.Fatalf("retain as published: %+v", m)
	}
	if m := plain.next(props); m.Retain {
		t.Fatalf("live delivery kept the retain flag: %+v", m)
	}
	if r := v3.next(); r.retain || string(r.payload) != "21.5" {
		t.Fatalf("v3 live delivery: %+v", r)
	}
	later := mustDial(t, e.addr, nil)
	later.mustSub(props)
	if m := later.next(props); !m.Retain || string(m.Payload) != "21.5" {
		t.Fatalf("retained: %+v", m)
	}
	e.restart() // stored like any retained message
	later = mustDial(t, e.addr, nil)
	later.mustSub(props)
	if m := later.next(props); string(m.Payload) != "21.5" {
		t.Fatalf("retained after restart: %+v", m)
	}
}

func ptr[T any](v T) *T { return &v }

// A shared subscription group gets each message once, the Maximum Packet
// Size a client asked for is respected, and messages keep their order.
func TestFanOutSharedSizeOrder(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:fan2"
	events := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/"
	owner, _ := joinOwner(t, e, id, nil)
	a, b := mustDial(t, e.addr, nil), mustDial(t, e.addr, nil)
	for _, c := range []*client{a, b} {
		c.subscribe([]paho.SubscribeOptions{{Topic: "$share/g/" + events + "n", QoS: 0}}, 0)
	}
	small := mustDial(t, e.addr, &paho.Connect{CleanStart: true, Properties: &paho.ConnectProperties{MaximumPacketSize: ptr(uint32(200))}})
	small.subscribe([]paho.SubscribeOptions{{Topic: events + "n", QoS: 0}}, 0)
	const n = 100
	for i := range n {
		payload := fmt.Appendf(nil, "%d", i)
		if i%10 == 5 {
			payload = append(payload, bytes.Repeat([]byte{' '}, 300)...) // over small's limit
		}
		owner.mustPub(events+"n", payload, 0, false)
	}
	owner.mustPub(events+"n", []byte("end"), 1, false) // QoS 1: never dropped, and after the rest
	seen := map[string]int{}
	ends := 0
	for ends == 0 {
		select {
		case m := <-a.Msgs:
			seen[string(bytes.TrimSpace(m.Payload))]++
		case m := <-b.Msgs:
			seen[string(bytes.TrimSpace(m.Payload))]++
		case <-time.After(5 * time.Second):
			t.Fatalf("group got %d of %d messages", len(seen), n+1)
		}
		ends = seen["end"]
	}
	time.Sleep(50 * time.Millisecond)
	for len(a.Msgs)+len(b.Msgs) > 0 {
		select {
		case m := <-a.Msgs:
			seen[string(bytes.TrimSpace(m.Payload))]++
		case m := <-b.Msgs:
			seen[string(bytes.TrimSpace(m.Payload))]++
		}
	}
	for i := range n {
		if c := seen[fmt.Sprint(i)]; c != 1 {
			t.Fatalf("message %d reached the group %d times", i, c)
		}
	}
	// small: every message under its limit, in order, none over it.
	want := 0
	for {
		m := small.next(events + "n")
		if string(m.Payload) == "end" {
			break
		}
		if want%10 == 5 {
			want++
		}
		if string(m.Payload) != fmt.Sprint(want) {
			t.Fatalf("small got %.20q, want %d", m.Payload, want)
		}
		want++
	}
	if want != n {
		t.Fatalf("small got messages up to %d of %d", want, n)
	}
}

// A subscriber that stops reading loses QoS 0 messages once its queue is
// full (counted as dropped); the publisher and the other subscribers go on.
func TestFanOutSlowSubscriber(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:fan3"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/big"
	owner, _ := joinOwner(t, e, id, nil)
	stuck := dialRaw(t, e.addr, "stuck", true)
	stuck.subscribe(topic, 0) // and never reads again
	fast := mustDial(t, e.addr, nil)
	fast.mustSub(topic)
	queueDrops := func() uint64 { return e.b.Dropped("queue_full") + e.b.Dropped("slow_client") }
	dropped0 := queueDrops()
	payload := bytes.Repeat([]byte{'x'}, 64<<10)
	for i := range 400 { // 25 MiB: more than loopback buffers hold
		binary := fmt.Appendf(payload[:0:0], "%04d", i)
		owner.mustPub(topic, append(binary, payload...), 0, false)
		if m := fast.next(topic); string(m.Payload[:4]) != fmt.Sprintf("%04d", i) {
			t.Fatalf("fast subscriber got %q, want %04d", m.Payload[:4], i)
		}
	}
	if d := queueDrops() - dropped0; d == 0 {
		t.Fatal("nothing dropped for the stuck subscriber")
	}
	// The broker still serves: a QoS 1 publish is acknowledged.
	if _, err := owner.pub(topic, []byte("ok"), 1, false, ""); err != nil {
		t.Fatal(err)
	}
}

// A subscriber on a connection the broker did not wrap (here one from
// mochi's own TCP listener) gets its messages from mochi, retained ones
// included.
func TestFanOutFallsBackToMochi(t *testing.T) {
	e := newEnv(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := e.b.server.AddListener(listeners.NewTCP(listeners.Config{ID: "raw", Address: addr})); err != nil {
		t.Fatal(err)
	}
	go e.b.server.Listeners.Serve("raw", e.b.server.EstablishConnection)
	testwait.Eventually(t, 2*time.Second, "mochi's listener up", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	raw := mustDial(t, addr, nil)
	const id = "urn:fan5"
	props := lmos.ThingsPrefix + lmos.TopicKey(id) + "/properties/p"
	owner, _ := joinOwner(t, e, id, nil)
	raw.subscribe([]paho.SubscribeOptions{{Topic: props, QoS: 0}}, 0)
	owner.mustPub(props, []byte("1"), 0, true)
	if m := raw.next(props); string(m.Payload) != "1" || m.Retain {
		t.Fatalf("live: %+v", m)
	}
	later := mustDial(t, addr, nil)
	later.mustSub(props)
	if m := later.next(props); string(m.Payload) != "1" || !m.Retain {
		t.Fatalf("retained: %+v", m)
	}
	if n := len(e.b.server.Topics.Messages(props)); n != 1 {
		t.Fatalf("%d retained messages", n)
	}
}

// MQTT over WebSocket (ServeConn, not a TCP connection) gets its queued
// packets in one write each, in order.
func TestFanOutServeConn(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:fan4"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/events/e"
	owner, _ := joinOwner(t, e, id, nil)
	// The server side hidden behind another type, as a WebSocket
	// connection would be.
	peer, server := loopbackPair(t)
	done := make(chan error, 1)
	go func() { done <- e.b.ServeConn(struct{ net.Conn }{server}) }()
	sub := pipeClient(t, peer)
	sub.mustSub(topic)
	// Rounds of 50, fewer than a queue holds, published faster than a pipe
	// carries them: they pile up and go out in batches.
	for round := range 6 {
		for i := range 50 {
			owner.mustPub(topic, fmt.Appendf(nil, "%d", round*50+i), 0, false)
		}
		for i := range 50 {
			if m := sub.next(topic); string(m.Payload) != fmt.Sprint(round*50+i) {
				t.Fatalf("got %q, want %d", m.Payload, round*50+i)
			}
		}
	}
	sub.close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConn did not return after the client left")
	}
}

// pipeClient is a paho client on a connection made by the test.
func pipeClient(t *testing.T, conn net.Conn) *client {
	t.Helper()
	cl, _, err := connectOver(t, conn, &paho.Connect{CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// outConn: queued packets and mochi's writes reach the peer in order, the
// queue is bounded in bytes for QoS 0 (not for what is owed), and a broken
// connection refuses more.
func TestOutConn(t *testing.T) {
	server, peer := net.Pipe() // synchronous: a write waits for the reader
	const budget = 100
	c := newOutConn(server, budget, 0, nil)
	for _, p := range []string{"a", "b"} {
		if c.enqueue([]byte(p), qos0, nil) != queued {
			t.Fatalf("enqueue %s refused", p)
		}
	}
	wrote := make(chan error, 1)
	go func() { _, err := c.Write([]byte("C")); wrote <- err }()
	got := make([]byte, 0, 8)
	buf := make([]byte, 8)
	for len(got) < 3 {
		n, err := peer.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if string(got) != "abC" {
		t.Fatalf("peer read %q, want abC", got)
	}
	// The peer stops reading: the flusher blocks on its first batch, and
	// the queue takes budget bytes of QoS 0 more, no more; owed packets
	// still go in.
	c.enqueue([]byte("x"), qos0, nil)
	testwait.Eventually(t, 2*time.Second, "the flusher holds x", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.q) == 0 && c.flushing
	})
	accepted := 0
	for range budget + 10 {
		if c.enqueue([]byte("y"), qos0, nil) == queued {
			accepted++
		}
	}
	if accepted != budget {
		t.Fatalf("queue took %d bytes, want %d", accepted, budget)
	}
	if c.slowFor(time.Now().Add(time.Second)) < time.Second {
		t.Fatal("a refused delivery did not start the slow clock")
	}
	if c.enqueue([]byte("owed"), owed, nil) != queued || c.enqueue([]byte("retained"), retained, nil) != queued {
		t.Fatal("a full queue refused what is owed")
	}
	peer.Close() // the blocked write fails
	testwait.Eventually(t, 2*time.Second, "broken connection refuses", func() bool { return c.enqueue([]byte("z"), owed, nil) == gone && !c.flushingNow() })
	c.Close()
}

func (c *outConn) flushingNow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flushing
}

// Retained messages sent on SUBSCRIBE go out before live deliveries that
// follow them, however slowly the subscriber reads: it never ends on an
// old value.
func TestRetainedBeforeLive(t *testing.T) {
	for _, qos := range []byte{0, 1} {
		t.Run(fmt.Sprintf("subscription QoS %d", qos), func(t *testing.T) {
			e := newEnv(t, nil)
			id := fmt.Sprintf("urn:retained-%d", qos)
			props := lmos.ThingsPrefix + lmos.TopicKey(id) + "/properties/"
			owner, _ := joinOwner(t, e, id, nil)
			const topics = 60
			big := bytes.Repeat([]byte{'.'}, 512<<10) // 30 MiB in all: more than the socket holds
			for i := range topics {
				owner.mustPub(fmt.Sprint(props, i), append([]byte("old"), big...), 0, true)
			}
			sub := dialRaw(t, e.addr, "slow", true)
			filter := props + "+"
			body := append([]byte{0, 1, 0, 0, byte(len(filter))}, filter...)
			body = append(body, qos)
			if _, err := sub.conn.Write(append([]byte{0x82, byte(len(body))}, body...)); err != nil {
				t.Fatal(err)
			}
			// Not reading: the retained messages pile up. Then new values.
			testwait.Eventually(t, 2*time.Second, "subscribed", func() bool {
				cl, ok := e.b.server.Clients.Get("slow")
				if !ok {
					return false
				}
				_, ok = cl.State.Subscriptions.Get(filter)
				return ok
			})
			for i := range topics {
				owner.mustPub(fmt.Sprint(props, i), []byte("new"), 0, true)
			}
			last := map[string]string{}
			for len(last) < topics || slices.Contains(slices.Collect(maps.Values(last)), "old") {
				h, body := sub.read()
				if h>>4 != 3 {
					continue // the SUBACK
				}
				n := int(body[0])<<8 | int(body[1])
				topic := string(body[2 : 2+n])
				l, k := readVarInt(body[2+n:])
				payload := body[2+n+k+l:]
				value := string(payload[:3])
				if last[topic] == "new" && value == "old" {
					t.Fatalf("%s: the retained old value came after the new one", topic)
				}
				last[topic] = value
			}
		})
	}
}

// Retained messages sent on SUBSCRIBE carry the retain flag and the
// subscription identifier (mochi's own path leaves it out), and follow
// Retain Handling.
func TestRetainedOnSubscribe(t *testing.T) {
	e := newEnv(t, nil)
	const id = "urn:rh"
	topic := lmos.ThingsPrefix + lmos.TopicKey(id) + "/properties/t"
	owner, _ := joinOwner(t, e, id, nil)
	owner.mustPub(topic, []byte("21.5"), 0, true)
	// QoS 0: retained once the hub has processed it, not when sent.
	testwait.Eventually(t, 2*time.Second, "retained", func() bool { return len(e.b.server.Topics.Messages(topic)) == 1 })
	c := dialRaw(t, e.addr, "rh", true)
	c.subscribe(topic, 9)
	if r := c.next(); !r.retain || string(r.payload) != "21.5" || !slices.Equal(r.ids, []int{9}) {
		t.Fatalf("retained on subscribe: %+v", r)
	}
	c.subscribeOpts(topic, 0, 1<<4)                                               // 1: only for a new subscription; this one exists
	c.subscribeOpts(lmos.ThingsPrefix+lmos.TopicKey(id)+"/properties/+", 0, 2<<4) // 2: never
	owner.mustPub(topic, []byte("22"), 0, false)                                  // a live message shows what came before
	if r := c.next(); r.retain || string(r.payload) != "22" {
		t.Fatalf("after Retain Handling 1 and 2: %+v", r)
	}
	c.subscribeOpts(topic, 0, 0) // 0: always
	if r := c.next(); !r.retain || string(r.payload) != "21.5" {
		t.Fatalf("Retain Handling 0 again: %+v", r)
	}
	v3 := dialRaw(t, e.addr, "rh3", false)
	v3.subscribe(topic, 0)
	if r := v3.next(); !r.retain || string(r.payload) != "21.5" {
		t.Fatalf("v3.1.1: %+v", r)
	}
}
