package mqtt

import (
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
)

// Kinds of brokerstate.Record.
const (
	recRetained     = "retained"
	recClient       = "client"
	recSubscription = "subscription"
	recInflight     = "inflight"
)

// maxKeyBytes is the longest record key bbolt accepts; a longer one would
// fail the whole batch, so such a record (a topic over 32 KiB) is not kept.
const maxKeyBytes = 32 << 10

// persistence is the mochi hook that keeps retained messages and persistent
// sessions (their subscriptions and in-flight QoS 1/2 messages) through
// brokerstate.Store.
//
// It writes behind: changes are coalesced in memory by kind and key and
// written at most FlushInterval (200 ms) after the first of them and at
// Close, in one ApplyBroker call, one durable commit, as mosquitto's
// periodic autosave does. A crash (not a clean stop) loses at most the last
// window of broker-state changes; the registry's own writes are never
// delayed.
//
// Nothing runs while nothing is pending: the first change of a batch arms
// a timer, and the flush it runs is the only wake-up. A ticker would wake
// an idle hub five times a second, and every wake-up keeps the code it runs
// (64 KB of the executable around each page it touches) resident: on a Pi
// that is idle memory for nothing (issue 16).
//
// Clean sessions (MQTT 5 session expiry 0, MQTT 3.1.1 clean session) are
// never written: they end with their connection anyway. Nor are in-flight
// join results (…/td/result): they may carry credentials.
type persistence struct {
	mochi.HookBase
	bs       brokerstate.Store
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	pending map[recKey][]byte // nil value: delete
	order   []recKey          // first-change order, for deterministic batches

	// clients are the ids of the sessions loaded at start; subscriptions and
	// in-flight messages of any other client are orphans and dropped.
	clients map[string]bool

	// started: Serve has loaded the stored state, flushes may be timed;
	// closed: close began, none is. timer is the armed flush; nil: none.
	started, closed bool
	timer           *time.Timer

	// flushing serialises the flushes, so that an older batch is never
	// written after a newer one, and lets close wait for one that a
	// timer already began.
	flushing sync.Mutex
}

type recKey struct{ kind, key string }

func newPersistence(bs brokerstate.Store, log *slog.Logger, interval time.Duration) *persistence {
	return &persistence{
		bs:       bs,
		log:      log,
		interval: interval,
		pending:  make(map[recKey][]byte),
	}
}

func (p *persistence) ID() string { return "lmos-state" }

func (p *persistence) Provides(b byte) bool {
	switch b {
	case mochi.OnRetainMessage, mochi.OnRetainedExpired, mochi.OnSessionEstablished, mochi.OnDisconnect,
		mochi.OnSubscribed, mochi.OnUnsubscribed, mochi.OnQosPublish, mochi.OnQosComplete,
		mochi.OnQosDropped, mochi.OnClientExpired,
		mochi.StoredClients, mochi.StoredSubscriptions, mochi.StoredInflightMessages, mochi.StoredRetainedMessages:
		return true
	}
	return false
}

// start lets changes be flushed by timer; what the load left pending (the
// deletion of orphans) is written within the interval.
func (p *persistence) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = true
	p.armLocked()
}

// armLocked arms the flush timer if something is pending and none is
// armed. p.mu is held.
func (p *persistence) armLocked() {
	if p.started && !p.closed && p.timer == nil && len(p.order) > 0 {
		p.timer = time.AfterFunc(p.interval, p.timed)
	}
}

// timed is the flush the timer runs; a failed one is retried after
// another interval (its changes are pending again).
func (p *persistence) timed() {
	p.flushing.Lock()
	defer p.flushing.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return // close writes what is pending
	}
	// Changes from now on arm a timer of their own.
	p.timer = nil
	p.mu.Unlock()
	if err := p.flush(); err != nil {
		p.log.Error("cannot write mqtt broker state", "err", err)
		p.mu.Lock()
		p.armLocked()
		p.mu.Unlock()
	}
}

// close stops the timed flushes and writes what is pending. No flush runs
// after it returns: the store may be closed next.
func (p *persistence) close() error {
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.mu.Unlock()
	// A timed flush that began before waits to end; one that begins now
	// sees closed.
	p.flushing.Lock()
	defer p.flushing.Unlock()
	return p.flush()
}

