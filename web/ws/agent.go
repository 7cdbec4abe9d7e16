package ws

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Transport is the hub's transport to WebSocket agents.
var _ hub.Transport = (*Transport)(nil)

// agentReplyBuffer is how many intermediate results of one request may
// wait; beyond it they are dropped, as for MQTT agents. The final result
// has a slot of its own.
const agentReplyBuffer = 32

// agentRequest is one request of the hub to a WebSocket agent, waiting for
// its replies.
type agentRequest struct {
	op    hub.Op
	ch    chan *wsMessage // intermediate replies
	final chan *wsMessage // the final reply (capacity 1)
}

// register is registerThing{td} (PROTOCOL §5): the same join as over MQTT
// (hub.Admission.Join). An id bound to another live connection is
// refused (409), as is one joined over MQTT (it holds a credential) or
// registered by other means (403).
func (wc *wsConn) register(m *wsMessage) {
	g := wc.g
	id, doc, raw, err := registration(m)
	if err != nil {
		wc.replyError(m, err)
		return
	}
	owner, own, err := wc.reserve(id)
	if err != nil {
		wc.replyError(m, err)
		return
	}
	// Another socket than the live owner's takes the Thing over: a bound
	// id then needs a fresh proof by its key (PROTOCOL §6). A Thing that
	// joined over MQTT (it holds a credential) comes here with its bound
	// key's proof only.
	req := hub.JoinRequest{ID: id, Door: hub.SourceWS, Addr: wc.remote, TD: raw, Doc: doc, Takeover: owner != wc, Owner: own}
	w, old := wc.await(m, id)
	req.Waiter = w
	ctx, cancel := context.WithTimeout(wc.ctx, 10*time.Second)
	defer cancel()
	res, err := g.adm.Join(ctx, req)
	if res.Status != lmos.JoinPending {
		wc.unawait(id, w, old)
	}
	if err != nil {
		kept := owner == wc
		if res.Approval {
			// Refused a place on the pending list: the id stays reserved
			// only for a join of it still waiting here.
			wc.mu.Lock()
			_, kept = wc.parked[id]
			wc.mu.Unlock()
		}
		wc.release(id, kept)
		wc.replyError(m, err)
		return
	}
	if res.Status == lmos.JoinPending {
		// The agent gets acknowledgement{message: "pending"} now and, on
		// the same correlationId, acknowledgement{message: "registered"}
		// or an error (403) when an admin decides. The id stays reserved
		// for this connection meanwhile, and the agent may not emit
		// values for it.
		wc.log.Info("websocket agent waits for approval", "id", id)
		wc.ack(m, lmos.JoinPending)
		return
	}
	// This connection is the Thing on group channels if it created it or
	// proved its bound key (a takeover of a bound id needs a fresh proof);
	// an unsigned Thing re-registered from another socket is not (its
	// agent back, or anyone: the hub cannot tell).
	proven := res.Created
	if t, err := g.reg.Get(id); err == nil && t.Meta.Verified != "" {
		proven = true
	}
	wc.registered(m, id, proven)
}

// registration is the id and the description of a registerThing, as
// decoded with the message and in its JSON form.
func registration(m *wsMessage) (id string, td map[string]any, raw []byte, err error) {
	td, ok := m.TD.(map[string]any)
	if !ok {
		return "", nil, nil, &hub.Error{Code: hub.EINVALID, Message: "registerThing needs the Thing Description as an object",
			Fields: []hub.FieldError{{Field: "/td", Description: "must be an object"}}}
	}
	id, _ = td["id"].(string)
	if id == "" {
		return "", nil, nil, &hub.Error{Code: hub.EINVALID, Message: "a Thing registered over WebSocket needs an id",
			Fields: []hub.FieldError{{Field: "/td/id", Description: "is required"}}}
	}
	if m.ThingID != "" && m.ThingID != id {
		return "", nil, nil, &hub.Error{Code: hub.EINVALID, Message: "thingId differs from the description's id",
			Fields: []hub.FieldError{{Field: "/thingId", Description: "must equal /td/id"}}}
	}
	m.ThingID = id
	if err := hub.ValidateID(id); err != nil {
		return "", nil, nil, err
	}
	raw, err = json.Marshal(td)
	if err != nil {
		return "", nil, nil, hub.Errorf(hub.EINVALID, "the description has no JSON form: %v", err)
	}
	return id, td, raw, nil
}

