package mqtt

import "time"

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
