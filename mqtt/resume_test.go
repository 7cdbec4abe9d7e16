package mqtt

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// A resumed session's stored QoS 1/2 messages are resent within the
// Receive Maximum of the connection that resumes it [MQTT-3.3.4-9]
// (resend.go, PROTOCOL §10 "Session resumption").

// rawPacket is one packet read off the wire: its type, the flags of its
// fixed header and its body.
type rawPacket struct {
	typ, flags byte
	body       []byte
}

// readRaw reads the next packet from r.
func readRaw(r *bufio.Reader) (rawPacket, error) {
	h, err := r.ReadByte()
	if err != nil {
		return rawPacket{}, err
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		return rawPacket{}, err
	}
	p := rawPacket{typ: h >> 4, flags: h & 0x0f, body: make([]byte, n)}
	_, err = io.ReadFull(r, p.body)
	return p, err
}

// resentPub is a PUBLISH's fields this file looks at.
type resentPub struct {
	qos     byte
	dup     bool
	id      uint16
	topic   string
	payload string
}

// parsePublish decodes a PUBLISH body (MQTT 5 when v5).
func parsePublish(t *testing.T, p rawPacket, v5 bool) resentPub {
	t.Helper()
	b := p.body
	pub := resentPub{qos: p.flags >> 1 & 3, dup: p.flags&8 != 0}
	tl := int(b[0])<<8 | int(b[1])
	pub.topic, b = string(b[2:2+tl]), b[2+tl:]
	if pub.qos > 0 {
		pub.id, b = uint16(b[0])<<8|uint16(b[1]), b[2:]
	}
	if v5 {
		n, used, err := packets.DecodeLength(bufio.NewReader(strings.NewReader(string(b))))
		if err != nil {
			t.Fatalf("PUBLISH properties: %v", err)
		}
		b = b[used+n:]
	}
	pub.payload = string(b)
	return pub
}

// ackRaw writes an acknowledgement of type typ (PUBACK, PUBREC or
// PUBCOMP) for id.
func ackRaw(t *testing.T, conn net.Conn, typ byte, id uint16) {
	t.Helper()
	if _, err := conn.Write([]byte{typ << 4, 2, byte(id >> 8), byte(id)}); err != nil {
		t.Fatal(err)
	}
}

// subscribeRawQoS sends a SUBSCRIBE of topic at qos with packet id (MQTT 5).
func subscribeRawQoS(t *testing.T, conn net.Conn, id uint16, topic string, qos byte) {
	t.Helper()
	body := []byte{byte(id >> 8), byte(id), 0, byte(len(topic) >> 8), byte(len(topic))}
	body = append(append(body, topic...), qos)
	if _, err := conn.Write(append(appendVarInt([]byte{0x82}, len(body)), body...)); err != nil {
		t.Fatal(err)
	}
}

// resumeConnect writes a CONNECT that resumes the session of clientID:
// MQTT 5 with Session Expiry 3600 and Receive Maximum rm (0: none), or
// MQTT 3.1.1 (v5 false) without Clean Session.
func resumeConnect(t *testing.T, conn net.Conn, clientID string, cred *credentials, v5 bool, rm uint16) {
	t.Helper()
	vh := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0xc0, 0, 60}
	if v5 {
		vh[6] = 5
		props := []byte{0x11, 0, 0, 0x0e, 0x10}
		if rm > 0 {
			props = append(props, 0x21, byte(rm>>8), byte(rm))
		}
		vh = append(append(vh, byte(len(props))), props...)
	}
	for _, s := range []string{clientID, cred.Username, cred.Password} {
		vh = append(append(vh, byte(len(s)>>8), byte(len(s))), s...)
	}
	if _, err := conn.Write(append(appendVarInt([]byte{0x10}, len(vh)), vh...)); err != nil {
		t.Fatal(err)
	}
}

// resumeSetup is a subscriber's session left with messages stored: q2
// QoS 2 messages on topic2, the first rel of them PUBREC'd (their PUBREL
// unanswered), then q1 QoS 1 messages on topic1, none acknowledged.
type resumeSetup struct {
	e                *env
	cred             *credentials
	clientID         string
	topic1, topic2   string
	relIDs           map[uint16]bool
	want             []string // topic and payload of each unreleased PUBLISH, oldest first
	wantRel, wantPub int
}