// reserve reserves id for this connection before its join is decided: two
// connections racing for one id cannot both pass the join's checks. owner
// is the connection that held it (nil: none); own says this connection is
// the Thing's own: the live one that created it or proved its key. Only it
// may bind an unbound Thing to a key; another socket, or one that took the
// Thing over unsigned, may not (PROTOCOL §6).
func (wc *wsConn) reserve(id string) (owner *wsConn, own bool, err error) {
	g := wc.g
	g.mu.Lock()
	owner = g.agents[id]
	if owner != nil && owner != wc {
		g.mu.Unlock()
		return nil, false, hub.Errorf(hub.ECONFLICT, "the Thing %q is registered by another WebSocket connection", id)
	}
	g.agents[id] = wc
	g.mu.Unlock()
	// A Thing this connection registered that is gone since (an admin
	// deleted it, its registration expired) is no longer its own: its
	// return is a new Thing's join, decided by the join mode.
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if owner == wc && wc.things[id] {
		if _, err := g.reg.Get(id); hub.ErrorCode(err) == hub.ENOTFOUND {
			delete(wc.things, id)
			delete(wc.members, id)
		}
	}
	return owner, owner == wc && wc.members[id], nil
}

// await makes w the waiter of id's registration on this connection
// before the join is decided, so that an approval that comes at once finds
// it (join mode approve); old is the waiter it replaces.
func (wc *wsConn) await(m *wsMessage, id string) (w, old *hub.JoinWaiter) {
	w = &hub.JoinWaiter{Live: func() bool { return wc.ctx.Err() == nil }}
	w.Decided = func(_ string, err error) {
		// Called under the join policy's lock: answer on a goroutine.
		go wc.decided(m, id, w, err)
	}
	wc.mu.Lock()
	old = wc.parked[id]
	wc.parked[id] = w
	wc.mu.Unlock()
	return w, old
}

// unawait puts back the waiter w replaced: the registration was not
// parked.
func (wc *wsConn) unawait(id string, w, old *hub.JoinWaiter) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.parked[id] != w {
		return
	}
	if old != nil {
		wc.parked[id] = old
	} else {
		delete(wc.parked, id)
	}
}

// decided finishes a parked registration once an admin approved (err nil:
// the Thing is registered) or denied it.
func (wc *wsConn) decided(m *wsMessage, id string, w *hub.JoinWaiter, err error) {
	wc.mu.Lock()
	mine := wc.parked[id] == w
	if mine {
		delete(wc.parked, id)
	}
	wc.mu.Unlock()
	if !mine {
		return // superseded by a later registerThing of the same id
	}
	if err != nil {
		wc.release(id, false)
		wc.replyError(m, err)
		return
	}
	wc.registered(m, id, true) // a new Thing, created for this connection
}

// registered marks id as this connection's Thing, online, and acknowledges
// its registration; proven makes it a member Thing of this connection
// (wsConn.members).
func (wc *wsConn) registered(m *wsMessage, id string, proven bool) {
	g := wc.g
	ctx, cancel := context.WithTimeout(wc.ctx, 10*time.Second)
	defer cancel()
	wc.mu.Lock()
	wc.things[id] = true
	if proven {
		wc.members[id] = true
	}
	if wc.who.Kind == hub.Anonymous {
		// An agent is an authenticated Thing once the hub accepted its
		// registration on this connection (PROTOCOL §5, "Access").
		wc.who = hub.ThingPrincipal(id, wc.remote, false) // Admitted: read at each decision (allow)
	}
	if wc.media == "" {
		wc.media = m.Media
	}
	wc.mu.Unlock()
	if err := g.reg.SetPresence(ctx, id, hub.PresenceOnline, hub.SourceWS); err != nil {
		wc.log.Warn("cannot record presence", "id", id, "err", err)
	}
	if g.publisher != nil {
		if err := g.publisher.PublishPresence(id, hub.PresenceOnline); err != nil {
			wc.log.Debug("cannot publish presence", "id", id, "err", err)
		}
	}
	wc.log.Info("websocket agent registered", "id", id)
	wc.ack(m, "registered")
	wc.sendCredentialsOf(id) // its inbox (credentials.go)
}

