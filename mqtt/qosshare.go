package mqtt

import (
	"github.com/mochi-mqtt/server/v2/packets"
)

// One publish delivered at QoS 1/2 to many sessions shares what it can
// across them (issue 16): the copy of the packet each session stores (its
// payload and properties are read-only once stored: mochi resends and the
// persistence hook only read them), the encoding of each variant
// (protocol version × retain × QoS; a subscriber with subscription
// identifiers gets its own), patched per subscriber where the packet
// identifier goes, and the memory those per-subscriber copies live in,
// taken in chunks rather than one allocation per delivery.
type qosShare struct {
	base   packets.Packet
	copied bool
	// tmpl holds the encodings with packet identifier 0, [MQTT 5][retain]
	// [QoS 2]; now is the second they were made for (the Message Expiry
	// Interval counts down from it).
	tmpl [2][2][2][]byte
	now  int64
	// arena is the unused end of the chunk deliveries are copied into;
	// left is how many subscribers the publish may still reach, so that
	// a chunk is no larger than they need.
	arena []byte
	left  int
}

// arenaChunk bounds a chunk of arena: 64 deliveries of ~100 bytes.
const arenaChunk = 8 << 10

// packet is the copy of pk a session stores, made once per publish.
func (s *qosShare) packet(pk *packets.Packet) packets.Packet {
	if !s.copied {
		s.base = pk.Copy(false)
		s.copied = true
	}
	return s.base
}

// encode returns out encoded for a client of MQTT 5 (v5) or earlier,
// without subscription identifiers, at now: the shared variant with out's
// packet identifier patched in, in memory of its own.
func (s *qosShare) encode(out *packets.Packet, v5 bool, now int64) []byte {
	if s.now != now {
		s.tmpl = [2][2][2][]byte{}
		s.now = now
	}
	qos := out.FixedHeader.Qos
	left := max(s.left, 1)
	s.left--
	t := &s.tmpl[b2i(v5)][b2i(out.FixedHeader.Retain)][qos-1]
	if *t == nil {
		if left == 1 { // the last one: nothing to share
			return appendPublish(nil, out, v5, out.FixedHeader.Retain, qos, out.PacketID, nil, now)
		}
		*t = appendPublish(nil, out, v5, out.FixedHeader.Retain, qos, 0, nil, now)
	}
	n := len(*t)
	if len(s.arena) < n {
		s.arena = make([]byte, max(min(arenaChunk, n*left), n))
	}
	data := s.arena[:n:n]
	s.arena = s.arena[n:]
	copy(data, *t)
	// The packet identifier follows the fixed header (type byte, Variable
	// Byte Integer length) and the topic name (two-byte length + bytes).
	i := 1
	for data[i]&0x80 != 0 {
		i++
	}
	i += 1 + 2 + len(out.TopicName)
	data[i], data[i+1] = byte(out.PacketID>>8), byte(out.PacketID)
	return data
}
