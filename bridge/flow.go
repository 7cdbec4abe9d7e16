package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// outgoing takes a local publish that the local filter of topic i matched
// to the upstream: QoS 1/2 into the durable queue (sent in order once
// connected), QoS 0 straight on while connected and dropped while not.
// A message matching several outgoing topics goes up once, mapped by the
// first; one the bridge published itself never goes back up.
func (b *Bridge) outgoing(i int, pk packets.Packet, own bool) {
	if own {
		return
	}
	for _, t := range b.cfg.Topics[:i] {
		if t.out() && lmos.TopicMatch(t.LocalFilter(), pk.TopicName) {
			return // an earlier topic forwards it
		}
	}
	t := b.cfg.Topics[i]
	pub := &paho.Publish{
		QoS:     min(pk.FixedHeader.Qos, t.QoS),
		Retain:  pk.FixedHeader.Retain,
		Topic:   t.toRemote(pk.TopicName),
		Payload: pk.Payload,
	}
	pub.Properties = upstreamProperties(pk)
	if pub.QoS == 0 {
		// Sent later, from another goroutine: not the publisher's memory.
		pub.Payload = bytes.Clone(pk.Payload)
		pub.Properties.CorrelationData = bytes.Clone(pk.Properties.CorrelationData)
		select {
		case b.qos0 <- pub:
		default:
			b.drop("the queue of QoS 0 messages is full")
		}
		return
	}
	if b.queue.Len() >= b.cfg.MaxQueued {
		b.drop(fmt.Sprintf("the queue holds bridge.maxQueued (%d) messages", b.cfg.MaxQueued))
		return
	}
	if err := b.cm.PublishViaQueue(context.Background(), &autopaho.QueuePublish{Publish: pub}); err != nil {
		b.drop(err.Error())
	}
}

// queueSent counts a queued message handed to the upstream connection.
func (b *Bridge) queueSent() {
	b.sent.Add(1)
	b.noteSuccess()
}

// drop counts a message the bridge could not take upstream as an error
// of the link.
func (b *Bridge) drop(why string) {
	b.noteError("message dropped: " + why)
}

// upstreamProperties are the MQTT 5 properties a message keeps across the
// bridge: content type, payload format, expiry, correlation data and user
// properties. A Response Topic is not carried: it names a topic on the
// side it was published on.
func upstreamProperties(pk packets.Packet) *paho.PublishProperties {
	p := &paho.PublishProperties{
		ContentType:     pk.Properties.ContentType,
		CorrelationData: pk.Properties.CorrelationData,
	}
	if pk.Properties.PayloadFormatFlag {
		f := pk.Properties.PayloadFormat
		p.PayloadFormat = &f
	}
	if e := pk.Properties.MessageExpiryInterval; e > 0 {
		p.MessageExpiry = &e
	}
	for _, u := range pk.Properties.User {
		p.User = append(p.User, paho.UserProperty{Key: u.Key, Value: u.Val})
	}
	return p
}

// sendQoS0 publishes the QoS 0 messages while connected (dropping them
// while not: QoS 0 promises no more).
func (b *Bridge) sendQoS0(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case pub := <-b.qos0:
			pctx, cancel := context.WithTimeout(ctx, publishTimeout)
			_, err := b.cm.Publish(pctx, pub)
			cancel()
			if err != nil {
				b.drop("upstream: " + err.Error())
				continue
			}
			b.sent.Add(1)
			b.noteSuccess()
		}
	}
}

// incoming publishes locally what the upstream sent on an incoming topic,
// mapped by the first incoming topic its remote filter matches. paho
// acknowledges it upstream once this returns: the local broker has
// stored or queued it by then.
func (b *Bridge) incoming(pr paho.PublishReceived) (bool, error) {
	in := pr.Packet
	for _, t := range b.cfg.Topics {
		if !t.in() || !lmos.TopicMatch(t.RemoteFilter(), in.Topic) {
			continue
		}
		pk := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: min(in.QoS, t.QoS), Retain: in.Retain},
			TopicName:   t.toLocal(in.Topic),
			Payload:     in.Payload,
		}
		if pk.FixedHeader.Qos > 0 {
			pk.PacketID = 1 // checked for validity, never acknowledged
		}
		localProperties(&pk, in.Properties)
		if err := b.port.Publish(pk); err != nil {
			b.noteError("cannot publish locally: " + err.Error())
			return true, nil
		}
		b.received.Add(1)
		b.noteSuccess()
		return true, nil
	}
	return false, nil // not ours: a subscription left from an earlier configuration
}

// localProperties copies what upstreamProperties carries, the other way.
func localProperties(pk *packets.Packet, p *paho.PublishProperties) {
	if p == nil {
		return
	}
	pk.Properties.ContentType = p.ContentType
	pk.Properties.CorrelationData = p.CorrelationData
	if p.PayloadFormat != nil {
		pk.Properties.PayloadFormat, pk.Properties.PayloadFormatFlag = *p.PayloadFormat, true
	}
	if p.MessageExpiry != nil {
		pk.Properties.MessageExpiryInterval = *p.MessageExpiry
	}
	for _, u := range p.User {
		pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: u.Key, Val: u.Value})
	}
}

