package mqtt

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// The hub's own connection loop (Config.ConnLoop, the setting
// mqtt.connLoop).
//
// mochi serves each connection with two goroutines it starts in its
// attachClient: one reads, parked about 5.7 KB deep under frames of its
// own, so its stack never shrinks below 16 KB, and one writes the client's
// outbound channel (4 KB). That was 20 of the ~28 KB an idle client cost
// (docs/PERFORMANCE.md, "Issue 16 — memory"). The hub already writes every
// delivery itself (fanout.go, qos.go, retained.go, outConn), so the writer
// has nothing left to do but wills, and the reader's frames are what keep
// its stack large.
//
// So the goroutine the hub's listener starts per connection serves it
// alone, with mochi's exported API only: the handshake as mochi's
// attachClient does it (its checks, hooks and session inheritance in its
// order), then a loop that waits for the socket to be readable in a
// shallow frame holding no buffer (outConn.awaitRead), reads and decodes
// one packet in a deeper frame that returns before the next wait, and
// hands it to mochi's packet processing (Server.InjectPacket, with
// mochi's receivePacket rule: a v5 error code ≥ 0x80 disconnects). An idle
// connection's stack then holds a few small frames and the runtime shrinks
// it to 4 KB. What mochi did with its unexported state the hub does with
// its own: the "taken over" mark (outConn.takenOver) and wills, including
// the Will Delay Interval (wills.go).
const (
	// ConnLoopHub serves each connection on one goroutine of the hub's
	// (the default).
	ConnLoopHub = "hub"
	// ConnLoopMochi leaves connections to mochi's attachClient, with its
	// two goroutines per client: kept to compare the two (the
	// differential test, benchmarks). The delivery path mochi needs it.
	ConnLoopMochi = "mochi"
)

// checkConnLoop settles Config.ConnLoop: "" is hub, unless mochi delivers
// (its deliveries go through the writer goroutine the hub's loop does not
// have).
func checkConnLoop(cfg *Config) error {
	switch cfg.ConnLoop {
	case "":
		cfg.ConnLoop = ConnLoopHub
		if cfg.DeliveryPath == DeliveryMochi {
			cfg.ConnLoop = ConnLoopMochi
		}
	case ConnLoopHub:
		if cfg.DeliveryPath == DeliveryMochi {
			return fmt.Errorf("mqtt: connection loop %q needs delivery path %q", ConnLoopHub, DeliveryHub)
		}
	case ConnLoopMochi:
	default:
		return fmt.Errorf("mqtt: connection loop %q is not %q or %q", cfg.ConnLoop, ConnLoopHub, ConnLoopMochi)
	}
	return nil
}

// hubLoop reports whether the hub serves connections itself.
func (b *Broker) hubLoop() bool { return b.cfg.ConnLoop == ConnLoopHub }

// serveClient serves the connection c accepted on listener (ln, nil for
// one served through ServeConn): on the hub's loop, or through mochi's
// EstablishConnection. errParked: c was parked (park.go), and its session
// goes on without this goroutine.
func (b *Broker) serveClient(listener string, c *outConn, ln *listener) error {
	if !b.hubLoop() {
		return b.server.EstablishConnection(listener, c)
	}
	// mochi's shutdown waits for this connection: its connSet counts it
	// (conns.go).
	cl, err := b.handshake(listener, c)
	if err != nil {
		cl.Stop(nil)
		return err
	}
	err = b.readLoop(cl, c, ln, 0)
	if err == errParked {
		return err
	}
	b.sessionEnded(cl, err)
	return err
}

// sessionEnded is what follows the end of a session established on the
// hub's loop, on whichever goroutine saw it end (park.go).
func (b *Broker) sessionEnded(cl *mochi.Client, err error) {
	b.endSession(cl, err)
	atomic.AddInt64(&b.server.Info.ClientsConnected, -1)
	cl.Stop(nil)
}

// readLoop reads and processes the client's packets until it is closed (a
// DISCONNECT: nil), a read or its processing fails, or the connection is
// parked (errParked). Its frame, and awaitPacket's and awaitRead's, are
// all a connection waiting for its next packet keeps on its stack: the
// packet is read and processed in nextPacket, which returns before the
// next wait. resumed is the keep-alive deadline a connection woken from
// parking still has (0: none, or not woken).
func (b *Broker) readLoop(cl *mochi.Client, c *outConn, ln *listener, resumed monoTime) error {
	for {
		if cl.Closed() {
			return nil
		}
		if err := b.awaitPacket(cl, c, ln, resumed); err != nil {
			return err
		}
		resumed = 0
		if err := b.nextPacket(cl, c); err != nil {
			return err
		}
	}
}

