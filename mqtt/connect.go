package mqtt

import (
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// DefaultConnectTimeout is mqtt.connectTimeout's default: the time a new
// connection has to send its whole CONNECT, as the /mqtt WebSocket
// handshake has.
const DefaultConnectTimeout = 10 * time.Second

// reasonConnectTimeout counts connections closed for not sending their
// CONNECT in time.
const reasonConnectTimeout = "mqtt.connectTimeout"

// awaitConnect gives c until the connect timeout to deliver its CONNECT.
// Without it a connection that never sends one (or half of one) would
// hold its socket, buffers and goroutines for as long as its peer liked:
// mochi sets a read deadline only from the CONNECT's keep-alive. mochi
// replaces this deadline with the keep-alive one once the CONNECT is read.
func (b *Broker) awaitConnect(c *outConn) {
	by := time.Now().Add(b.cfg.ConnectTimeout)
	c.connectBy = monoOf(by)
	_ = c.SetReadDeadline(by)
}

// readConnect reads c's first packet, a CONNECT, before mochi does, into
// memory that grows with the bytes that arrive (connectStep at a time,
// doubling): mochi allocates a packet's whole announced length at once,
// so a stranger's 10-byte header announcing a 1 MiB CONNECT held 1 MiB
// until the connect timeout. mochi then reads the packet from c.pre. A
// first packet that is no CONNECT, or announces more than mochi accepts,
// is left to mochi after its header, which it refuses. A Remaining Length
// of more than four bytes is malformed [MQTT-1.5.5-1]; mochi reads on, so
// it is refused here.
//
// heads counts the fixed headers read.
func (c *outConn) readConnect(heads *atomic.Uint64) error {
	var one [1]byte
	if _, err := io.ReadFull(c.Conn, one[:]); err != nil {
		return err
	}
	head := append(make([]byte, 0, 5), one[0])
	n := 0
	for shift := 0; ; shift += 7 {
		if shift == 28 {
			return packets.ErrMalformedVariableByteInteger
		}
		if _, err := io.ReadFull(c.Conn, one[:]); err != nil {
			return err
		}
		head = append(head, one[0])
		n |= int(one[0]&0x7f) << shift
		if one[0]&0x80 == 0 {
			break
		}
	}
	heads.Add(1)
	if one := head[0]; one>>4 != packets.Connect || n+1 > MaxPacketSize {
		c.pre = head
		return nil
	}
	body, err := readGrowing(c.Conn, n)
	if err != nil {
		return err
	}
	c.pre = append(head, body...)
	return nil
}

// connectStep is the first size, and the least growth, of readGrowing's
// buffer.
const connectStep = 4 << 10

// readGrowing reads n bytes from r into memory that grows with the bytes
// that arrive, so an announced length holds no more than was sent.
func readGrowing(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, connectStep))
	for len(b) < n {
		m := min(n-len(b), max(connectStep, len(b)))
		b = slices.Grow(b, m)
		k, err := io.ReadFull(r, b[len(b):len(b)+m])
		b = b[:len(b)+k]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}
