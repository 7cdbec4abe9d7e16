package mqtt

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
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
	// connection that published the TD: only that connection may receive
	// it, since it may carry credentials (PROTOCOL §10). mochi makes a new
	// Client for every connection, so a connection that resumed or took
	// over the session under the same client id is not it.
	mu      sync.Mutex
	results map[string]*mochi.Client
}

func (h *binding) ID() string { return "lmos" }

func (h *binding) Provides(b byte) bool {
	switch b {
	case mochi.OnConnect, mochi.OnConnectAuthenticate, mochi.OnACLCheck, mochi.OnPublish, mochi.OnWill,
		mochi.OnWillSent, mochi.OnPacketEncode, mochi.OnSubscribe, mochi.OnSubscribed, mochi.OnPacketProcessed,
		mochi.OnSessionEstablish, mochi.OnSessionEstablished, mochi.OnUnsubscribed, mochi.OnClientExpired,
		mochi.OnPacketRead:
		return true
	}
	return false
}

// self is the Thing topic key a client authenticated as, "" for anonymous
// clients. A username is only ever set on a connected client by
// OnConnectAuthenticate accepting its password.
// A token client (TokenUsername) is no Thing.
//
// It is asked on every publish and for every delivery that needs the
// policy, so a wrapped connection keeps it: a client's username does not
// change while it is connected, and converting it allocated each time.
func self(cl *mochi.Client) string {
	c, ok := cl.Net.Conn.(*outConn)
	if !ok {
		return selfOf(cl.Properties.Username)
	}
	if s := c.self.Load(); s != nil {
		return *s
	}
	s := selfOf(cl.Properties.Username)
	c.self.Store(&s)
	return s
}

func selfOf(username []byte) string {
	if string(username) == TokenUsername {
		return ""
	}
	return string(username)
}

// OnConnect refuses a CONNECT whose client id names an existing session,
// connected or kept offline (also one restored from storage), that another
// username established: anonymous and Thing sessions, and the sessions of
// different Things, never take each other over (PROTOCOL §10); and one
// whose client id a connected client without a Thing identity holds at
// another address (inbox.go). The CONNACK says 0x85 Client Identifier not
// valid (MQTT 3.1.1: 0x02 identifier rejected). A client id the broker
// assigns is a random one (inbox.go). From here until the client is in
// mochi's table, connections with one client id pass one at a time
// (sameclientid.go), so the checks here still hold when the session is taken.
func (h *binding) OnConnect(cl *mochi.Client, pk packets.Packet) error {
	if c, ok := cl.Net.Conn.(*outConn); ok {
		// mochi sets the keep-alive deadline next, replacing awaitConnect's.
		c.connected.Store(true)
		c.keepalive.Store(uint32(cl.State.Keepalive))
	}
	assignClientID(cl)
	h.enterGate(cl)
	if h.sessionOfOther(cl.ID, pk.Connect.Username) {
		h.b.log.Debug("refusing a client id bound to another username", "client", cl.ID)
		return h.refuseClientID(cl)
	}
	if h.heldElsewhere(cl) {
		h.b.countRefusalReason(reasonClientIDHeld)
		h.b.log.Debug("refusing a client id held by a connection from another address", "client", cl.ID, "remote", cl.Net.Remote)
		return h.refuseClientID(cl)
	}
	keepWillProperties(cl, pk)
	return nil
}

// sessionOfOther reports whether the session clientID exists and belongs to
// another username than user. An anonymous session never blocks a client
// that names itself: anonymous sessions are never persistent (anonymous.go),
// so an anonymous connection holding a Thing's client id cannot lock the
// Thing out; the Thing (once its password is checked) takes the id over.
func (h *binding) sessionOfOther(clientID string, user []byte) bool {
	existing, ok := h.b.server.Clients.Get(clientID)
	if !ok || existing.Net.Inline || bytes.Equal(existing.Properties.Username, user) {
		return false
	}
	return len(existing.Properties.Username) > 0 || len(user) == 0
}