// keepAlive sets the read deadline of the client's keep-alive: one and a
// half times it [MQTT-3.1.2-22], none for 0.
//
//go:noinline
func keepAlive(cl *mochi.Client, c *outConn) {
	_ = c.Conn.SetReadDeadline(keepAliveDeadline(cl.State.Keepalive, time.Now()))
}

// keepAliveDeadline is when a client with Keep Alive ka, last heard at
// now, is gone: 1.5 × ka later (in milliseconds: ka+ka/2 in seconds would
// round down, and wrap in uint16); none (zero) for 0.
func keepAliveDeadline(ka uint16, now time.Time) time.Time {
	if ka == 0 {
		return time.Time{}
	}
	return now.Add(time.Duration(ka) * 1500 * time.Millisecond)
}

// nextPacket reads one packet (with mochi's size limit and counters),
// decodes it with mochi's decoders and processes it as mochi's
// receivePacket does.
//
//go:noinline
func (b *Broker) nextPacket(cl *mochi.Client, c *outConn) error {
	pk, err := b.readPacket(cl, c, false)
	if err != nil {
		return err
	}
	return b.receive(cl, pk)
}

// readPacket reads and decodes the next packet from c; first says it must
// be a CONNECT, refused before its body is read [MQTT-3.1.0-1]. Unlike
// mochi's ReadPacket it decodes from the one buffer it reads into (mochi
// copies it again): each packet has a buffer of its own, which what it
// decodes refers to.
func (b *Broker) readPacket(cl *mochi.Client, c *outConn, first bool) (pk packets.Packet, err error) {
	info := b.server.Info
	hb, err := c.ReadByte()
	if err != nil {
		return pk, err
	}
	if err = pk.FixedHeader.Decode(hb); err != nil {
		return pk, err
	}
	var lenBytes int
	pk.FixedHeader.Remaining, lenBytes, err = decodeLength(c)
	if err != nil {
		return pk, err
	}
	if mx := b.server.Options.Capabilities.MaximumPacketSize; mx > 0 && uint32(pk.FixedHeader.Remaining+1) > mx {
		return pk, packets.ErrPacketTooLarge // [MQTT-3.2.2-15]
	}
	atomic.AddInt64(&info.BytesReceived, int64(lenBytes+1))
	if first && pk.FixedHeader.Type != packets.Connect {
		return pk, packets.ErrProtocolViolationRequireFirstConnect // [MQTT-3.1.0-1]
	}
	pk.ProtocolVersion = cl.Properties.ProtocolVersion
	body, err := readBody(c, pk.FixedHeader.Remaining)
	atomic.AddInt64(&info.BytesReceived, int64(len(body)))
	if err != nil {
		return pk, err
	}
	if err = decodeBody(&pk, body); err != nil {
		atomic.AddInt64(&info.PacketsReceived, 1)
		return pk, err
	}
	return b.onPacketRead(cl, pk)
}

// decodeBody decodes a packet's variable header and payload, for every type
// mochi's ReadPacket decodes.
func decodeBody(pk *packets.Packet, body []byte) error {
	switch pk.FixedHeader.Type {
	case packets.Connect:
		return pk.ConnectDecode(body)
	case packets.Disconnect:
		return pk.DisconnectDecode(body)
	case packets.Connack:
		return pk.ConnackDecode(body)
	case packets.Publish:
		return pk.PublishDecode(body)
	case packets.Puback:
		return pk.PubackDecode(body)
	case packets.Pubrec:
		return pk.PubrecDecode(body)
	case packets.Pubrel:
		return pk.PubrelDecode(body)
	case packets.Pubcomp:
		return pk.PubcompDecode(body)
	case packets.Subscribe:
		return pk.SubscribeDecode(body)
	case packets.Suback:
		return pk.SubackDecode(body)
	case packets.Unsubscribe:
		return pk.UnsubscribeDecode(body)
	case packets.Unsuback:
		return pk.UnsubackDecode(body)
	case packets.Pingreq, packets.Pingresp:
		return nil
	case packets.Auth:
		return pk.AuthDecode(body)
	}
	return fmt.Errorf("invalid packet type; %v", pk.FixedHeader.Type)
}