// release undoes the reservation of id unless it was this connection's
// before.
func (wc *wsConn) release(id string, kept bool) {
	if kept {
		return
	}
	wc.g.mu.Lock()
	if wc.g.agents[id] == wc {
		delete(wc.g.agents, id)
	}
	wc.g.mu.Unlock()
}

// unregister runs when the connection has closed: its Things go offline
// (they stay registered) and its pending requests fail.
func (wc *wsConn) unregister() {
	g := wc.g
	wc.groups.closeAll()
	wc.mu.Lock()
	ids := make([]string, 0, len(wc.things))
	for id := range wc.things {
		ids = append(ids, id)
	}
	parked := wc.parked
	wc.parked = map[string]*hub.JoinWaiter{}
	wc.mu.Unlock()
	g.mu.Lock()
	for _, id := range ids {
		if g.agents[id] == wc {
			delete(g.agents, id)
		}
	}
	for id := range parked {
		if g.agents[id] == wc {
			delete(g.agents, id)
		}
	}
	g.mu.Unlock()
	// Their joins stay pending: an approval registers them, and the agent
	// resumes its Thing when it comes back.
	for id, w := range parked {
		g.adm.Unwait(id, w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, id := range ids {
		if err := g.reg.SetPresence(ctx, id, hub.PresenceOffline, hub.SourceWS); err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
			wc.log.Warn("cannot record presence", "id", id, "err", err)
		}
		if g.publisher != nil {
			if err := g.publisher.PublishPresence(id, hub.PresenceOffline); err != nil {
				wc.log.Debug("cannot publish presence", "id", id, "err", err)
			}
		}
		wc.log.Info("websocket agent gone", "id", id)
	}
}

// fromAgent handles what an agent sends: replies to the hub's requests
// (by correlationId), and on its own events and property values, which
// go to every consumer through the publisher.
func (wc *wsConn) fromAgent(m *wsMessage) {
	if m.CorrelationID != "" {
		wc.mu.Lock()
		req := wc.pending[m.CorrelationID]
		wc.mu.Unlock()
		if req != nil {
			wc.route(req, m)
			return
		}
	}
	switch m.MessageType {
	case mtEvent, mtPropertyReading:
	case mtAcknowledgement, mtError, mtActionStatus:
		wc.log.Debug("dropping a reply nobody waits for", "type", m.MessageType, "correlationId", m.CorrelationID)
		return
	}
	wc.mu.Lock()
	own := wc.things[m.ThingID]
	wc.mu.Unlock()
	if !own {
		wc.replyError(m, hub.Errorf(hub.EFORBIDDEN, "only the agent that registered Thing %q on this connection may emit its values", m.ThingID))
		return
	}
	if m.Name == "" || !m.HasValue {
		wc.replyError(m, missing(m))
		return
	}
	data, err := hub.EncodeValue(m.Value, m.Media)
	if err == nil {
		if wc.g.publisher == nil {
			err = hub.Errorf(hub.EUNAVAILABLE, "the hub has no broker to carry values")
		} else if m.MessageType == mtEvent {
			err = wc.g.publisher.PublishEvent(m.ThingID, m.Name, data, m.Media)
		} else {
			err = wc.g.publisher.PublishProperty(m.ThingID, m.Name, data, m.Media)
		}
	}
	if err != nil {
		wc.replyError(m, err)
	}
}

// route passes an agent's reply to the request waiting for it; it never
// waits (it runs on the agent's read loop).
func (wc *wsConn) route(req *agentRequest, m *wsMessage) {
	ch := req.ch
	if agentFinal(req.op, m) {
		ch = req.final
	}
	select {
	case ch <- m:
	default:
		wc.log.Debug("dropping an agent reply", "type", m.MessageType)
	}
}

// agentFinal reports whether m ends a request of op.
func agentFinal(op hub.Op, m *wsMessage) bool {
	switch m.MessageType {
	case mtError, mtAcknowledgement, mtPropertyReading:
		return true
	case mtActionStatus:
		return op != hub.OpInvokeAction || m.Status == hub.StatusCompleted || m.Status == hub.StatusFailed ||
			(m.Status != hub.StatusPending && m.Status != hub.StatusRunning)
	}
	return false
}

// Deliver carries an interaction to the WebSocket agent that registered
// the Thing (hub.Transport): readproperty, writeproperty and invokeaction
// become requests on its socket in its encoding, answered by correlationId;
// observations and event subscriptions are served by the broker's streams,
// which carry what the agent emits.
func (g *Transport) Deliver(ctx context.Context, in hub.Interaction, emit func(hub.Result) error) error {
	if in.Op.Streaming() {
		if g.streams == nil {
			return hub.Errorf(hub.EUNAVAILABLE, "the hub has no broker to carry values of WebSocket agents")
		}
		return g.streams.Deliver(ctx, in, emit)
	}
	g.mu.Lock()
	wc := g.agents[in.ThingID]
	g.mu.Unlock()
	if wc == nil {
		return hub.Errorf(hub.EUNAVAILABLE, "Thing %q is not connected over WebSocket now", in.ThingID)
	}
	wc.mu.Lock()
	media := wc.media
	wc.mu.Unlock()
	accept := in.Accept
	if accept == "" {
		accept = in.ContentType
	}
	accept = lmos.MediaOf(accept)
	input, err := g.reg.Decoder().Transcode(in.Input, in.ContentType, media)
	if err != nil {
		return err
	}
	out := &wsOut{ThingID: in.ThingID, MessageID: uuid.NewString(), Traceparent: in.Traceparent, Tracestate: in.Tracestate}
	switch in.Op {
	case hub.OpReadProperty:
		out.MessageType, out.Name = lmos.WSReadProperty, in.Name
	case hub.OpWriteProperty:
		out.MessageType, out.Name, out.Value = lmos.WSWriteProperty, in.Name, rawValue(input)
	case hub.OpInvokeAction:
		out.MessageType, out.Action, out.Input = lmos.WSInvokeAction, in.Name, rawValue(input)
	default:
		return hub.Errorf(hub.EUNSUPPORTED, "the websocket transport cannot %s", in.Op)
	}
	req := &agentRequest{op: in.Op, ch: make(chan *wsMessage, agentReplyBuffer), final: make(chan *wsMessage, 1)}
	wc.mu.Lock()
	wc.pending[out.MessageID] = req
	wc.mu.Unlock()
	defer func() {
		wc.mu.Lock()
		delete(wc.pending, out.MessageID)
		wc.mu.Unlock()
	}()
	if !wc.enqueue(out, media, refuseIfFull) {
		return hub.Errorf(hub.EUNAVAILABLE, "Thing %q is busy or not connected over WebSocket now", in.ThingID)
	}
	pass := func(m *wsMessage) (bool, error) {
		res := agentResult(in.Op, m, accept)
		return res.Final(), emit(res)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wc.ctx.Done():
			return hub.Errorf(hub.EUNAVAILABLE, "Thing %q disconnected", in.ThingID)
		case m := <-req.ch:
			if done, err := pass(m); done || err != nil {
				return err
			}
		case final := <-req.final:
			return hub.PassFinal(req.ch, final, pass)
		}
	}
}

