package mqtt

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Group actions over MQTT 5 request/response (PROTOCOL §4.3, §7, §10
// "Group actions"): a PUBLISH to lmos/v1/hub/groups/{gid}/actions/{name}
// with Response Topic and Correlation Data invokes the action on every
// member that has it (hub.GroupActions). Each member's result goes to the
// Response Topic as a partial result (lmos-status running, user properties
// lmos-member and lmos-member-status, payload the JSON result object), then
// one final message (lmos-status completed, payload the JSON summary); a
// call refused as a whole gets one failed message with its problem. The
// request is consumed by the hub: no subscriber of lmos/v1/hub/# sees it.

// groupActionOf parses a group-action topic name: its group and action,
// each one level without wildcards.
func groupActionOf(topic string) (gid, action string, ok bool) {
	rest, ok := strings.CutPrefix(topic, lmos.TopicRoot+lmos.HubLevel+"/"+lmos.GroupsLevel+"/")
	if !ok {
		return "", "", false
	}
	gid, rest, _ = strings.Cut(rest, "/")
	action, ok = strings.CutPrefix(rest, "actions/")
	if !ok || gid == "" || action == "" || strings.ContainsAny(gid+action, "/+#") {
		return "", "", false
	}
	return gid, action, true
}

// groupAction runs a group action a client published (the ACL and the
// policy let it through: the operate right, as an invocation).
func (h *binding) groupAction(cl *mochi.Client, gid, action string, pk packets.Packet) (packets.Packet, error) {
	b := h.b
	replyTo, corr := pk.Properties.ResponseTopic, bytes.Clone(pk.Properties.CorrelationData)
	fail := func(err error) (packets.Packet, error) {
		b.countRefusalReason(hub.RefusalReason(err))
		b.log.Debug("group action refused", "client", cl.ID, "topic", pk.TopicName, "err", err)
		if replyTo != "" {
			b.publishGroupResult(replyTo, corr, hub.StatusFailed, nil, problemPayload(hub.ProblemOf(err), lmos.MediaJSON))
		}
		return pk, packets.CodeSuccessIgnore
	}
	ga := b.cfg.GroupActions
	if ga == nil {
		return fail(hub.Errorf(hub.EUNAVAILABLE, "group actions are not running"))
	}
	ct := lmos.MediaOf(pk.Properties.ContentType)
	var input []byte
	if len(pk.Payload) > 0 {
		if _, err := h.b.dec.DecodeValue(pk.Payload, ct); err != nil {
			return fail(err)
		}
		input = bytes.Clone(pk.Payload)
	}
	tp, _ := userProperty(pk, "traceparent")
	ts, _ := userProperty(pk, "tracestate")
	call, err := ga.Prepare(hub.GroupActionRequest{Group: gid, Action: action, Input: input, ContentType: ct,
		Accept: lmos.MediaJSON, Principal: h.principal(cl), Traceparent: tp, Tracestate: ts})
	if err != nil {
		return fail(err)
	}
	b.workers.Go(func() {
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		go func() { // a stopping broker ends the call at once
			select {
			case <-b.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		sum := call.Run(ctx, func(res hub.MemberResult) {
			if replyTo == "" {
				return // fire and forget (MQTT 3.1.1 cannot ask for results)
			}
			payload, _ := json.Marshal(lmos.GroupActionResult{Member: res.Member, Status: res.Status, Output: res.Output, Error: res.Problem})
			b.publishGroupResult(replyTo, corr, hub.StatusRunning, []packets.UserProperty{
				{Key: lmos.GroupMemberProperty, Val: res.Member}, {Key: lmos.GroupMemberStatusProperty, Val: res.Status}}, payload)
		})
		if replyTo != "" {
			payload, _ := json.Marshal(sum)
			b.publishGroupResult(replyTo, corr, hub.StatusCompleted, nil, payload)
		}
	})
	return pk, packets.CodeSuccessIgnore
}

// publishGroupResult publishes one message of a group action's answer
// (JSON) to the requester's Response Topic, at QoS 1 as every result.
func (b *Broker) publishGroupResult(replyTo string, corr []byte, status string, user []packets.UserProperty, payload []byte) {
	b.publishResult(replyTo, corr, lmos.MediaJSON, status, payload, user...)
}
