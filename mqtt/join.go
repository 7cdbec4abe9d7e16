package mqtt

import (
	"bytes"
	"encoding/json"
	"errors"
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
	// req is the join as the hub decides it, its description prepared
	// ahead (enqueueJoin); nil until then.
	req *hub.JoinRequest
	// td is the description of a parked join, published once approved.
	td []byte
}

// joinResult is the payload of lmos/v1/things/{tid}/td/result.
type joinResult struct {
	lmos.JoinResult
	// err is why the join was refused, for the refusal metrics.
	err error
	// done is the hub's result of an accepted join (Admission.Join).
	done hub.JoinResult
}

func problemOf(err error) *lmos.Problem {
	p := hub.ProblemOf(err)
	return &p
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
	if res.Credentials != nil && !res.done.ByKey {
		// A Thing that re-joined by its key keeps its registration when
		// the new credential is lost: its key proves it again.
		b.settleJoin(res.done, j.tid, j.conn, oc, mark)
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
func (b *Broker) settleJoin(done hub.JoinResult, tid string, conn *mochi.Client, oc *outConn, mark uint64) {
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
			b.undoJoin(done, tid)
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

// undoJoin withdraws a join whose result could not reach the joining
// connection, the Thing with its credential, so that the agent's next join
// registers it afresh (PROTOCOL §10).
func (b *Broker) undoJoin(done hub.JoinResult, tid string) {
	b.log.Info("undoing a join whose connection was taken over before it got its credentials", "id", done.ID)
	if err := b.adm.Undo(b.ctx, done); err != nil {
		b.log.Error("cannot undo a join whose credentials were not delivered", "id", done.ID, "err", err)
		return
	}
	b.forget(tid)
	b.countRefusalReason("mqtt.joinTakenOver")
}

// joinResult decides and carries out the join j (hub.Admission.Join) and
// says what to answer.
func (b *Broker) joinResult(j *joinRequest) joinResult {
	id, ok := idOf(j.tid)
	if !ok {
		return rejected("", hub.Errorf(hub.EINVALID, "the topic key %q is not the topic key of a valid Thing id (PROTOCOL §1)", j.tid))
	}
	req := j.request()
	req.ID = id
	req.Waiter = b.waiter(id, j)
	done, err := b.adm.Join(b.ctx, *req)
	switch {
	case err != nil:
		return rejected(id, err)
	case done.Status == lmos.JoinPending:
		j.td = done.TD
		return joinResult{JoinResult: lmos.JoinResult{Status: lmos.JoinPending, ID: id}}
	case done.Status == lmos.JoinDeleted:
		b.forget(j.tid)
		return joinResult{JoinResult: lmos.JoinResult{Status: lmos.JoinDeleted, ID: id}}
	}
	res := joinResult{JoinResult: lmos.JoinResult{Status: lmos.JoinAccepted, ID: id}, done: done}
	if done.Password != "" {
		res.Credentials = &lmos.Credentials{Username: j.tid, Password: done.Password}
	}
	// Published live to subscribers of …/td, not retained: later
	// subscribers get the registry's document (retainedtd.go).
	if err := b.publish(lmos.ThingsPrefix+j.tid+"/td", done.TD, false, 1, tdContentType); err != nil {
		b.log.Warn("cannot publish accepted description", "id", id, "err", err)
	}
	return res
}

// request is j as the hub takes it.
func (j *joinRequest) request() *hub.JoinRequest {
	if j.req == nil {
		j.req = &hub.JoinRequest{Door: hub.SourceMQTT, Holder: j.self == j.tid, Deregister: len(j.payload) == 0,
			Addr: j.remote, TD: j.payload, ContentType: j.contentType}
	}
	return j.req
}

// waiter is the connection that published j while its join waits for an
// administrator (join mode approve): it gets the final result on the same
// topic when an admin decides (approved: accepted with credentials;
// denied: rejected 403).
func (b *Broker) waiter(id string, j *joinRequest) *hub.JoinWaiter {
	w := &hub.JoinWaiter{Live: func() bool { return !j.conn.Closed() && !b.replaced(j.conn) }}
	w.Decided = func(password string, err error) {
		// Called under the join policy's lock: the result goes out on the
		// Thing's worker, in order with its joins, without waiting here.
		go b.enqueue(j.tid, func() { b.decided(id, j, password, err) })
	}
	return w
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
	if err := b.publish(lmos.ThingsPrefix+j.tid+"/td", j.td, false, 1, tdContentType); err != nil {
		b.log.Warn("cannot publish accepted description", "id", id, "err", err)
	}
	b.sendResult(j, res)
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