// reported is the failure an agent reported (hub.ThingFailed).
func reported(m *wsMessage) hub.Result {
	p := hub.ThingFailed(m.Problem)
	return hub.Result{Status: hub.StatusFailed, Problem: &p}
}

// agentResult turns an agent's reply into a Result in the consumer's
// encoding. A value that cannot be carried, or a status outside the four,
// is a failure of the agent.
func agentResult(op hub.Op, m *wsMessage, accept string) hub.Result {
	failed := func(detail string) hub.Result {
		p := hub.ProblemOf(hub.Errorf(hub.EFAILED, "%s", detail))
		return hub.Result{Status: hub.StatusFailed, Problem: &p}
	}
	status := hub.StatusCompleted
	switch m.MessageType {
	case mtError:
		return reported(m)
	case mtActionStatus:
		status = m.Status
		switch status {
		case hub.StatusPending, hub.StatusRunning, hub.StatusCompleted:
		case hub.StatusFailed:
			return reported(m)
		default:
			return failed(fmt.Sprintf("the Thing answered with an unknown status %q", lmos.Truncate(status, 64)))
		}
	case mtAcknowledgement:
		return hub.Result{Status: hub.StatusCompleted, ContentType: accept}
	}
	if op == hub.OpWriteProperty || !m.HasValue {
		return hub.Result{Status: status, ContentType: accept}
	}
	data, err := hub.EncodeValue(m.Value, accept)
	if err != nil {
		return failed("the Thing sent a value the consumer's encoding cannot carry")
	}
	return hub.Result{Status: status, Data: data, ContentType: accept}
}