// receive processes pk as mochi's receivePacket does: through mochi's
// processing (InjectPacket, which also counts it), and an MQTT 5 client
// whose packet fails with a code ≥ 0x80 gets a DISCONNECT with it.
func (b *Broker) receive(cl *mochi.Client, pk packets.Packet) error {
	var err error
	switch t := pk.FixedHeader.Type; {
	case t == packets.Connect:
		err = packets.ErrProtocolViolationSecondConnect // [MQTT-3.1.0-2]
	case (t == packets.Subscribe || t == packets.Unsubscribe) && unclashID(cl, &pk):
		defer endSwap(cl) // resend.go
		err = b.server.InjectPacket(cl, pk)
	default:
		err = b.server.InjectPacket(cl, pk)
	}
	if err == nil {
		return nil
	}
	// InjectPacket counts only what it processed; mochi counts every
	// packet read.
	atomic.AddInt64(&b.server.Info.PacketsReceived, 1)
	if pk.FixedHeader.Type == packets.Publish {
		atomic.AddInt64(&b.server.Info.MessagesReceived, 1)
	}
	var code packets.Code
	if errors.As(err, &code) && cl.Properties.ProtocolVersion == 5 && code.Code >= packets.ErrUnspecifiedError.Code {
		_ = b.server.DisconnectClient(cl, code)
	}
	b.server.Log.Warn("error processing packet", "error", err, "client", cl.ID, "listener", cl.Net.Listener, "type", pk.FixedHeader.Type)
	return err
}

// handshake reads the CONNECT and establishes the session as mochi's
// attachClient does, step for step: the client limit, mochi's validation,
// OnConnect, the keep-alive deadline, OnConnectAuthenticate, the counters,
// OnSessionEstablish, the session inherited, the client listed, CONNACK,
// a delayed will cancelled (sent, if the session ended: willdelay.go), and
// OnSessionEstablished, which resends the session's in-flight messages.
// It returns the client (never nil) and, when the session was not
// established, why; the caller then stops it.
//
//go:noinline
func (b *Broker) handshake(listener string, c *outConn) (*mochi.Client, error) {
	s := b.server
	cl := s.NewClient(c, listener, "", false)
	pk, err := b.readPacket(cl, c, true)
	if err != nil {
		return cl, fmt.Errorf("read connection: %w", err)
	}
	atomic.AddInt64(&s.Info.PacketsReceived, 1)
	cl.ParseConnect(listener, pk)
	if atomic.LoadInt64(&s.Info.ClientsConnected) >= s.Options.Capabilities.MaximumClients {
		if cl.Properties.ProtocolVersion < 5 {
			_ = s.SendConnack(cl, packets.ErrServerUnavailable, false, nil)
		} else {
			_ = s.SendConnack(cl, packets.ErrServerBusy, false, nil)
		}
		return cl, packets.ErrServerBusy
	}
	if code := b.validateConnect(cl, pk); code != packets.CodeSuccess { // [MQTT-3.1.4-1] [MQTT-3.1.4-2]
		if err := s.SendConnack(cl, code, false, nil); err != nil {
			return cl, fmt.Errorf("invalid connection send ack: %w", err)
		}
		return cl, code // [MQTT-3.2.2-7] [MQTT-3.1.4-6]
	}
	if err := b.onConnect(cl, pk); err != nil {
		return cl, err
	}
	keepAlive(cl, c)
	if !b.onConnectAuthenticate(cl, pk) { // [MQTT-3.1.4-2]
		if err := s.SendConnack(cl, packets.ErrBadUsernameOrPassword, false, nil); err != nil {
			return cl, fmt.Errorf("invalid connection send ack: %w", err)
		}
		return cl, packets.ErrBadUsernameOrPassword
	}
	atomic.AddInt64(&s.Info.ClientsConnected, 1)
	b.onSessionEstablish(cl, pk)
	b.sessionMu.Lock()
	present := b.inheritSession(pk, cl)
	s.Clients.Add(cl) // [MQTT-4.1.0-1]
	b.sessionMu.Unlock()
	if err := s.SendConnack(cl, packets.CodeSuccess, present, nil); err != nil {
		atomic.AddInt64(&s.Info.ClientsConnected, -1)
		return cl, fmt.Errorf("ack connection packet: %w", err)
	}
	if present {
		b.wills.cancel(cl.ID) // [MQTT-3.1.3-9]
	} else {
		b.wills.sendNow(cl.ID) // the session it waited in ended
	}
	// Not mochi's ResendInflightMessages, which writes every stored
	// message at once: OnSessionEstablished resends them within the
	// client's Receive Maximum (resend.go).
	b.onSessionEstablished(cl, pk)
	return cl, nil
}