// OnConnectAuthenticate refuses the inline client's id (PROTOCOL §10),
// admits anonymous clients when configured, and
// clients whose username is a Thing's topic key and whose password is the
// credential issued to it at join.
func (h *binding) OnConnectAuthenticate(cl *mochi.Client, pk packets.Packet) bool {
	if cl.ID == mochi.InlineClientId || cl.ID == BridgeClientID {
		// The hub's own ids: taking one would take over its reply inbox,
		// or make the bridge take the client's messages for its own.
		return false
	}
	user := pk.Connect.Username
	if h.sessionOfOther(cl.ID, user) {
		// Checked again: a session may have appeared since OnConnect.
		return false
	}
	if len(user) == 0 {
		return h.b.cfg.Anonymous
	}
	if string(user) == TokenUsername {
		return h.authenticateToken(cl, pk.Connect.Password)
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

// OnACLCheck is called by mochi for every SUBSCRIBE filter and every
// PUBLISH: the topic ACL, then the access policy (access.go). Deliveries
// are checked by mayDeliver.
func (h *binding) OnACLCheck(cl *mochi.Client, topic string, write bool) bool {
	if cl.Net.Inline {
		return true
	}
	if write && cl.Properties.ProtocolVersion < 5 {
		// mochi disconnects an MQTT 3.1.1 client whose QoS 1/2 publish is
		// denied; OnPublish acknowledges and drops it instead (as mosquitto
		// does), so the session stays up.
		return true
	}
	if !h.aclCheck(cl, topic, write) {
		h.countGroupRefusal(cl, topic)
		h.b.logRefusal(cl.ID, topic, write, "acl")
		return false
	}
	return !h.refusedByPolicy(cl, topic, write)
}

// aclCheck is the topic ACL (PROTOCOL §4.4) of a SUBSCRIBE filter, a
// PUBLISH, or a delivery to a subscriber (write false, with the topic
// name).
func (h *binding) aclCheck(cl *mochi.Client, topic string, write bool) bool {
	if cl.Net.Inline {
		return true
	}
	if decided, ok := h.bridgeACL(cl, topic, write); decided {
		return ok // a bridged area (bridgeport.go)
	}
	if write {
		return mayPublish(self(cl), topic) && h.groupAllowed(cl, topic)
	}
	if !mayRead(cl.ID, self(cl), topic) || !h.groupAllowed(cl, topic) {
		if isCredentialTopic(topic) {
			h.b.countRefusalReason(hub.EFORBIDDEN) // another Thing's credentials
		}
		return false
	}
	if t, ok := parseThingTopic(topic); ok && t.kind == kindTDResult {
		h.mu.Lock()
		target, busy := h.results[topic]
		h.mu.Unlock()
		// Not busy: a SUBSCRIBE to the topic, which anyone may make.
		return !busy || target == cl
	}
	return true
}

// readableByAll reports whether every client may read topic, so that a
// delivery on it needs no check per subscriber. mayRead only grants more
// to a client id or Thing that matches, so what it grants to neither is
// granted to all; td/result is further restricted by OnACLCheck.
func readableByAll(topic string) bool {
	if !mayRead("", "", topic) {
		return false
	}
	t, ok := parseThingTopic(topic)
	return !ok || t.kind != kindTDResult
}

// OnPublish handles what the hub itself consumes: TDs (joins) and status
// (presence). A TD publish is never retained or forwarded as is: the hub
// retains the accepted document itself. It also refuses a Response Topic
// outside the reply inboxes and clears the retain flag where mayRetain
// says so.
func (h *binding) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return h.deliver(cl, pk)
	}
	if cl.Properties.ProtocolVersion < 5 {
		if !h.aclCheck(cl, pk.TopicName, true) {
			h.countGroupRefusal(cl, pk.TopicName)
			h.b.logRefusal(cl.ID, pk.TopicName, true, "acl")
			return pk, packets.CodeSuccessIgnore // acknowledged, dropped
		}
		if h.refusedByPolicy(cl, pk.TopicName, true) {
			return pk, packets.CodeSuccessIgnore
		}
	}
	// willKey is the hub's own carrier of will properties (will.go): a
	// client's forged one would become a Response Topic no check saw.
	pk.Properties.User = withoutWillKey(pk.Properties.User)
	if t, ok := parseThingTopic(pk.TopicName); ok && t.kind == kindTD && !joinResponseTopicOK(t.tid, pk.Properties.ResponseTopic) {
		return h.refuseJoinResponseTopic(cl, t.tid, pk)
	}
	if rt := pk.Properties.ResponseTopic; rt != "" && !replyTopicOK(rt) && !isJoinResultOf(pk.TopicName, rt) {
		// Whoever answers would publish there with its own rights: a reply
		// could land on the agent's own td (an empty one deregistering it),
		// status, properties or events (PROTOCOL §10).
		h.b.log.Debug("refusing a publish with a response topic outside lmos/v1/clients/", "client", cl.ID, "topic", pk.TopicName)
		return refuse(pk)
	}
	if pk.FixedHeader.Retain && !mayRetain(pk.TopicName) {
		pk.FixedHeader.Retain = false
	}
	if gid, action, ok := groupActionOf(pk.TopicName); ok {
		return h.groupAction(cl, gid, action, pk)
	}
	t, ok := parseThingTopic(pk.TopicName)
	if !ok {
		return h.deliver(cl, pk)
	}
	switch t.kind {
	case kindTD:
		if len(pk.Payload) == 0 && len(pk.Properties.CorrelationData) > 0 {
			// A reply (Correlation Data) is never a deregistration.
			h.b.log.Debug("refusing an empty td reply", "client", cl.ID, "topic", pk.TopicName)
			return refuse(pk)
		}
		j := &joinRequest{
			tid:         t.tid,
			conn:        cl,
			self:        self(cl),
			remote:      remoteHost(cl.Net.Remote),
			payload:     bytes.Clone(pk.Payload),
			contentType: pk.Properties.ContentType,
		}
		h.b.enqueueJoin(j)
		return pk, packets.CodeSuccessIgnore
	case kindStatus:
		if t.tid == self(cl) {
			h.b.presence(t.tid, pk.Payload)
		}
	case kindAction, kindPropertySet:
		// A WebSocket agent has no subscription here: the hub carries the
		// request to it and publishes its results to the Response Topic.
		if id, ok := h.b.forwardTarget(t); ok {
			if !h.b.forward(id, t, pk) {
				h.b.log.Info("refusing a request: too many forwarded requests in flight", "topic", pk.TopicName)
				return refuse(pk)
			}
		} else if h.b.Subscribers(pk.TopicName) == 0 {
			return h.b.answerUnserved(cl, t, pk)
		}
	}
	return h.deliver(cl, pk)
}