// connectionUp subscribes upstream to the incoming topics (again after a
// reconnect: a session the upstream lost has none) with No Local, so what
// the bridge publishes there never comes back, and Retain As Published,
// so a retained message stays retained here.
func (b *Bridge) connectionUp(cm *autopaho.ConnectionManager, _ *paho.Connack) {
	var subs []paho.SubscribeOptions
	for _, t := range b.cfg.Topics {
		if t.in() {
			subs = append(subs, paho.SubscribeOptions{Topic: t.RemoteFilter(), QoS: t.QoS, NoLocal: true, RetainAsPublished: true})
		}
	}
	b.setState(hub.LinkConnected)
	b.publishState(stateConnected)
	b.log.Info("mqtt bridge connected", "url", b.redactedURL())
	if len(subs) == 0 {
		return
	}
	// OnConnectionUp must not block: subscribe from a goroutine of its own.
	b.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
		defer cancel()
		sa, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs})
		if err != nil {
			b.failed("cannot subscribe upstream", err)
			return
		}
		for i, code := range sa.Reasons {
			if code >= 0x80 && i < len(subs) {
				b.failed("upstream refused a subscription", fmt.Errorf("%s: reason code 0x%02x", subs[i].Topic, code))
			}
		}
	})
}

// connectionDown notes a lost connection; autopaho reconnects.
func (b *Bridge) connectionDown() bool {
	b.setState(hub.LinkDown)
	b.publishState(stateDisconnected)
	b.log.Warn("mqtt bridge disconnected", "url", b.redactedURL())
	return true
}

// connackReasons name the CONNACK refusals (MQTT 5 §3.2.2.2) a user can
// act on.
var connackReasons = map[byte]string{
	0x80: "unspecified error", 0x84: "unsupported protocol version (the upstream must speak MQTT 5)",
	0x85: "client identifier not valid (bridge.clientId)", 0x86: "bad user name or password (bridge.username, bridge.password)",
	0x87: "not authorized (bridge.username, bridge.password)", 0x88: "server unavailable", 0x89: "server busy",
	0x8A: "banned", 0x8C: "bad authentication method", 0x95: "packet too large", 0x97: "quota exceeded",
	0x9F: "connection rate exceeded",
}

// connectError notes a failed connection attempt, naming what the upstream
// refused.
func (b *Bridge) connectError(err error) {
	var ce *autopaho.ConnackError
	if errors.As(err, &ce) {
		why := connackReasons[ce.ReasonCode]
		if why == "" {
			why = "refused"
		}
		if ce.Reason != "" {
			why += ": " + ce.Reason
		}
		err = fmt.Errorf("the upstream refused the connection: %s (reason code 0x%02x)", why, ce.ReasonCode)
	}
	b.failed("cannot connect", err)
}

// failed notes a failure (a connection attempt, an error of the link).
// The first failure after a success (or at start) is logged as a
// warning, the retries after it at debug level.
func (b *Bridge) failed(what string, err error) {
	b.mu.Lock()
	first := b.lastErrAt.IsZero() || b.lastOK.After(b.lastErrAt)
	if b.state != hub.LinkConnected {
		b.state = hub.LinkDown
	}
	b.mu.Unlock()
	b.noteError(what + ": " + err.Error())
	if first {
		b.log.Warn("mqtt bridge: "+what, "url", b.redactedURL(), "err", err)
	} else {
		b.log.Debug("mqtt bridge: "+what, "err", err)
	}
}

func (b *Bridge) noteError(msg string) {
	b.errs.Add(1)
	b.mu.Lock()
	b.lastErr, b.lastErrAt = msg, time.Now()
	b.mu.Unlock()
}

func (b *Bridge) noteSuccess() {
	b.mu.Lock()
	b.lastOK = time.Now()
	b.mu.Unlock()
}

func (b *Bridge) setState(s string) {
	b.mu.Lock()
	b.state = s
	if s == hub.LinkConnected {
		b.lastOK = time.Now()
	}
	b.mu.Unlock()
}

// publishState retains "1" or "0" on the bridge's state topic.
func (b *Bridge) publishState(v string) {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 0, Retain: true},
		TopicName:   StateTopic(b.cfg.Name),
		Payload:     []byte(v),
	}
	if err := b.port.Publish(pk); err != nil {
		b.log.Debug("cannot publish the bridge state", "err", err)
	}
}

// State reports the link (hub.LinkBridge): connected or not, the messages
// in the outbox (waiting, or sent and not yet acknowledged), what crossed
// each way, the last error and success.
func (b *Bridge) State() hub.LinkState {
	outbox := len(b.qos0)
	var lag time.Duration
	if b.queue != nil {
		// Before b.mu: the queue calls queueSent under its lock.
		outbox += b.queue.Len()
		if t := b.queue.Oldest(); !t.IsZero() {
			lag = max(time.Since(t), 0)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return hub.LinkState{
		Kind:        hub.LinkBridge,
		Name:        b.cfg.Name,
		URL:         b.redactedURL(),
		State:       b.state,
		Sent:        b.sent.Load(),
		Received:    b.received.Load(),
		Errors:      b.errs.Load(),
		LastError:   b.lastErr,
		LastErrorAt: b.lastErrAt,
		LastSuccess: b.lastOK,
		Outbox:      outbox,
		Lag:         lag,
	}
}