func storeUnacked(t *testing.T, clientID string, q2, rel, q1 int) *resumeSetup {
	t.Helper()
	e := newEnv(t, nil)
	id, pubID := "urn:resume:"+clientID, "urn:resume:"+clientID+"-pub"
	s := &resumeSetup{e: e, cred: e.thing(t, id), clientID: clientID, relIDs: map[uint16]bool{}}
	pub, _ := joinOwner(t, e, pubID, nil)
	s.topic1 = lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/events/q1"
	s.topic2 = lmos.ThingsPrefix + lmos.TopicKey(pubID) + "/events/q2"
	conn := rawConnect5As(t, e.addr, clientID, false, s.cred)
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	expect := func(typ byte) rawPacket {
		t.Helper()
		p, err := readRaw(br)
		if err != nil || p.typ != typ {
			t.Fatalf("want packet type %d, got %d (%v)", typ, p.typ, err)
		}
		return p
	}
	expect(packets.Connack)
	subscribeRawQoS(t, conn, 1, s.topic2, 2)
	expect(packets.Suback)
	subscribeRawQoS(t, conn, 2, s.topic1, 1)
	expect(packets.Suback)
	for i := range q2 {
		pub.mustPub(s.topic2, []byte("two-"+strconv.Itoa(i)), 2, false)
		p := parsePublish(t, expect(packets.Publish), true)
		if i < rel {
			ackRaw(t, conn, packets.Pubrec, p.id)
			r := expect(packets.Pubrel)
			s.relIDs[uint16(r.body[0])<<8|uint16(r.body[1])] = true
		} else {
			s.want = append(s.want, p.topic+" "+p.payload)
		}
	}
	for i := range q1 {
		pub.mustPub(s.topic1, []byte("one-"+strconv.Itoa(i)), 1, false)
		p := parsePublish(t, expect(packets.Publish), true)
		s.want = append(s.want, p.topic+" "+p.payload)
	}
	conn.Close()
	testwait.Eventually(t, 5*time.Second, "session offline", func() bool {
		cl, ok := e.b.server.Clients.Get(clientID)
		return ok && cl.Closed()
	})
	s.wantRel, s.wantPub = rel, len(s.want)
	return s
}