// flush writes the pending changes in one batch. On failure they stay
// pending (unless changed again since) for the next flush. p.flushing is
// held.
func (p *persistence) flush() error {
	p.mu.Lock()
	if len(p.order) == 0 {
		p.mu.Unlock()
		return nil
	}
	recs := make([]brokerstate.Record, 0, len(p.order))
	for _, k := range p.order {
		recs = append(recs, brokerstate.Record{Kind: k.kind, Key: k.key, Value: p.pending[k]})
	}
	p.pending = make(map[recKey][]byte, len(recs))
	p.order = p.order[:0:0]
	p.mu.Unlock()

	if err := p.bs.ApplyBroker(recs); err != nil {
		p.mu.Lock()
		for _, r := range recs {
			k := recKey{r.Kind, r.Key}
			if _, newer := p.pending[k]; !newer {
				p.pending[k] = r.Value
				p.order = append(p.order, k)
			}
		}
		p.mu.Unlock()
		return fmt.Errorf("cannot write mqtt broker state: %w", err)
	}
	return nil
}

func (p *persistence) set(kind, key string, v encoding.BinaryMarshaler) {
	if len(key) > maxKeyBytes {
		p.log.Warn("not persisting mqtt state with an over-long key", "kind", kind, "bytes", len(key))
		return
	}
	b, err := v.MarshalBinary()
	if err != nil {
		p.log.Error("cannot encode mqtt state", "kind", kind, "err", err)
		return
	}
	p.put(recKey{kind, key}, b)
}

func (p *persistence) del(kind, key string) {
	if len(key) > maxKeyBytes {
		return
	}
	p.put(recKey{kind, key}, nil)
}

func (p *persistence) put(k recKey, v []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pending[k]; !ok {
		p.order = append(p.order, k)
	}
	p.pending[k] = v
	p.armLocked()
}

// persistent reports whether a client's session outlives its connection.
func persistent(cl *mochi.Client) bool {
	if cl.Net.Inline {
		return false
	}
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

func subscriptionKey(clientID, filter string) string { return clientID + "\x00" + filter }

func inflightKey(clientID string, id uint16) string { return fmt.Sprintf("%s\x00%05d", clientID, id) }

func messageOf(cl *mochi.Client, pk packets.Packet, id string) storage.Message {
	props := pk.Properties.Copy(false)
	return storage.Message{
		ID:          id,
		Client:      cl.ID,
		Origin:      pk.Origin,
		FixedHeader: pk.FixedHeader,
		TopicName:   pk.TopicName,
		Payload:     pk.Payload,
		Created:     pk.Created,
		PacketID:    pk.PacketID,
		Properties: storage.MessageProperties{
			PayloadFormat:          props.PayloadFormat,
			PayloadFormatFlag:      props.PayloadFormatFlag,
			MessageExpiryInterval:  props.MessageExpiryInterval,
			ContentType:            props.ContentType,
			ResponseTopic:          props.ResponseTopic,
			CorrelationData:        props.CorrelationData,
			SubscriptionIdentifier: props.SubscriptionIdentifier,
			User:                   props.User,
		},
	}
}

func (p *persistence) OnRetainMessage(cl *mochi.Client, pk packets.Packet, r int64) {
	if len(pk.Payload) == 0 {
		p.del(recRetained, pk.TopicName)
		return
	}
	m := messageOf(cl, pk, pk.TopicName)
	m.T = storage.RetainedKey
	p.set(recRetained, pk.TopicName, &m)
}

func (p *persistence) OnRetainedExpired(topic string) { p.del(recRetained, topic) }

func (p *persistence) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	if !persistent(cl) {
		// A clean start replaces a stored session of the same client id.
		p.del(recClient, cl.ID)
		return
	}
	props := cl.Properties.Props.Copy(false)
	c := storage.Client{
		ID:              cl.ID,
		T:               storage.ClientKey,
		Remote:          cl.Net.Remote,
		Listener:        cl.Net.Listener,
		Username:        cl.Properties.Username,
		Clean:           cl.Properties.Clean,
		ProtocolVersion: cl.Properties.ProtocolVersion,
		Properties: storage.ClientProperties{
			SessionExpiryInterval:     props.SessionExpiryInterval,
			SessionExpiryIntervalFlag: props.SessionExpiryIntervalFlag,
			AuthenticationMethod:      props.AuthenticationMethod,
			AuthenticationData:        props.AuthenticationData,
			RequestProblemInfo:        props.RequestProblemInfo,
			RequestProblemInfoFlag:    props.RequestProblemInfoFlag,
			RequestResponseInfo:       props.RequestResponseInfo,
			ReceiveMaximum:            props.ReceiveMaximum,
			TopicAliasMaximum:         props.TopicAliasMaximum,
			User:                      props.User,
			MaximumPacketSize:         props.MaximumPacketSize,
		},
		Will: storage.ClientWill(cl.Properties.Will),
	}
	p.set(recClient, cl.ID, &c)
}