// deliver retains and delivers a publish through the broker's own fan-out
// (fanout.go, qos.go) and tells mochi to skip both (mochi's Ignore); mochi
// still acknowledges it, after the deliveries are queued or stored, unless
// the broker did (a QoS 1 publish, ackbatch.go): then mochi skips the
// publish altogether.
func (h *binding) deliver(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if !h.b.fanOut(cl, pk) {
		return pk, nil
	}
	if h.b.ackPublish(cl, pk) {
		return pk, errRejectPacket
	}
	return pk, errSuccessIgnore
}

// mochi's codes are structs: returned as an error, each would be boxed
// (allocated) on every publish. Boxed once here; mochi compares them with
// errors.Is, by value.
var (
	errRejectPacket  error = packets.ErrRejectPacket
	errSuccessIgnore error = packets.CodeSuccessIgnore
)

// refuse answers a PUBLISH the hub will not take: PUBACK 0x87 (Not
// authorized) at QoS 1 over MQTT 5; otherwise it is dropped (mochi can
// only answer a hook's refusal with an MQTT 5 PUBACK, and goes on to
// retain and deliver a publish whose refusal it cannot send; MQTT 3.1.1
// has no refusing PUBACK).
func refuse(pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Qos == 1 && pk.ProtocolVersion == 5 {
		return pk, packets.ErrNotAuthorized
	}
	return pk, packets.CodeSuccessIgnore
}

// OnWill drops a will on a topic its client may not publish to: mochi does
// not check wills against the ACL, and a will could otherwise set another
// Thing's status. A will on a td topic is dropped too: it would bypass the
// join (wills do not pass OnPublish); so is one on a group action's topic:
// the hub consumes those requests, and a will would reach subscribers of
// lmos/v1/hub/# instead. A will on a topic that is never
// retained (mayRetain) loses its retain flag, as a publish does. A will
// on a group channel is sent only for a member at that moment (mochi
// asks here as it sends the will, at the disconnection) and only without
// a Will Delay Interval: a delayed will is published later, out of the
// hub's reach, maybe after the membership ended.
func (h *binding) OnWill(cl *mochi.Client, will mochi.Will) (mochi.Will, error) {
	will = h.allowedWill(cl, will)
	if will.TopicName != "" {
		h.b.shortenWillDelay(cl, &will) // willdelay.go
	}
	return will, nil
}

// allowedWill is will as OnWill lets it through: the zero Will when it is
// not allowed.
func (h *binding) allowedWill(cl *mochi.Client, will mochi.Will) mochi.Will {
	if _, ok := groupChannel(will.TopicName); ok && (will.WillDelayInterval > 0 || !h.groupAllowed(cl, will.TopicName)) {
		h.countGroupRefusal(cl, will.TopicName)
		return mochi.Will{}
	}
	t, isThing := parseThingTopic(will.TopicName)
	_, _, isGroupAction := groupActionOf(will.TopicName)
	if mayPublish(self(cl), will.TopicName) && (!isThing || t.kind != kindTD) && !isGroupAction {
		if !mayRetain(will.TopicName) {
			will.Retain = false
		}
		return will
	}
	h.b.log.Debug("dropping a will on a denied topic", "client", cl.ID, "topic", will.TopicName)
	return mochi.Will{}
}