// validateConnect is mochi's check of a CONNECT.
func (b *Broker) validateConnect(cl *mochi.Client, pk packets.Packet) packets.Code {
	code := pk.ConnectValidate()
	if code != packets.CodeSuccess {
		return code
	}
	caps := b.server.Options.Capabilities
	switch {
	case cl.Properties.ProtocolVersion < 5 && !pk.Connect.Clean && pk.Connect.ClientIdentifier == "":
		return packets.ErrUnspecifiedError
	case cl.Properties.ProtocolVersion < caps.MinimumProtocolVersion:
		return packets.ErrUnsupportedProtocolVersion // [MQTT-3.1.2-2]
	case cl.Properties.Will.Qos > caps.MaximumQos:
		return packets.ErrQosNotSupported // [MQTT-3.2.2-12]
	case cl.Properties.Will.Retain && caps.RetainAvailable == 0x00:
		return packets.ErrRetainNotSupported // [MQTT-3.2.2-13]
	}
	return code
}

// inheritSession takes over the session of an existing client with cl's id
// as mochi's inheritClientSession does [MQTT-3.1.4-3]: a clean start drops
// it [MQTT-3.1.2-4], otherwise its in-flight messages and subscriptions
// become cl's [MQTT-3.1.2-5]. It reports whether a session is present.
//
// mochi marks the old client taken over (unexported) before it empties the
// old client's subscriptions, so that they stay in the topic index, where
// they are keyed by the client id and now cl's. The hub marks the old
// connection (takenOver) and empties the old client's own list itself.
func (b *Broker) inheritSession(pk packets.Packet, cl *mochi.Client) bool {
	s := b.server
	existing, ok := s.Clients.Get(cl.ID)
	if !ok {
		if atomic.LoadInt64(&s.Info.ClientsConnected) > atomic.LoadInt64(&s.Info.ClientsMaximum) {
			atomic.AddInt64(&s.Info.ClientsMaximum, 1)
		}
		return false // [MQTT-3.2.2-2]
	}
	_ = s.DisconnectClient(existing, packets.ErrSessionTakenOver)
	if pk.Connect.Clean || (existing.Properties.Clean && existing.Properties.ProtocolVersion < 5) {
		s.UnsubscribeClient(existing)
		existing.ClearInflights()
		markTakenOver(existing)
		return false // [MQTT-3.2.2-3]
	}
	markTakenOver(existing)
	if existing.State.Inflight.Len() > 0 {
		cl.State.Inflight = existing.State.Inflight.Clone()
		cl.State.Inflight.ResetReceiveQuota(int32(s.Options.Capabilities.ReceiveMaximum)) // the server's, per client
		cl.State.Inflight.ResetSendQuota(int32(cl.Properties.Props.ReceiveMaximum))       // the client's
	}
	for filter, sub := range existing.State.Subscriptions.GetAll() {
		if !s.Topics.Subscribe(cl.ID, sub) { // [MQTT-3.8.4-3]
			atomic.AddInt64(&s.Info.Subscriptions, 1)
		}
		cl.State.Subscriptions.Add(sub.Filter, sub)
		// What mochi's UnsubscribeClient does to a client taken over:
		// its own list is emptied, the topic index keeps the filters.
		existing.State.Subscriptions.Delete(filter)
	}
	existing.ClearInflights()
	return true // [MQTT-3.2.2-3]
}

// markTakenOver marks cl's connection as taken over by a newer one with its
// client id (mochi's own mark is unexported).
func markTakenOver(cl *mochi.Client) {
	if c, ok := cl.Net.Conn.(*outConn); ok {
		c.takenOver.Store(true)
	}
}

