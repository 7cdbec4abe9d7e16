package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse/paho.golang/paho"
)

// Group channels (PROTOCOL §7): lmos/v1/groups/{group}/{topic…}, open to
// the group's members only. Over MQTT the agent publishes and subscribes
// there itself; over WebSocket it sends publishGroup and subscribeGroup.
// Either way it reaches the members on every door.

// GroupMessage is one message on a group channel.
type GroupMessage struct {
	Group string
	// Topic is below lmos/v1/groups/{group}/.
	Topic string
	// Value is the payload. A payload that is neither JSON nor CBOR has
	// its own content type (application/octet-stream when it had none).
	Value
}

// GroupPublish publishes v (encoded in the agent's content type; a Value
// as it is) on the group's channel topic. A hub that refuses it (the
// agent is no member) answers a *Problem with status 403 (401 without an
// identity).
func (a *Agent) GroupPublish(ctx context.Context, group, topic string, v any) error {
	if err := checkGroupTopic(group, topic, false); err != nil {
		return err
	}
	if err := a.link.groupPublish(ctx, group, topic, v); err != nil {
		return fmt.Errorf("cannot publish on group %s: %w", group, err)
	}
	return nil
}

// GroupSubscribe calls fn with each message on the group's channel topics
// that filter matches (MQTT wildcards: '+' one level, '#' the rest), until
// stop. The subscription is made again after a reconnect; when the hub
// refuses it then (the membership ended), it is logged and stays idle.
func (a *Agent) GroupSubscribe(ctx context.Context, group, filter string, fn func(GroupMessage)) (stop func(), err error) {
	if err := checkGroupTopic(group, filter, true); err != nil {
		return nil, err
	}
	stop, err = a.link.groupSubscribe(ctx, group, filter, fn)
	if err != nil {
		return nil, fmt.Errorf("cannot subscribe to group %s: %w", group, err)
	}
	return stop, nil
}

// checkGroupTopic refuses what no hub takes: a group id that is not one
// topic level, an empty topic, wildcards in a topic to publish on.
func checkGroupTopic(group, topic string, filter bool) error {
	switch {
	case group == "" || strings.ContainsAny(group, "/+#"):
		return fmt.Errorf("invalid group id %q", group)
	case topic == "":
		return fmt.Errorf("a group channel topic is required")
	case !filter && strings.ContainsAny(topic, "+#"):
		return fmt.Errorf("cannot publish on %q: wildcards only subscribe", topic)
	}
	return nil
}

// groupWatch is one GroupSubscribe.
type groupWatch struct {
	group, filter string
	fn            func(GroupMessage)
}

// full is the MQTT filter of w.
func (w *groupWatch) full() string { return lmos.GroupTopic(w.group, w.filter) }

// MQTT

func (l *mqttLink) groupPublish(ctx context.Context, group, topic string, v any) error {
	ct := l.a.opts.ContentType
	payload, err := encode(v, ct)
	if err != nil {
		return err
	}
	ctx, cancel := l.a.withTimeout(ctx)
	defer cancel()
	cli, err := l.client(ctx)
	if err != nil {
		return err
	}
	pr, err := whileUp(ctx, cli, func(ctx context.Context) (*paho.PublishResponse, error) {
		return cli.Publish(ctx, &paho.Publish{Topic: lmos.GroupTopic(group, topic), Payload: payload, QoS: 1,
			Properties: &paho.PublishProperties{ContentType: ct}})
	})
	if pr != nil && pr.ReasonCode >= 0x80 {
		return refusedByBroker("PUBACK", pr.ReasonCode)
	}
	return err
}

// refusedByBroker is the problem of a refused PUBLISH or SUBSCRIBE.
func refusedByBroker(packet string, code byte) *Problem {
	if code == 0x87 {
		return NewProblem(http.StatusForbidden, fmt.Sprintf("the hub refused it (%s 0x87 Not authorized): the agent is no member of the group", packet))
	}
	return NewProblem(http.StatusBadGateway, fmt.Sprintf("the hub refused it (%s reason 0x%02x)", packet, code))
}

