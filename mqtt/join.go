package mqtt

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// joinRequest is one PUBLISH to lmos/v1/things/{tid}/td.
type joinRequest struct {
	tid         string
	conn        *mochi.Client // the publishing connection: the only one to get the result
	self        string        // the Thing it is authenticated as, "" if anonymous
	remote      string        // the client's host, for the anonymous join limit
	payload     []byte        // empty: deregister
	contentType string
	// prep is the prepared description (enqueueJoin), or prepErr why it
	// was refused; prepared says whether that was done.
	prep     *hub.PreparedTD
	prepErr  error
	prepared bool
}

// joinResult is the payload of lmos/v1/things/{tid}/td/result.
type joinResult struct {
	lmos.JoinResult
	// err is why the join was refused, for the refusal metrics.
	err error
	// byKey: a Thing that held a credential re-joined with its bound
	// key's proof and was issued a new one (hub.Verdict.ByKey).
	byKey bool
}

func problemOf(err error) *lmos.Problem {
	p := hub.ProblemOf(err)
	return &p
}

// decodeTD returns a TD payload as JSON: CBOR when the MQTT 5 Content Type
// says application/cbor (decoded with hub's limits for hostile input), JSON
// otherwise (validated later by the registry).
func decodeTD(dec hub.Decoder, payload []byte, contentType string) ([]byte, error) {
	if lmos.MediaOf(contentType) != lmos.MediaCBOR {
		return payload, nil
	}
	v, err := dec.DecodeValue(payload, contentType)
	if err != nil {
		return nil, err
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, &hub.Error{Code: hub.EINVALID, Message: "a Thing Description must be a CBOR map with text keys",
			Fields: []hub.FieldError{{Field: "", Description: "must be a map with text keys"}}}
	}
	out, err := json.Marshal(v)
	if err != nil {
		// NaN, infinities and other values JSON cannot carry.
		return nil, hub.Errorf(hub.EINVALID, "the CBOR document has no JSON equivalent: %v", err)
	}
	return out, nil
}

// enqueue runs f on the worker of tid, after everything queued before for
// that Thing. It blocks while the worker is busy (backpressure on the
// publishing client) and drops f once the broker stops.
func (b *Broker) enqueue(tid string, f func()) bool {
	if len(b.queues) == 0 {
		return false
	}
	h := fnv.New32a()
	h.Write([]byte(tid))
	q := b.queues[h.Sum32()%uint32(len(b.queues))]
	select {
	case q <- f:
		return true
	case <-b.stop:
		return false
	}
}

func (b *Broker) work(q chan func()) {
	for {
		select {
		case f := <-q:
			f()
		case <-b.stop:
			// Finish what was accepted: wills published while the server
			// shut down are queued here.
			for {
				select {
				case f := <-q:
					f()
				default:
					return
				}
			}
		}
	}
}

// join registers, replaces or deregisters a Thing from a PUBLISH to its td
// topic (PROTOCOL §4.4) and publishes the result to the publisher. It runs
// on the Thing's worker, so one Thing's joins apply in order; the registry
// call waits for a durable commit.
func (b *Broker) join(j *joinRequest) {
	b.sendResult(j, b.joinResult(j))
}

// sendResult publishes res on …/td/result to the connection of j alone.
func (b *Broker) sendResult(j *joinRequest, res joinResult) {
	if res.err != nil {
		b.countRefusal(res.err)
	}
	payload, err := json.Marshal(res)
	if err != nil {
		b.log.Error("cannot encode join result", "err", err)
		return
	}
	topic := lmos.ThingsPrefix + j.tid + "/td/result"
	// QoS 0: the publisher is connected and subscribed, and a QoS 1 result
	// would become an in-flight message, resent to whoever resumes the
	// session and written to the broker store, credentials and all.
	// mark is the end of the result in the connection's queue; 0 when it
	// was never queued there (the connection had gone).
	var mark uint64
	oc, _ := j.conn.Net.Conn.(*outConn)
	err = b.bind.deliverOnly(topic, j.conn, func() error {
		var before uint64
		if oc != nil {
			before = oc.mark()
		}
		err := b.publish(topic, payload, false, 0, "application/json")
		if oc != nil {
			if after := oc.mark(); after != before {
				mark = after
			}
		}
		return err
	})
	if err != nil {
		b.log.Warn("cannot publish join result", "topic", topic, "err", err)
	}
	if res.Credentials != nil && !res.byKey {
		// A Thing that re-joined by its key keeps its registration when
		// the new credential is lost: its key proves it again.
		b.settleJoin(res.ID, j.tid, j.conn, oc, mark)
	}
}