// drained waits until the session holds nothing more.
func (s *resumeSetup) drained(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cl, ok := s.e.b.server.Clients.Get(s.clientID)
		if !ok {
			t.Fatal("session gone")
		}
		left := cl.State.Inflight.GetAll(false)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var l []string
			for _, pk := range left {
				l = append(l, fmt.Sprintf("%d:%d:%s", pk.FixedHeader.Type, pk.PacketID, pk.Payload))
			}
			t.Fatalf("session not drained after 5 s: %d left (type:id:payload) %v", len(left), l)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resumeRaw resumes s's session on a raw connection that declares Receive
// Maximum rm (MQTT 5; 0: none) or none (3.1.1), and plays a strict
// client whose window is window: in rounds, it sends a PINGREQ and reads
// up to the PINGRESP (which the hub writes after everything it has sent
// so far), answers PUBRELs at once (PUBCOMP) and acknowledges the
// PUBLISHes of the round after the PINGRESP (PUBACK, or PUBREC and then
// PUBCOMP). A message the client has not completed counts against its
// window: the stored PUBRELs from the start, a PUBLISH until its PUBACK
// or PUBCOMP is sent. It fails when more than window are outstanding,
// on a PUBLISH without DUP, out of order or twice, and on a PUBREL it
// did not expect.
func resumeRaw(t *testing.T, s *resumeSetup, v5 bool, rm uint16, window int) {
	t.Helper()
	conn, err := net.Dial("tcp", s.e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resumeConnect(t, conn, s.clientID, s.cred, v5, rm)
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if p, err := readRaw(br); err != nil || p.typ != packets.Connack || p.body[0] != 1 {
		t.Fatalf("CONNACK with session present: % x %v", p.body, err)
	}
	outstanding := map[uint16]byte{} // id → QoS of what the client has not completed
	for id := range s.relIDs {
		outstanding[id] = 2
	}
	pubrecd := map[uint16]bool{} // QoS 2 PUBLISHes this connection PUBREC'd
	var got []string
	rels := 0
	for round := 1; ; round++ {
		if round > 100 {
			t.Fatalf("not drained after 100 rounds: got %d of %d PUBLISHes, %d outstanding", len(got), s.wantPub, len(outstanding))
		}
		if _, err := conn.Write([]byte{0xc0, 0}); err != nil {
			t.Fatal(err)
		}
		var fresh []resentPub
		for done := false; !done; {
			p, err := readRaw(br)
			if err != nil {
				t.Fatalf("round %d: %v (got %d of %d PUBLISHes)", round, err, len(got), s.wantPub)
			}
			switch p.typ {
			case packets.Pingresp:
				done = true
			case packets.Publish:
				pub := parsePublish(t, p, v5)
				if !pub.dup {
					t.Errorf("PUBLISH %d (%s) resent without DUP [MQTT-3.3.1-1]", pub.id, pub.payload)
				}
				if _, ok := outstanding[pub.id]; ok {
					t.Fatalf("PUBLISH with packet id %d, which is still outstanding", pub.id)
				}
				outstanding[pub.id] = pub.qos
				if len(outstanding) > window {
					t.Fatalf("round %d: %d messages outstanding, the client's Receive Maximum is %d [MQTT-3.3.4-9]", round, len(outstanding), window)
				}
				got = append(got, pub.topic+" "+pub.payload)
				fresh = append(fresh, pub)
			case packets.Pubrel:
				id := uint16(p.body[0])<<8 | uint16(p.body[1])
				if s.relIDs[id] {
					delete(s.relIDs, id)
					rels++
				} else if !pubrecd[id] {
					t.Fatalf("PUBREL %d for nothing PUBREC'd", id)
				}
				delete(pubrecd, id)
				ackRaw(t, conn, packets.Pubcomp, id)
				delete(outstanding, id)
			default:
				t.Fatalf("unexpected packet type %d", p.typ)
			}
		}
		if len(fresh) == 0 && len(outstanding) == 0 {
			break
		}
		for _, pub := range fresh {
			if pub.qos == 1 {
				ackRaw(t, conn, packets.Puback, pub.id)
				delete(outstanding, pub.id)
			} else {
				ackRaw(t, conn, packets.Pubrec, pub.id)
				pubrecd[pub.id] = true
			}
		}
	}
	if rels != s.wantRel {
		t.Errorf("got %d of the %d stored PUBRELs", rels, s.wantRel)
	}
	if strings.Join(got, "\n") != strings.Join(s.want, "\n") {
		t.Errorf("PUBLISHes resent:\n%s\nwant, each once, oldest first:\n%s", strings.Join(got, "\n"), strings.Join(s.want, "\n"))
	}
	s.drained(t)
}

// A raw MQTT 5 client that resumes with Receive Maximum 5 a session
// holding 2 QoS 2 messages awaiting PUBCOMP, 1 QoS 2 message never
// PUBREC'd and 20 QoS 1 messages: the PUBRELs come first, and never more
// than 5 messages are outstanding; every PUBLISH comes once, with DUP, in
// the order it was first sent, and the session drains.
func TestResumeRespectsReceiveMaximum(t *testing.T) {
	s := storeUnacked(t, "resume-rm5", 3, 2, 20)
	resumeRaw(t, s, true, 5, 5)
}

// A window larger than what is stored: everything goes out at once.
func TestResumeWindowLargerThanStored(t *testing.T) {
	s := storeUnacked(t, "resume-rm50", 3, 2, 20)
	resumeRaw(t, s, true, 50, 50)
}

// An MQTT 3.1.1 client declares no Receive Maximum: the hub's own window
// (maxInflight) applies, and all 23 are resent at once.
func TestResumeV311(t *testing.T) {
	s := storeUnacked(t, "resume-v311", 3, 2, 20)
	resumeRaw(t, s, false, 0, maxInflight)
}

// mqtt.js 5.16 keeps the QoS 2 messages it has PUBREC'd and not yet seen
// PUBREL'd, and fails with 0x93 (Receive Maximum exceeded) when a PUBLISH
// would make them more than its receiveMaximum. It resumes sessions
// holding 20 QoS 2 messages (never PUBREC'd) and 20 QoS 1 messages: as
// MQTT 5 with Receive Maximum 5 and 50, and as 3.1.1. It must report no
// error, get all 40 once in order, and the session must drain.
func TestResumeMqttJS(t *testing.T) {
	node := requireBin(t, "node")
	for _, tc := range []struct {
		name    string
		version string
		rm      int
	}{{"v5-rm5", "5", 5}, {"v5-rm50", "5", 50}, {"v311", "4", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := storeUnacked(t, "resume-js-"+tc.name, 20, 0, 20)
			host, port, _ := net.SplitHostPort(s.e.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "../test/interop/mqttjs-resume.mjs", "mqtt://"+net.JoinHostPort(host, port),
				tc.version, s.clientID, s.cred.Username, s.cred.Password, strconv.Itoa(tc.rm), strconv.Itoa(len(s.want)))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("mqtt.js: %v\n%s", err, out)
			}
			checkResumeOutput(t, "mqtt.js", string(out), s, false)
		})
	}
}

// Python paho-mqtt 1.6.1 resumes a session holding 3 QoS 2 messages (2
// awaiting PUBCOMP) and 20 QoS 1 messages, as MQTT 5 with Receive
// Maximum 5 and as 3.1.1: no error or disconnection, every message once
// in order, and the session drains.
func TestResumePahoPython(t *testing.T) {
	py := requirePahoPython(t)
	for _, tc := range []struct {
		name    string
		version string
		rm      int
	}{{"v5-rm5", "5", 5}, {"v311", "311", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := storeUnacked(t, "resume-py-"+tc.name, 3, 2, 20)
			host, port, _ := net.SplitHostPort(s.e.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, py, "../test/interop/paho_resume.py", host, port, tc.version,
				s.clientID, s.cred.Username, s.cred.Password, strconv.Itoa(tc.rm), strconv.Itoa(len(s.want)))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("paho: %v\n%s", err, out)
			}
			// paho hands a QoS 2 message over at its PUBREL, after QoS 1
			// messages that came later: the order is checked per topic.
			checkResumeOutput(t, "paho", string(out), s, true)
		})
	}
}