func (l *mqttLink) groupSubscribe(ctx context.Context, group, filter string, fn func(GroupMessage)) (func(), error) {
	ctx, cancel := l.a.withTimeout(ctx)
	defer cancel()
	w := &groupWatch{group: group, filter: filter, fn: fn}
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.mu.Lock()
	if l.groups == nil {
		l.groups = make(map[*groupWatch]bool)
	}
	first := !l.hasGroupFilter(w.full())
	l.groups[w] = true
	l.mu.Unlock()
	stop := func() { l.groupUnsubscribe(w) }
	if first {
		cli, err := l.client(ctx)
		if err == nil {
			err = subscribeGroup(ctx, cli, w.full())
		}
		if err != nil {
			l.mu.Lock()
			delete(l.groups, w)
			l.mu.Unlock()
			return nil, err
		}
	}
	return stop, nil
}

// hasGroupFilter reports whether a group watch subscribes full; under l.mu.
func (l *mqttLink) hasGroupFilter(full string) bool {
	for w := range l.groups {
		if w.full() == full {
			return true
		}
	}
	return false
}

func (l *mqttLink) groupUnsubscribe(w *groupWatch) {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.mu.Lock()
	delete(l.groups, w)
	last := !l.hasGroupFilter(w.full())
	cli := l.cli
	l.mu.Unlock()
	if last && cli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), l.a.opts.Timeout)
		defer cancel()
		if _, err := whileUp(ctx, cli, func(ctx context.Context) (*paho.Unsuback, error) {
			return cli.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{w.full()}})
		}); err != nil {
			l.a.log.Debug("cannot unsubscribe", "topic", w.full(), "err", err)
		}
	}
}

// subscribeGroup subscribes one group filter, a refusal as a *Problem.
func subscribeGroup(ctx context.Context, cli *paho.Client, full string) error {
	sa, err := whileUp(ctx, cli, func(ctx context.Context) (*paho.Suback, error) {
		return cli.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: full, QoS: 1}}})
	})
	if sa != nil && len(sa.Reasons) == 1 && sa.Reasons[0] >= 0x80 {
		return refusedByBroker("SUBACK", sa.Reasons[0])
	}
	if err != nil {
		return fmt.Errorf("cannot subscribe to %s: %w", full, err)
	}
	return nil
}

// resubscribeGroups subscribes the group filters again on a new
// connection, one by one: a refused one (the membership ended) is logged,
// not fatal to the connection.
func (l *mqttLink) resubscribeGroups(ctx context.Context, cli *paho.Client) {
	l.mu.Lock()
	seen := map[string]bool{}
	var filters []string
	for w := range l.groups {
		if f := w.full(); !seen[f] {
			seen[f] = true
			filters = append(filters, f)
		}
	}
	l.mu.Unlock()
	for _, f := range filters {
		if err := subscribeGroup(ctx, cli, f); err != nil {
			l.a.log.Warn("cannot subscribe to a group channel again", "filter", f, "err", err)
		}
	}
}

// receiveGroup passes a message on a group channel to the matching
// watches; false when topic is no group channel.
func (l *mqttLink) receiveGroup(p *paho.Publish) bool {
	group, ok := lmos.GroupOfTopic(p.Topic)
	if !ok {
		return false
	}
	rest := strings.TrimPrefix(p.Topic, lmos.GroupsPrefix+group+"/")
	l.mu.Lock()
	var fns []func(GroupMessage)
	for w := range l.groups {
		if w.group == group && lmos.MatchGroupFilter(w.filter, rest) {
			fns = append(fns, w.fn)
		}
	}
	l.mu.Unlock()
	m := GroupMessage{Group: group, Topic: rest, Value: Value{Payload: p.Payload, ContentType: contentTypeOr(p.Properties.ContentType, JSON)}}
	for _, fn := range fns {
		fn(m)
	}
	return true
}

// WebSocket

func (l *wsLink) groupPublish(ctx context.Context, group, topic string, v any) error {
	raw, err := l.payload(v)
	if err != nil {
		return err
	}
	if raw == nil {
		raw = json.RawMessage("null")
	}
	return l.request(ctx, map[string]any{lmos.MemberMessageType: lmos.WSPublishGroup, lmos.MemberGroup: group, lmos.MemberTopic: topic, lmos.MemberData: raw}, false,
		func(f wsFrame) (bool, error) { return f.typ() == lmos.WSAcknowledgement, nil })
}