// OnWillSent sees wills, which do not pass OnPublish: a Thing's will on its
// status topic is how the hub learns it went away. Delayed wills are left
// to onDelayedWill, which sees them all.
func (h *binding) OnWillSent(cl *mochi.Client, pk packets.Packet) {
	if pk.Connect.WillProperties.WillDelayInterval > 0 {
		h.b.wills.remove(cl.ID)
		return
	}
	if t, ok := parseThingTopic(pk.TopicName); ok && t.kind == kindStatus && t.tid == self(cl) {
		h.b.presence(t.tid, pk.Payload)
	}
}

// onDelayedWill is the inline subscription to every Thing's status topic.
// mochi publishes a will with a Will Delay Interval from its own loop once
// the delay is over, and calls OnWillSent only if the client's session
// still exists; a clean-start agent that vanished would stay online. The
// will is recognised by its delay (mochi keeps it in the packet). OnWill
// let through only wills on the client's own topics, so the topic names
// the Thing whose will it is.
func (h *binding) onDelayedWill(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
	if pk.Connect.WillProperties.WillDelayInterval == 0 {
		return
	}
	h.b.wills.remove(pk.Origin)
	if t, ok := parseThingTopic(pk.TopicName); ok && t.kind == kindStatus {
		h.b.presence(t.tid, pk.Payload)
	}
}

// OnPacketEncode advertises the maximum packet size in the v5 CONNACK
// (mochi enforces it but does not say so), and is the guard that no packet
// the broker writes breaks the specification, whatever mochi does
// (reasoncodes.go): reason codes the packet type does not define, a
// success reason mochi would not encode, a DISCONNECT to an MQTT 3.1.1
// client, a QoS 1/2 delivery too large for the client left in flight.
func (h *binding) OnPacketEncode(cl *mochi.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Connack && pk.SessionPresent {
		if c, ok := cl.Net.Conn.(*outConn); ok {
			c.resuming.Store(true) // mochi's resend follows (resend.go)
		}
	}
	if pk.FixedHeader.Type == packets.Connack && pk.ReasonCode == 0 && cl.Properties.ProtocolVersion == 5 {
		pk.Properties.MaximumPacketSize = MaxPacketSize
		if c, ok := cl.Net.Conn.(*outConn); ok && c.noExpiry.Load() {
			pk.Properties.SessionExpiryInterval = 0
			pk.Properties.SessionExpiryIntervalFlag = true
		}
	}
	// mochi puts 0x01 on every QoS 1 PUBACK (mochi issue #474), so a fix
	// is routine: counted, not logged.
	if fixReasonCodes(&pk) {
		h.b.reasonFixes.Add(1)
	}
	keepSuccessReason(&pk)
	if t := pk.FixedHeader.Type; t == packets.Suback || t == packets.Unsuback {
		restoreID(cl, &pk) // resend.go
	}
	if pk.FixedHeader.Type == packets.Publish {
		restoreWillProperties(&pk)
	}
	if pk.FixedHeader.Type == packets.Publish && pk.FixedHeader.Qos > 0 && pk.Mods.MaxSize > 0 && tooLarge(pk) {
		// mochi will not write it (over the client's Maximum Packet Size)
		// but keeps it in flight, where it holds a place of the client's
		// Receive Maximum for good and comes back at every reconnect. The
		// specification says to discard it and carry on as if it had been
		// sent (MQTT 5 §3.1.2.11.4, [MQTT-3.1.2-25]).
		if cl.State.Inflight.Delete(pk.PacketID) {
			cl.State.Inflight.IncreaseSendQuota()
			h.b.state.OnQosDropped(cl, pk) // else the stored copy comes back after a restart
		}
		h.b.dropped[dropTooLarge].Add(1)
		h.b.reasonFixes.Add(1)
	}
	if unsent(&pk) {
		// A packet type mochi's WritePacket does not know is not written
		// (it returns an error, which mochi ignores while disconnecting).
		h.b.reasonFixes.Add(1)
		pk.FixedHeader.Type = packets.Reserved
	}
	return pk
}

// deliverOnly publishes a td/result to the connection conn alone.
func (h *binding) deliverOnly(topic string, conn *mochi.Client, publish func() error) error {
	h.mu.Lock()
	if h.results == nil {
		h.results = make(map[string]*mochi.Client)
	}
	h.results[topic] = conn
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.results, topic)
		h.mu.Unlock()
	}()
	return publish()
}

// remoteHost is the host part of a client's remote address.
func remoteHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// OnClientExpired takes an expired session's filters out of the topic
// index: mochi deletes only the client, and a later session with its id
// would otherwise receive what it never subscribed to [MQTT-3.1.2-4].
func (h *binding) OnClientExpired(cl *mochi.Client) { h.b.server.UnsubscribeClient(cl) }