// takenOver reports whether a newer connection took cl's session over,
// marked by mochi (its loop) or by the hub (inheritSession).
func takenOver(cl *mochi.Client) bool {
	if cl.IsTakenOver() {
		return true
	}
	c, ok := cl.Net.Conn.(*outConn)
	return ok && c.takenOver.Load()
}

// endSession is what mochi's attachClient does once the client's reading
// ended: a failed connection publishes the will, a DISCONNECT drops it
// [MQTT-3.14.4-3] [MQTT-3.1.2-10]; then OnDisconnect, and a session that
// ends with its connection is removed, unless a newer connection took it
// over.
//
//go:noinline
func (b *Broker) endSession(cl *mochi.Client, err error) {
	expire := (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval == 0) ||
		(cl.Properties.ProtocolVersion < 5 && cl.Properties.Clean)
	if err != nil {
		b.sendWill(cl, expire)
		cl.Stop(err)
	} else {
		cl.Properties.Will = mochi.Will{}
	}
	b.server.Log.Debug("client disconnected", "error", err, "client", cl.ID, "remote", cl.Net.Remote, "listener", cl.Net.Listener)
	b.onDisconnect(cl, err, expire)
	if expire && !takenOver(cl) {
		cl.ClearInflights()
		b.server.UnsubscribeClient(cl)
		b.server.Clients.Delete(cl.ID) // [MQTT-4.1.0-2] ![MQTT-3.1.2-23]
	}
}

// The connection hooks, called on the hooks the broker added (b.hooks) as
// mochi's Hooks calls them: in the order added, each only where it
// provides the event.

func (b *Broker) onConnect(cl *mochi.Client, pk packets.Packet) error {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnConnect) {
			if err := h.OnConnect(cl, pk); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *Broker) onConnectAuthenticate(cl *mochi.Client, pk packets.Packet) bool {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnConnectAuthenticate) && h.OnConnectAuthenticate(cl, pk) {
			return true
		}
	}
	return false
}

func (b *Broker) onSessionEstablish(cl *mochi.Client, pk packets.Packet) {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnSessionEstablish) {
			h.OnSessionEstablish(cl, pk)
		}
	}
}

func (b *Broker) onSessionEstablished(cl *mochi.Client, pk packets.Packet) {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnSessionEstablished) {
			h.OnSessionEstablished(cl, pk)
		}
	}
}

func (b *Broker) onDisconnect(cl *mochi.Client, err error, expire bool) {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnDisconnect) {
			h.OnDisconnect(cl, err, expire)
		}
	}
}

func (b *Broker) onPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnPacketRead) {
			pkx, err := h.OnPacketRead(cl, pk)
			if errors.Is(err, packets.ErrRejectPacket) {
				return pk, err
			} else if err != nil {
				continue
			}
			pk = pkx
		}
	}
	return pk, nil
}

func (b *Broker) onWill(cl *mochi.Client, will mochi.Will) mochi.Will {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnWill) {
			w, err := h.OnWill(cl, will)
			if err != nil {
				b.log.Error("will hook failed", "hook", h.ID(), "err", err)
				continue
			}
			will = w
		}
	}
	return will
}

func (b *Broker) onWillSent(cl *mochi.Client, pk packets.Packet) {
	for _, h := range b.hooks {
		if h.Provides(mochi.OnWillSent) {
			h.OnWillSent(cl, pk)
		}
	}
}

// decodeLength reads a Variable Byte Integer: at most four bytes, a fifth
// is malformed [MQTT-1.5.5-1] (mochi's DecodeLength reads on).
func decodeLength(r io.ByteReader) (n, used int, err error) {
	for shift := 0; shift < 28; shift += 7 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, used, err
		}
		used++
		n |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			return n, used, nil
		}
	}
	return 0, used, packets.ErrMalformedVariableByteInteger
}

// readBody reads a packet body of n bytes into memory that grows with the
// bytes that arrive (64 KiB steps, doubling), so a header announcing a
// large packet holds no more than was sent: a CONNECT is read before the
// client is authenticated.
func readBody(r io.Reader, n int) ([]byte, error) {
	const step = 64 << 10
	b := make([]byte, 0, min(n, step))
	for len(b) < n {
		m := min(n-len(b), max(step, len(b)))
		b = slices.Grow(b, m)
		k, err := io.ReadFull(r, b[len(b):len(b)+m])
		b = b[:len(b)+k]
		if err != nil {
			return b, err
		}
	}
	return b, nil
}
