package ws

import (
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// invokeGroupAction{group, action, input?} (PROTOCOL §5, §7): the action on
// every member of the group that has it (hub.GroupActions), one
// groupActionResult{group, action, member, status, output? | error?} per
// member as it answers, then an acknowledgement; a call refused as a
// whole (no right, unknown group, no member with the action) is one
// error. It takes one of the connection's interaction slots.
func (wc *wsConn) invokeGroupAction(m *wsMessage) {
	var bad []hub.FieldError
	if m.Group == "" {
		bad = append(bad, hub.FieldError{Field: "/" + lmos.MemberGroup, Description: "is required"})
	}
	if m.Name == "" {
		bad = append(bad, hub.FieldError{Field: "/" + lmos.MemberAction, Description: "is required"})
	}
	if bad != nil {
		wc.replyError(m, &hub.Error{Code: hub.EINVALID, Message: "the message lacks required members", Fields: bad})
		return
	}
	select {
	case wc.inFlight <- struct{}{}:
	default:
		wc.replyError(m, hub.Errorf(hub.ERATELIMIT, "too many interactions in progress on this connection (at most %d)", wsMaxInFlight))
		return
	}
	wc.wg.Go(func() {
		defer func() { <-wc.inFlight }()
		wc.groupAction(m)
	})
}

func (wc *wsConn) groupAction(m *wsMessage) {
	ga := wc.g.cfg.GroupActions
	if ga == nil {
		wc.replyError(m, hub.Errorf(hub.EUNAVAILABLE, "group actions are not running"))
		return
	}
	if err := wc.allow(hub.OpInvokeAction, nil); err != nil {
		wc.replyError(m, err)
		return
	}
	wc.mu.Lock()
	p := wc.who
	wc.mu.Unlock()
	call, err := ga.Prepare(hub.GroupActionRequest{Group: m.Group, Action: m.Name, Accept: m.Media, Principal: p,
		Traceparent: m.Traceparent, Tracestate: m.Tracestate})
	if err != nil {
		wc.replyError(m, err)
		return
	}
	defer call.Release()
	if m.HasValue {
		b, err := hub.EncodeValue(m.Value, m.Media)
		if err != nil {
			wc.replyError(m, err)
			return
		}
		call.SetInput(b, m.Media)
	}
	call.Run(wc.ctx, func(res hub.MemberResult) {
		out := reply(m, lmos.WSGroupActionResult)
		out.Group, out.Action, out.Member, out.Status, out.Output = m.Group, m.Name, res.Member, res.Status, rawValue(res.Output)
		if res.Problem != nil {
			p := *res.Problem
			p.Instance = "/ws"
			out.Error = &p
		}
		wc.enqueue(out, m.Media, closeIfFull)
	})
	wc.ack(m, lmos.StatusCompleted)
}