// settleJoin undoes a join whose fresh credentials never reached the
// joining connection because another connection took its session over
// (join results go only to the connection that asked): nobody holds that
// credential, and a Thing whose credential nobody holds could never be
// joined again. It waits briefly on the Thing's worker for the outcome (a
// write or the connection's end, both quick), then goes on watching
// without holding the worker. A client that simply left keeps its Thing,
// as before: nobody else can have taken its place.
func (b *Broker) settleJoin(id, tid string, conn *mochi.Client, oc *outConn, mark uint64) {
	if oc == nil {
		return
	}
	// decide settles the join once the result's fate is known; the end of
	// a connection is seen a moment before mochi marks it taken over, so an
	// undelivered result is looked at again until final.
	decide := func(final bool) bool {
		delivered, settled := false, true
		if mark != 0 {
			delivered, settled = oc.reached(mark)
		}
		if !settled {
			return false
		}
		if delivered {
			return true
		}
		if b.replaced(conn) {
			b.undoJoin(id, tid)
			return true
		}
		return final
	}
	for range 50 {
		if decide(false) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	// Still open: watch without holding the worker (a busy gateway may
	// list the connection that took over later than this), then decide on
	// the Thing's worker, in order with its later joins.
	go func() {
		for range 300 {
			select {
			case <-b.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			delivered, settled := false, true
			if mark != 0 {
				delivered, settled = oc.reached(mark)
			}
			if settled && (delivered || b.replaced(conn)) {
				break
			}
		}
		b.enqueue(tid, func() { decide(true) })
	}()
}

// replaced reports whether conn's session was taken over or resumed by
// another connection (mochi stops the old connection before it lists the
// new one, and its end may be recorded as the EOF the client's own close
// caused).
func (b *Broker) replaced(conn *mochi.Client) bool {
	if conn.IsTakenOver() || errors.Is(conn.StopCause(), packets.ErrSessionTakenOver) {
		return true
	}
	cur, ok := b.server.Clients.Get(conn.ID)
	return ok && cur != conn
}

// undoJoin removes a Thing registered by a join whose result could not
// reach the joining connection, with its credential, so
// that the agent's next join registers it afresh (PROTOCOL §10).
func (b *Broker) undoJoin(id, tid string) {
	b.log.Info("undoing a join whose connection was taken over before it got its credentials", "id", id)
	if err := b.adm.Deregister(b.ctx, id); err != nil {
		b.log.Error("cannot undo a join whose credentials were not delivered", "id", id, "err", err)
		return
	}
	b.forget(tid)
	b.countRefusalReason("mqtt.joinTakenOver")
}

func (b *Broker) joinResult(j *joinRequest) joinResult {
	id, ok := idOf(j.tid)
	if !ok {
		return rejected("", hub.Errorf(hub.EINVALID, "the topic key %q is not the topic key of a valid Thing id (PROTOCOL §1)", j.tid))
	}
	del := len(j.payload) == 0
	req := hub.JoinRequest{ID: id, Door: hub.SourceMQTT, Holder: j.self == j.tid, Deregister: del, Addr: j.remote}
	if !del {
		req.Proof = func() (*hub.Signer, error) {
			if !j.prepared {
				j.prep, j.prepErr = b.prepareTD(j.payload, j.contentType, j.remote)
				j.prepared = true
			}
			if j.prepErr != nil {
				return nil, j.prepErr
			}
			return j.prep.Signer(), nil
		}
	}
	v, err := b.adm.AdmitJoin(req)
	hasCred := v.Credentialed
	if errors.Is(err, hub.ErrJoinPending) {
		return b.park(id, j)
	}
	if err != nil {
		return rejected(id, err)
	}
	if del {
		return b.deregister(id, j)
	}
	if !j.prepared {
		j.prep, j.prepErr = b.prepareTD(j.payload, j.contentType, j.remote)
	}
	if j.prepErr != nil {
		return rejected(id, j.prepErr)
	}
	raw := j.prep.Raw()
	// Only the holder of the Thing's credential writes as its owner: an
	// anonymous join of a registered Thing may not bind it to a key
	// (PROTOCOL §6).
	origin := hub.Origin{Source: hub.SourceMQTT, Owner: hasCred}
	res := joinResult{JoinResult: lmos.JoinResult{Status: lmos.JoinAccepted, ID: id}}
	var hash string
	if !hasCred {
		fresh, err := b.checkClaim(id, j.remote)
		if err != nil {
			return rejected(id, err)
		}
		// Its stored description is public: only a proof newer than the
		// last accepted one takes a registered bound Thing (PROTOCOL §6).
		origin.Takeover = fresh
		// A new Thing, or one without credentials: written anonymously,
		// it counts against its address (registry.maxThingsPerSource),
		// and gets a credential, stored in the same commit.
		origin.Addr = j.remote
		secret, err := newSecret()
		if err != nil {
			b.log.Error("cannot issue mqtt credential", "id", id, "err", err)
			return rejected(id, &hub.Error{Code: hub.EINTERNAL, Message: "the Thing's credentials could not be created, so it was not registered; publish the description again", Err: err})
		}
		hash = hub.HashToken(secret)
		res.Credentials = &lmos.Credentials{Username: j.tid, Password: secret}
	}
	if v.ByKey {
		// A new credential replaces the one the agent lost, which stops
		// working (its connections end), in the commit of a fresh proof.
		res.byKey = true
		if _, err := b.adm.RegisterByKey(b.ctx, id, j.prep, origin, hash); err != nil {
			return rejected(id, err)
		}
	} else if _, err := b.adm.Register(b.ctx, id, j.prep, origin, hash); err != nil {
		return rejected(id, err)
	}
	// Published live to subscribers of …/td, not retained: later
	// subscribers get the registry's document (retainedtd.go).
	if err := b.publish(lmos.ThingsPrefix+j.tid+"/td", raw, false, 1, tdContentType); err != nil {
		b.log.Warn("cannot publish accepted description", "id", id, "err", err)
	}
	return res
}

// checkClaim refuses an anonymous join of a registered Thing that holds no
// credential (an admin approved its join while its agent was gone, or
// reset its credential) from another host than the one it was last
// written from (the exact address, not its IPv6 /64, which a whole home LAN
// shares), unless its id is bound to a key: the credential the
// join issues would hand anyone on the LAN the Thing with its admission and
// its groups (PROTOCOL §6). A bound one is taken only by a fresh proof by
// its key (fresh: the write is a takeover), not by its stored description,
// which anyone may read and send again. Joins of one Thing run one at a
// time on its worker, so the Thing cannot change before the write.
func (b *Broker) checkClaim(id, remote string) (fresh bool, err error) {
	th, err := b.reg.Get(id)
	if err != nil {
		return false, nil // a new Thing; a failed read fails the write too
	}
	if _, err := b.reg.Binding(id); err == nil {
		return true, nil
	}
	if th.Meta.WrittenFrom(remote) {
		return false, nil
	}
	return false, hub.Errorf(hub.EFORBIDDEN, "the Thing %q holds no credentials and was registered from another address: its agent joins again from the exact address it was registered from, or an admin deletes it or binds it to the agent's key (PUT /api/things/{id}/binding)", id)
}

// park puts the join of a new Thing on the pending list (join mode
// approve) and answers pending; the connection that published it, while
// it stays, gets the final result on the same topic when an admin decides
// (approved: accepted with credentials; denied: rejected 403).
func (b *Broker) park(id string, j *joinRequest) joinResult {
	if !j.prepared {
		j.prep, j.prepErr = b.prepareTD(j.payload, j.contentType, j.remote)
	}
	if j.prepErr != nil {
		return rejected(id, j.prepErr)
	}
	w := &hub.JoinWaiter{
		Live:       func() bool { return !j.conn.Closed() && !b.replaced(j.conn) },
		Credential: newSecret,
	}
	w.Decided = func(password string, err error) {
		// Called under the join policy's lock: the result goes out on the
		// Thing's worker, in order with its joins, without waiting here.
		go b.enqueue(j.tid, func() { b.decided(id, j, password, err) })
	}
	if err := b.adm.Park(id, j.prep, hub.SourceMQTT, j.remote, w); err != nil {
		return rejected(id, err)
	}
	return joinResult{JoinResult: lmos.JoinResult{Status: lmos.JoinPending, ID: id}}
}

// decided sends the final result of a parked join to its waiting
// connection.
func (b *Broker) decided(id string, j *joinRequest, password string, err error) {
	if err != nil {
		b.sendResult(j, rejected(id, err))
		return
	}
	res := joinResult{JoinResult: lmos.JoinResult{Status: lmos.JoinAccepted, ID: id}}
	if password != "" {
		res.Credentials = &lmos.Credentials{Username: j.tid, Password: password}
	}
	if err := b.publish(lmos.ThingsPrefix+j.tid+"/td", j.prep.Raw(), false, 1, tdContentType); err != nil {
		b.log.Warn("cannot publish accepted description", "id", id, "err", err)
	}
	b.sendResult(j, res)
}

// deregister deletes a Thing at the request of a client connected with its
// credential, and the credential with it, in one commit.
func (b *Broker) deregister(id string, j *joinRequest) joinResult {
	if err := b.adm.Deregister(b.ctx, id); err != nil {
		return rejected(id, err)
	}
	b.forget(j.tid)
	return joinResult{JoinResult: lmos.JoinResult{Status: lmos.JoinDeleted, ID: id}}
}

// forget tells live subscribers of …/td that a Thing is gone (an empty
// payload); nothing is retained there to clear.
func (b *Broker) forget(tid string) {
	if err := b.publish(lmos.ThingsPrefix+tid+"/td", nil, false, 1, ""); err != nil {
		b.log.Warn("cannot publish a description's removal", "tid", tid, "err", err)
	}
}

func rejected(id string, err error) joinResult {
	return joinResult{JoinResult: lmos.JoinResult{Status: lmos.JoinRejected, ID: id, Problem: problemOf(err)}, err: err}
}

// newSecret returns a 256-bit password, base64url without padding.
func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cannot create secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// endThingSessions ends the connections authenticated as the Thing id
// once its credential was replaced or reset (hub.Admission
// OnCredentialRevoked): they were admitted with the old one. The
// connections are listed now, so a connection with the new credential
// that comes after is not among them.
func (b *Broker) endThingSessions(id string) {
	tid := lmos.TopicKey(id)
	for _, cl := range b.server.Clients.GetAll() {
		if cl.Net.Inline || cl.Closed() || self(cl) != tid {
			continue
		}
		b.log.Info("ending a connection whose credential was revoked", "id", id, "client", cl.ID)
		go func() { _ = b.server.DisconnectClient(cl, packets.ErrNotAuthorized) }()
	}
}

// presence records a Thing's own status publish (or its will): "online" or
// "offline" as plain text; anything else is ignored.
func (b *Broker) presence(tid string, payload []byte) {
	status := string(bytes.TrimSpace(payload))
	if status != hub.PresenceOnline && status != hub.PresenceOffline {
		b.log.Debug("ignoring status payload", "tid", tid, "payload", status)
		return
	}
	id, ok := idOf(tid)
	if !ok {
		return
	}
	b.enqueue(tid, func() {
		if err := b.reg.SetPresence(b.ctx, id, status, hub.SourceMQTT); err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
			b.log.Warn("cannot record presence", "id", id, "status", status, "err", err)
		}
	})
}
