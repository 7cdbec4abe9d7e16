package mqtt

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// binding is the mochi hook of the LMOS binding: authentication, the ACL,
// joins and presence.
type binding struct {
	mochi.HookBase
	b *Broker

	// results maps a …/td/result topic being published right now to the
	// client that published the TD: only that client may receive it, since
	// it may carry credentials (PROTOCOL §10).
	mu      sync.Mutex
	results map[string]string
}

func (h *binding) ID() string { return "lmos" }

func (h *binding) Provides(b byte) bool {
	switch b {
	case mochi.OnConnectAuthenticate, mochi.OnACLCheck, mochi.OnPublish, mochi.OnWill,
		mochi.OnWillSent, mochi.OnPacketEncode:
		return true
	}
	return false
}

// self is the Thing topic key a client authenticated as, "" for anonymous
// clients. A username is only ever set on a connected client by
// OnConnectAuthenticate accepting its password.
func self(cl *mochi.Client) string { return string(cl.Properties.Username) }

// OnConnectAuthenticate refuses the inline client's id (PROTOCOL §10),
// admits anonymous clients when configured, and
// clients whose username is a Thing's topic key and whose password is the
// credential issued to it at join.
func (h *binding) OnConnectAuthenticate(cl *mochi.Client, pk packets.Packet) bool {
	if cl.ID == mochi.InlineClientId {
		// The hub's own id: taking it would take over its reply inbox.
		return false
	}
	user := pk.Connect.Username
	if len(user) == 0 {
		return h.b.cfg.Anonymous
	}
	id, ok := idOf(string(user))
	if !ok {
		return false
	}
	want, err := h.b.creds.CredentialHash(id)
	if err != nil {
		if hub.ErrorCode(err) != hub.ENOTFOUND {
			h.b.log.Error("cannot read mqtt credential", "id", id, "err", err)
		}
		return false
	}
	sum := sha256.Sum256(pk.Connect.Password)
	got := hex.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// OnACLCheck is called for every SUBSCRIBE filter, every PUBLISH and every
// delivery to a subscriber (write false, with the topic name).
func (h *binding) OnACLCheck(cl *mochi.Client, topic string, write bool) bool {
	if cl.Net.Inline {
		return true
	}
	if write {
		// mochi disconnects an MQTT 3.1.1 client whose QoS 1/2 publish is
		// denied; OnPublish acknowledges and drops it instead (as mosquitto
		// does), so the session stays up.
		if cl.Properties.ProtocolVersion < 5 {
			return true
		}
		return mayPublish(self(cl), topic)
	}
	if !mayRead(cl.ID, self(cl), topic) {
		return false
	}
	if t, ok := parseThingTopic(topic); ok && t.kind == kindTDResult {
		h.mu.Lock()
		target, busy := h.results[topic]
		h.mu.Unlock()
		// Not busy: a SUBSCRIBE to the topic, which anyone may make.
		return !busy || target == cl.ID
	}
	return true
}

// OnPublish handles what the hub itself consumes: TDs (joins) and status
// (presence). A TD publish is never retained or forwarded as is: the hub
// retains the accepted document itself.
func (h *binding) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil
	}
	if cl.Properties.ProtocolVersion < 5 && !mayPublish(self(cl), pk.TopicName) {
		return pk, packets.CodeSuccessIgnore // acknowledged, dropped
	}
	t, ok := parseThingTopic(pk.TopicName)
	if !ok {
		return pk, nil
	}
	switch t.kind {
	case kindTD:
		j := &joinRequest{
			tid:         t.tid,
			clientID:    cl.ID,
			self:        self(cl),
			payload:     bytes.Clone(pk.Payload),
			contentType: pk.Properties.ContentType,
		}
		h.b.enqueue(t.tid, func() { h.b.join(j) })
		return pk, packets.CodeSuccessIgnore
	case kindStatus:
		if t.tid == self(cl) {
			h.b.presence(t.tid, pk.Payload)
		}
	}
	return pk, nil
}

// OnWill drops a will on a topic its client may not publish to: mochi does
// not check wills against the ACL, and a will could otherwise set another
// Thing's status. A will on a td topic is dropped too: it would bypass the
// join (wills do not pass OnPublish).
func (h *binding) OnWill(cl *mochi.Client, will mochi.Will) (mochi.Will, error) {
	t, isThing := parseThingTopic(will.TopicName)
	if mayPublish(self(cl), will.TopicName) && (!isThing || t.kind != kindTD) {
		return will, nil
	}
	h.b.log.Debug("dropping a will on a denied topic", "client", cl.ID, "topic", will.TopicName)
	return mochi.Will{}, nil
}

// OnWillSent sees wills, which do not pass OnPublish: a Thing's will on its
// status topic is how the hub learns it went away.
func (h *binding) OnWillSent(cl *mochi.Client, pk packets.Packet) {
	if t, ok := parseThingTopic(pk.TopicName); ok && t.kind == kindStatus && t.tid == self(cl) {
		h.b.presence(t.tid, pk.Payload)
	}
}

// OnPacketEncode advertises the maximum packet size in the v5 CONNACK
// (mochi enforces it but does not say so).
func (h *binding) OnPacketEncode(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Connack && pk.ReasonCode == 0 && cl.Properties.ProtocolVersion == 5 {
		pk.Properties.MaximumPacketSize = MaxPacketSize
	}
	return pk
}

// deliverOnly publishes a td/result to clientID alone.
func (h *binding) deliverOnly(topic, clientID string, publish func() error) error {
	h.mu.Lock()
	if h.results == nil {
		h.results = make(map[string]string)
	}
	h.results[topic] = clientID
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.results, topic)
		h.mu.Unlock()
	}()
	return publish()
}