// checkResumeOutput checks a client's "msg TOPIC PAYLOAD" lines against
// what s stored (in order overall, or per topic), and that the session
// drained.
func checkResumeOutput(t *testing.T, who, out string, s *resumeSetup, perTopic bool) {
	t.Helper()
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "error") || strings.HasPrefix(l, "disconnected") {
			t.Errorf("%s reported %q", who, l)
		}
		if m, ok := strings.CutPrefix(l, "msg "); ok {
			got = append(got, m)
		}
	}
	want := s.want
	if perTopic {
		byTopic := func(l []string) []string {
			l = slices.Clone(l)
			slices.SortStableFunc(l, func(a, b string) int {
				return strings.Compare(strings.Fields(a)[0], strings.Fields(b)[0])
			})
			return l
		}
		got, want = byTopic(got), byTopic(want)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s got %d messages:\n%s\nwant %d, each once, oldest first:\n%s\n(output %s)", who, len(got),
			strings.Join(got, "\n"), len(want), strings.Join(want, "\n"), out)
	}
	s.drained(t)
}

// requirePahoPython returns the Python with paho-mqtt, skipping when it
// is missing and interop tests are not demanded (as requireBin does).
func requirePahoPython(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import paho.mqtt.client").Run(); err != nil {
		if os.Getenv("LMOS_INTEROP") != "" {
			t.Fatalf("python3 paho-mqtt missing: %v", err)
		}
		t.Skip("python3-paho-mqtt not installed")
	}
	return py
}

// Packet identifiers are per direction (MQTT 5 §2.2.1): a client resuming
// a session whose stored messages are identifiers 1 to 3, with Receive
// Maximum 1, subscribes with identifier 1 and unsubscribes with
// identifier 2 before acknowledging anything (as mosquitto_sub -c does on
// every reconnect). Both are granted, under the client's identifiers;
// mochi's check answered 0x91 (Packet Identifier in use).
func TestResumeSubscribeIDsIndependent(t *testing.T) {
	s := storeUnacked(t, "resume-ids", 0, 0, 3)
	conn, err := net.Dial("tcp", s.e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resumeConnect(t, conn, s.clientID, s.cred, true, 1)
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if p, err := readRaw(br); err != nil || p.typ != packets.Connack || p.body[0] != 1 {
		t.Fatalf("CONNACK with session present: % x %v", p.body, err)
	}
	subscribeRawQoS(t, conn, 1, s.topic1, 1)
	body := []byte{0, 2, 0, byte(len(s.topic2) >> 8), byte(len(s.topic2))}
	body = append(body, s.topic2...)
	if _, err := conn.Write(append(appendVarInt([]byte{0xa2}, len(body)), body...)); err != nil {
		t.Fatal(err)
	}
	var got []string
	suback, unsuback := false, false
	for !suback || !unsuback || len(got) < 3 {
		p, err := readRaw(br)
		if err != nil {
			t.Fatalf("%v (SUBACK %v, UNSUBACK %v, %d PUBLISHes)", err, suback, unsuback, len(got))
		}
		switch p.typ {
		case packets.Suback: // id, properties (none), reason codes
			if p.body[0] != 0 || p.body[1] != 1 || p.body[len(p.body)-1] != 1 {
				t.Fatalf("SUBACK % x, want identifier 1 and QoS 1 granted", p.body)
			}
			suback = true
		case packets.Unsuback:
			if p.body[0] != 0 || p.body[1] != 2 || p.body[len(p.body)-1] != 0 {
				t.Fatalf("UNSUBACK % x, want identifier 2 and Success", p.body)
			}
			unsuback = true
		case packets.Publish:
			pub := parsePublish(t, p, true)
			got = append(got, pub.topic+" "+pub.payload)
			ackRaw(t, conn, packets.Puback, pub.id)
		default:
			t.Fatalf("unexpected packet type %d", p.typ)
		}
	}
	if strings.Join(got, "\n") != strings.Join(s.want, "\n") {
		t.Errorf("got %q, want %q", got, s.want)
	}
	s.drained(t)
}

// The same after a restart of the hub: the session and its stored
// messages come back from the store, and the resend still keeps to the
// window and the order.
func TestResumeAfterRestart(t *testing.T) {
	s := storeUnacked(t, "resume-restart", 3, 0, 20)
	s.e.restart()
	resumeRaw(t, s, true, 5, 5)
}