func (p *persistence) OnDisconnect(cl *mochi.Client, _ error, expire bool) {
	if !expire || errors.Is(cl.StopCause(), packets.ErrSessionTakenOver) {
		return
	}
	p.forgetClient(cl)
}

func (p *persistence) OnClientExpired(cl *mochi.Client) { p.forgetClient(cl) }

// forgetClient deletes a session with its subscriptions and in-flight
// messages (mochi unsubscribes an expired session without telling hooks).
func (p *persistence) forgetClient(cl *mochi.Client) {
	p.del(recClient, cl.ID)
	for filter := range cl.State.Subscriptions.GetAll() {
		p.del(recSubscription, subscriptionKey(cl.ID, filter))
	}
	for _, pk := range cl.State.Inflight.GetAll(false) {
		p.del(recInflight, inflightKey(cl.ID, pk.PacketID))
	}
}

func (p *persistence) OnSubscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	if !persistent(cl) {
		return
	}
	for i, f := range pk.Filters {
		if i >= len(codes) || codes[i] >= packets.ErrUnspecifiedError.Code {
			continue // refused: not subscribed
		}
		key := subscriptionKey(cl.ID, f.Filter)
		s := storage.Subscription{
			ID:                key,
			T:                 storage.SubscriptionKey,
			Client:            cl.ID,
			Filter:            f.Filter,
			Qos:               codes[i],
			Identifier:        f.Identifier,
			NoLocal:           f.NoLocal,
			RetainHandling:    f.RetainHandling,
			RetainAsPublished: f.RetainAsPublished,
		}
		p.set(recSubscription, key, &s)
	}
}

func (p *persistence) OnUnsubscribed(cl *mochi.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	for _, f := range pk.Filters {
		p.del(recSubscription, subscriptionKey(cl.ID, f.Filter))
	}
}

func (p *persistence) OnQosPublish(cl *mochi.Client, pk packets.Packet, sent int64, _ int) {
	if !persistent(cl) || isTDResult(pk.TopicName) {
		return
	}
	key := inflightKey(cl.ID, pk.PacketID)
	m := messageOf(cl, pk, key)
	m.T = storage.InflightKey
	m.Sent = sent
	p.set(recInflight, key, &m)
}

func (p *persistence) OnQosComplete(cl *mochi.Client, pk packets.Packet) {
	if persistent(cl) {
		p.del(recInflight, inflightKey(cl.ID, pk.PacketID))
	}
}

func (p *persistence) OnQosDropped(cl *mochi.Client, pk packets.Packet) { p.OnQosComplete(cl, pk) }