func (l *wsLink) groupSubscribe(ctx context.Context, group, filter string, fn func(GroupMessage)) (func(), error) {
	w := &groupWatch{group: group, filter: filter, fn: fn}
	l.mu.Lock()
	if l.groups == nil {
		l.groups = make(map[*groupWatch]bool)
	}
	first := !l.hasGroupFilter(group, filter)
	l.groups[w] = true
	l.mu.Unlock()
	stop := func() {
		l.mu.Lock()
		delete(l.groups, w)
		last := !l.hasGroupFilter(group, filter)
		l.mu.Unlock()
		if last {
			ctx, cancel := context.WithTimeout(context.Background(), l.a.opts.Timeout)
			defer cancel()
			if err := l.groupRequest(ctx, w, false); err != nil {
				l.a.log.Debug("cannot unsubscribe a group channel", "group", group, "filter", filter, "err", err)
			}
		}
	}
	if first {
		if err := l.groupRequest(ctx, w, true); err != nil {
			l.mu.Lock()
			delete(l.groups, w)
			l.mu.Unlock()
			return nil, err
		}
	}
	return stop, nil
}

// hasGroupFilter reports whether a watch subscribes group's filter; under
// l.mu.
func (l *wsLink) hasGroupFilter(group, filter string) bool {
	for w := range l.groups {
		if w.group == group && w.filter == filter {
			return true
		}
	}
	return false
}

// groupRequest sends subscribeGroup (on) or unsubscribeGroup and waits
// for the acknowledgement.
func (l *wsLink) groupRequest(ctx context.Context, w *groupWatch, on bool) error {
	typ := lmos.WSUnsubscribeGroup
	if on {
		typ = lmos.WSSubscribeGroup
	}
	return l.request(ctx, map[string]any{lmos.MemberMessageType: typ, lmos.MemberGroup: w.group, lmos.MemberTopic: w.filter}, on,
		func(f wsFrame) (bool, error) { return f.typ() == lmos.WSAcknowledgement, nil })
}

// restoreGroups subscribes the group channels again after a reconnect.
func (l *wsLink) restoreGroups() {
	l.mu.Lock()
	seen := map[string]bool{}
	var ws []*groupWatch
	for w := range l.groups {
		if k := w.group + "\x00" + w.filter; !seen[k] {
			seen[k] = true
			ws = append(ws, w)
		}
	}
	l.mu.Unlock()
	for _, w := range ws {
		go func() {
			if err := l.groupRequest(l.a.ctx, w, true); err != nil {
				l.a.log.Warn("cannot subscribe to a group channel again", "group", w.group, "filter", w.filter, "err", err)
			}
		}()
	}
}

// dispatchGroup passes a groupMessage to the matching watches. Data that
// is neither JSON nor CBOR arrives as bytes (base64 in JSON) with its
// content type.
func (l *wsLink) dispatchGroup(f wsFrame) {
	group, topic := f.str(lmos.MemberGroup), f.str(lmos.MemberTopic)
	v, _ := f.value(lmos.MemberData)
	if ct := f.str(lmos.MemberContentType); ct != "" && lmos.MediaOf(ct) == lmos.MediaJSON && !isJSONType(ct) {
		var b []byte
		if err := v.Decode(&b); err != nil {
			l.a.log.Debug("undecodable group message", "group", group, "topic", topic, "err", err)
			return
		}
		v = Value{Payload: b, ContentType: ct}
	}
	l.mu.Lock()
	var fns []func(GroupMessage)
	for w := range l.groups {
		if w.group == group && lmos.MatchGroupFilter(w.filter, topic) {
			fns = append(fns, w.fn)
		}
	}
	l.mu.Unlock()
	m := GroupMessage{Group: group, Topic: topic, Value: v}
	for _, fn := range fns {
		fn(m)
	}
}

// isJSONType reports whether a content type is JSON (or +json).
func isJSONType(ct string) bool {
	mt := lmos.MediaType(ct)
	return mt == lmos.MediaJSON || strings.HasSuffix(mt, "+json")
}
