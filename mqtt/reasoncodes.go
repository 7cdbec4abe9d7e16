package mqtt

import (
	"bytes"

	"github.com/mochi-mqtt/server/v2/packets"
)

// validReasons lists, per MQTT 5 packet type the broker writes, the reason
// codes the specification defines for it (MQTT 5.0 §3.2.2.2, §3.4.2.1,
// §3.5.2.1, §3.6.2.1, §3.7.2.1, §3.9.3, §3.11.3, §3.14.2.1, §3.15.2.1).
// A strict client (mqtt.js, whose parser then loses its place in the
// stream) treats any other code as a protocol error.
var validReasons = map[byte]map[byte]bool{
	packets.Connack: set(0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C,
		0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F),
	packets.Puback:   set(0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99),
	packets.Pubrec:   set(0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99),
	packets.Pubrel:   set(0x00, 0x92),
	packets.Pubcomp:  set(0x00, 0x92),
	packets.Suback:   set(0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2),
	packets.Unsuback: set(0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91),
	packets.Disconnect: set(0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F,
		0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2),
	packets.Auth: set(0x00, 0x18, 0x19),
}

// validReasons311 is the same for MQTT 3.1.1, where only SUBACK return
// codes are per entry (§3.9.3) and CONNACK carries a return code 0–5
// (§3.2.2.3); acknowledgements of publishes carry none.
var validReasons311 = map[byte]map[byte]bool{
	packets.Connack: set(0x00, 0x01, 0x02, 0x03, 0x04, 0x05),
	packets.Suback:  set(0x00, 0x01, 0x02, 0x80),
}

// connack3 maps MQTT 5 CONNACK reasons to the 3.1.1 return codes that
// mean the same (§3.2.2.3). mochi maps them itself for 3.1 and 3.1.1
// clients, but not for a CONNECT of a protocol level it does not know
// (which it refuses with 0x82 Protocol Error in the 3.1.1 layout; the
// 3.1.1 answer is 0x01 unacceptable protocol version).
var connack3 = map[byte]byte{0x84: 0x01, 0x85: 0x02, 0x86: 0x04, 0x87: 0x05, 0x8C: 0x04}

func set(codes ...byte) map[byte]bool {
	m := make(map[byte]bool, len(codes))
	for _, c := range codes {
		m[c] = true
	}
	return m
}

// fixReasonCodes replaces every reason code in pk that the specification
// does not define for its packet type and protocol version, and reports
// whether it changed anything. A success-range code (below 0x80) becomes
// 0x00 Success, which is what mochi means by the QoS-granted codes it puts
// on PUBACK (mochi issue #474); a failure code, and any code on a CONNACK,
// becomes the packet type's generic failure, so a refusal is never turned
// into a success.
func fixReasonCodes(pk *packets.Packet) bool {
	valid := validReasons
	if pk.ProtocolVersion != 5 {
		valid = validReasons311
	}
	codes := valid[pk.FixedHeader.Type]
	if codes == nil {
		return false
	}
	changed := false
	fix := func(c byte) byte {
		if codes[c] {
			return c
		}
		changed = true
		switch {
		case pk.FixedHeader.Type == packets.Connack && pk.ProtocolVersion != 5:
			if pk.ProtocolVersion < 3 || pk.ProtocolVersion > 5 {
				return 0x01 // unacceptable protocol version: a level mochi does not know
			}
			if v3, ok := connack3[c]; ok {
				return v3
			}
			return 0x03 // server unavailable: a CONNACK that is not 0 refuses
		case pk.FixedHeader.Type == packets.Connack:
			return 0x80
		case c < 0x80:
			return 0x00
		case codes[0x80]:
			return 0x80
		default: // PUBREL, PUBCOMP: their one failure
			return 0x92
		}
	}
	pk.ReasonCode = fix(pk.ReasonCode)
	for i, c := range pk.ReasonCodes {
		pk.ReasonCodes[i] = fix(c)
	}
	return changed
}

// keepSuccessReason makes mochi write a v5 PUBACK's or PUBREC's success
// reason other than 0x00 (0x10 No matching subscribers): its encoder
// writes the reason byte only for failures (≥ 0x80) or when properties
// follow, so 0x10 alone would read as 0x00 Success. A Reason String
// (§3.4.2.2.2) makes properties follow. A client that asked for no problem
// information (Request Problem Information 0) gets none, and so reads
// 0x00: mochi leaves no other way to write the byte.
func keepSuccessReason(pk *packets.Packet) {
	if pk.ProtocolVersion != 5 || pk.ReasonCode == 0 || pk.ReasonCode >= 0x80 || pk.Properties.ReasonString != "" {
		return
	}
	if t := pk.FixedHeader.Type; t == packets.Puback || t == packets.Pubrec {
		pk.Properties.ReasonString = "no matching subscribers"
	}
}

// unsent reports whether pk is a packet the client's protocol version does
// not let a server send: a DISCONNECT to an MQTT 3.1.1 client (§3.14 of
// 3.1.1: client to server only). mochi writes one before it closes such a
// connection (shutdown, receive maximum exceeded, session taken over);
// strict clients such as Python paho-mqtt call it a protocol error.
func unsent(pk *packets.Packet) bool {
	return pk.FixedHeader.Type == packets.Disconnect && pk.ProtocolVersion != 5
}

// tooLarge reports whether mochi's WritePacket will refuse the PUBLISH pk
// as larger than the client's Maximum Packet Size (pk.Mods.MaxSize, set):
// it encodes it as mochi will (which may already leave out properties to
// fit). Only deliveries to clients that set a maximum pay for it.
func tooLarge(pk packets.Packet) bool {
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		return false // mochi's encoder fails the same way and writes nothing
	}
	return uint32(buf.Len()) > pk.Mods.MaxSize
}