// load decodes every record of kind into a fresh T.
func load[T any, PT interface {
	*T
	encoding.BinaryUnmarshaler
}](p *persistence, kind string) ([]T, error) {
	var out []T
	err := p.bs.LoadBroker(kind, func(key string, value []byte) error {
		var v T
		if err := PT(&v).UnmarshalBinary(value); err != nil {
			// One unreadable record must not stop the broker.
			p.log.Error("skipping unreadable mqtt state", "kind", kind, "key", key, "err", err)
			return nil
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot load mqtt %s records: %w", kind, err)
	}
	return out, nil
}

// mochi loads clients first, then subscriptions and in-flight messages.
func (p *persistence) StoredClients() ([]storage.Client, error) {
	cls, err := load[storage.Client](p, recClient)
	p.clients = make(map[string]bool, len(cls))
	kept := cls[:0]
	for _, c := range cls {
		if len(c.Username) == 0 {
			// An anonymous session stored by an older version: anonymous
			// sessions are never resumed (anonymous.go). Its subscriptions
			// and in-flight messages go with it (dropOrphans).
			p.del(recClient, c.ID)
			continue
		}
		p.clients[c.ID] = true
		kept = append(kept, c)
	}
	return kept, err
}

func (p *persistence) StoredSubscriptions() ([]storage.Subscription, error) {
	subs, err := load[storage.Subscription](p, recSubscription)
	return dropOrphans(p, subs, recSubscription, func(s storage.Subscription) (string, string) { return s.Client, s.ID }), err
}

func (p *persistence) StoredInflightMessages() ([]storage.Message, error) {
	msgs, err := load[storage.Message](p, recInflight)
	msgs = dropOrphans(p, msgs, recInflight, func(m storage.Message) (string, string) { return m.Client, m.ID })
	// Join results written by older versions carry credentials: never
	// resend them, and delete them from the store.
	kept := msgs[:0]
	for _, m := range msgs {
		if isTDResult(m.TopicName) {
			p.del(recInflight, m.ID)
			continue
		}
		kept = append(kept, m)
	}
	return kept, err
}

// isTDResult reports whether topic is a join result, which may carry
// credentials and is never stored (PROTOCOL §10).
func isTDResult(topic string) bool {
	t, ok := parseThingTopic(topic)
	return ok && t.kind == kindTDResult
}

// dropOrphans removes (and forgets) records of clients no longer stored.
func dropOrphans[T any](p *persistence, recs []T, kind string, owner func(T) (client, key string)) []T {
	out := recs[:0]
	for _, r := range recs {
		client, key := owner(r)
		if p.clients != nil && !p.clients[client] {
			p.del(kind, key)
			continue
		}
		out = append(out, r)
	}
	return out
}

// StoredRetainedMessages loads the retained messages but those on …/td:
// earlier versions retained a copy of every joined description there,
// which the registry now serves (retainedtd.go). They are deleted from
// the store unread, so they never reach memory.
func (p *persistence) StoredRetainedMessages() ([]storage.Message, error) {
	var out []storage.Message
	err := p.bs.LoadBroker(recRetained, func(key string, value []byte) error {
		if t, ok := parseThingTopic(key); ok && t.kind == kindTD {
			p.del(recRetained, key)
			return nil
		}
		var m storage.Message
		if err := m.UnmarshalBinary(value); err != nil {
			// One unreadable record must not stop the broker.
			p.log.Error("skipping unreadable mqtt state", "kind", recRetained, "key", key, "err", err)
			return nil
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot load mqtt %s records: %w", recRetained, err)
	}
	return out, nil
}

// restoreExpiry gives the messages Serve restored from the store the
// expiry they had. mochi's storage.Message keeps when a message was made
// and its Message Expiry Interval, but ToPacket leaves Expiry unset, and
// the protocol version mochi's checks ask for: a retained message or one
// kept for an offline session never expired after a restart, and was
// resent with its whole interval instead of what was left of it
// [MQTT-3.3.2-5] [MQTT-3.3.2-6]. Only MQTT 5 publishes carry the
// interval.
func (b *Broker) restoreExpiry() {
	restored := func(pk *packets.Packet) bool {
		if pk.Expiry != 0 || pk.Properties.MessageExpiryInterval == 0 {
			return false
		}
		pk.Expiry = pk.Created + int64(pk.Properties.MessageExpiryInterval)
		pk.ProtocolVersion = 5
		return true
	}
	for _, pk := range b.server.Topics.Retained.GetAll() {
		if restored(&pk) {
			b.server.Topics.RetainMessage(pk)
		}
	}
	for _, cl := range b.server.Clients.GetAll() {
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if restored(&pk) {
				cl.State.Inflight.Set(pk)
			}
		}
	}
}
