package mqtt

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/google/uuid"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The broker is the hub's transport to MQTT agents (PROTOCOL §4.3).
var _ hub.Transport = (*Broker)(nil)

// statusProperty is the MQTT 5 user property that carries a result's status.
const statusProperty = lmos.StatusProperty

// replyBuffer is how many intermediate results of one invocation may wait
// for the consumer; beyond it they are dropped (and counted). The final
// result has a slot of its own: delivering a reply never waits, since it
// runs on the agent's connection goroutine.
const replyBuffer = 32

// inboxPrefix starts the hub's reply inbox, lmos/v1/clients/inline/{hub}/r/:
// results of the invocations it makes on behalf of consumers arrive on
// {inbox}{request uuid}. {hub} is the start of the hub's id, so that replies
// stay routable between bridged hubs. No network client may take the
// inline client's id (OnConnectAuthenticate), so no one else can read it.
const inboxPrefix = lmos.ClientsPrefix + mochi.InlineClientId + "/"

// replies routes results arriving in the inbox to the invocations waiting
// for them. One inline subscription (made by Serve) serves all of them.
type replies struct {
	mu     sync.Mutex
	inbox  string            // lmos/v1/clients/inline/{hub}/r/
	routes map[string]*route // by request uuid
}

// route is one invocation waiting for its results.
type route struct {
	corr        []byte
	contentType string          // the agent's form content type: the fallback
	ch          chan hub.Result // intermediate results
	final       chan hub.Result // the final result (capacity 1)
	dropped     atomic.Int64    // intermediate results dropped
}

// subID numbers the inline subscriptions of streams; 1 is the inbox, 2
// the status topics (delayed wills).
var subID atomic.Int64

const (
	inboxSubID = 1
	willSubID  = 2
)

func init() { subID.Store(willSubID) }

// serveReplies subscribes the inbox.
func (b *Broker) serveReplies() error {
	b.replies.mu.Lock()
	b.replies.routes = make(map[string]*route)
	b.replies.inbox = inboxPrefix + b.hubSegment() + "/r/"
	inbox := b.replies.inbox
	b.replies.mu.Unlock()
	if err := b.server.Subscribe(inbox+"+", inboxSubID, b.onReply); err != nil {
		return fmt.Errorf("cannot subscribe the hub's reply inbox: %w", err)
	}
	return nil
}

// hubSegment is the topic level naming this hub in its reply inbox, so
// replies stay routable once hubs are bridged: the first 12 letters and
// digits of Config.HubID, else of a random UUID.
func (b *Broker) hubSegment() string {
	id := b.cfg.HubID
	seg := make([]byte, 0, 12)
	for i := 0; i < len(id) && len(seg) < cap(seg); i++ {
		if c := id[i]; c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			seg = append(seg, c)
		}
	}
	if len(seg) < 8 {
		return strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	}
	return string(seg)
}

// ReplyInbox returns the topic prefix of the hub's reply inbox,
// lmos/v1/clients/inline/{hub}/r/ ("" before Serve).
func (b *Broker) ReplyInbox() string {
	b.replies.mu.Lock()
	defer b.replies.mu.Unlock()
	return b.replies.inbox
}

// onReply runs on the publishing agent's connection goroutine: it never
// waits for the consumer. Intermediate results beyond replyBuffer are
// dropped, the final one takes its own slot, and replies after the final
// one are dropped.
func (b *Broker) onReply(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
	b.replies.mu.Lock()
	key, ok := strings.CutPrefix(pk.TopicName, b.replies.inbox)
	rt := b.replies.routes[key]
	b.replies.mu.Unlock()
	if !ok || rt == nil || !bytes.Equal(pk.Properties.CorrelationData, rt.corr) {
		b.log.Debug("dropping a reply nobody waits for", "topic", pk.TopicName)
		return
	}
	status, hasStatus := userProperty(pk, statusProperty)
	res := parseReply(b.dec, pk.Payload, pk.Properties.ContentType, rt.contentType, status, hasStatus)
	ch := rt.ch
	if res.Final() {
		ch = rt.final
	}
	select {
	case ch <- res:
	default:
		if !res.Final() {
			rt.dropped.Add(1) // a slow consumer loses progress reports, never the outcome
		} else {
			b.log.Debug("dropping a reply after the final one", "topic", pk.TopicName)
		}
	}
}

func userProperty(pk packets.Packet, key string) (string, bool) {
	for _, p := range pk.Properties.User {
		if p.Key == key {
			return p.Val, true
		}
	}
	return "", false
}

// parseReply reads one reply of an agent (PROTOCOL §4.3): its status from
// lmos-status (absent: completed), its data in contentType (absent: the
// form's fallback), and for failed its problem object. Data stays encoded
// as the agent sent it; ContentType says how. A status outside the four is
// a failure of the agent.
func parseReply(dec hub.Decoder, payload []byte, contentType, fallback string, status string, hasStatus bool) hub.Result {
	if contentType == "" {
		contentType = fallback
	}
	ct := lmos.MediaOf(contentType)
	if !hasStatus {
		status = hub.StatusCompleted
	}
	switch status {
	case hub.StatusPending, hub.StatusRunning, hub.StatusCompleted:
		return hub.Result{Status: status, Data: payload, ContentType: ct}
	case hub.StatusFailed:
		return hub.Result{Status: hub.StatusFailed, Problem: decodeProblem(dec, payload, ct)}
	}
	return hub.Result{Status: hub.StatusFailed, Problem: agentProblem(fmt.Sprintf("the Thing answered with an unknown %s %q", statusProperty, lmos.Truncate(status, 64)))}
}

// decodeProblem reads the problem object of a failed result (JSON or CBOR)
// into the problem of hub.ThingFailed; a payload that is no object is
// replaced.
func decodeProblem(dec hub.Decoder, payload []byte, contentType string) *lmos.Problem {
	var obj map[string]any
	if len(payload) > 0 {
		v, err := dec.DecodeValue(payload, contentType)
		var ok bool
		if obj, ok = v.(map[string]any); err != nil || !ok {
			return agentProblem(hub.ThingFailure + " without a problem object")
		}
	}
	p := hub.ThingFailed(obj)
	return &p
}

func agentProblem(detail string) *lmos.Problem {
	p := hub.ProblemOf(hub.Errorf(hub.EFAILED, "%s", detail))
	return &p
}

// Deliver carries an interaction to an MQTT agent (hub.Transport):
// invokeaction publishes the input with a Response Topic in the hub's inbox
// and passes on every result; readproperty returns the retained value;
// writeproperty publishes to …/set; observeproperty and subscribeevent
// pass on every publish until ctx ends. Payloads are transcoded between
// the consumer's encoding and the agent's.
func (b *Broker) Deliver(ctx context.Context, in hub.Interaction, emit func(hub.Result) error) error {
	if err := b.Err(); err != nil {
		return err
	}
	base := lmos.ThingsPrefix + lmos.TopicKey(in.ThingID)
	agentCT := formContentType(in)
	accept := in.Accept
	if accept == "" {
		accept = in.ContentType
	}
	accept = lmos.MediaOf(accept)
	// out transcodes a value of the agent to the consumer's encoding.
	out := func(res hub.Result) hub.Result {
		if res.Status == hub.StatusFailed {
			return res
		}
		data, err := b.dec.Transcode(res.Data, res.ContentType, accept)
		if err != nil {
			p := agentProblem("the Thing sent a payload that is not valid " + res.ContentType)
			return hub.Result{Status: hub.StatusFailed, Problem: p}
		}
		res.Data, res.ContentType = data, accept
		return res
	}
	switch in.Op {
	case hub.OpReadProperty:
		topic := base + "/properties/" + in.Name
		msgs := b.server.Topics.Messages(topic)
		if len(msgs) == 0 || len(msgs[0].Payload) == 0 {
			return hub.Errorf(hub.EUNAVAILABLE, "Thing %q has published no value of property %q", in.ThingID, in.Name)
		}
		ct := msgs[0].Properties.ContentType
		if ct == "" {
			ct = agentCT
		}
		return emit(out(hub.Result{Status: hub.StatusCompleted, Data: msgs[0].Payload, ContentType: lmos.MediaOf(ct)}))
	case hub.OpWriteProperty:
		topic := base + "/properties/" + in.Name + "/set"
		if err := b.publishInput(topic, in, agentCT, nil); err != nil {
			return err
		}
		return emit(hub.Result{Status: hub.StatusCompleted, ContentType: accept})
	case hub.OpInvokeAction:
		return b.invoke(ctx, base+"/actions/"+in.Name, in, agentCT, out, emit)
	case hub.OpObserveProperty:
		return b.stream(ctx, base+"/properties/"+in.Name, agentCT, out, emit)
	case hub.OpSubscribeEvent:
		return b.stream(ctx, base+"/events/"+in.Name, agentCT, out, emit)
	}
	return hub.Errorf(hub.EUNSUPPORTED, "the mqtt transport cannot %s", in.Op)
}

// publishInput transcodes the consumer's input to the agent's encoding and
// publishes it at QoS 1, with the reply properties of props if any. Nobody
// subscribed to topic means nobody serves it: EUNAVAILABLE.
func (b *Broker) publishInput(topic string, in hub.Interaction, agentCT string, props *packets.Properties) error {
	if b.Subscribers(topic) == 0 {
		return hub.Errorf(hub.EUNAVAILABLE, "Thing %q does not serve %q over mqtt now (no subscriber)", in.ThingID, in.Name)
	}
	payload, err := b.dec.Transcode(in.Input, in.ContentType, agentCT)
	if err != nil {
		return err
	}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   topic,
		Payload:     payload,
		PacketID:    1,
	}
	if props != nil {
		pk.Properties = *props
	}
	pk.Properties.ContentType = agentCT
	// The consumer's W3C trace context, as user properties.
	if in.Traceparent != "" {
		pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: "traceparent", Val: in.Traceparent})
		if in.Tracestate != "" {
			pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: "tracestate", Val: in.Tracestate})
		}
	}
	if err := b.server.InjectPacket(b.inline, pk); err != nil {
		return fmt.Errorf("cannot publish to %s: %w", topic, err)
	}
	return nil
}

// invoke publishes an action's input and passes on its results until the
// final one or ctx's end; the route is removed in every case.
func (b *Broker) invoke(ctx context.Context, topic string, in hub.Interaction, agentCT string,
	out func(hub.Result) hub.Result, emit func(hub.Result) error) error {
	id := uuid.New()
	key := id.String()
	rt := &route{corr: id[:], contentType: agentCT, ch: make(chan hub.Result, replyBuffer), final: make(chan hub.Result, 1)}
	b.replies.mu.Lock()
	b.replies.routes[key] = rt
	inbox := b.replies.inbox
	b.replies.mu.Unlock()
	defer func() {
		b.replies.mu.Lock()
		delete(b.replies.routes, key)
		b.replies.mu.Unlock()
		if n := rt.dropped.Load(); n > 0 {
			b.log.Info("dropped intermediate results for a slow consumer", "topic", topic, "dropped", n)
		}
	}()
	props := &packets.Properties{ResponseTopic: inbox + key, CorrelationData: rt.corr}
	if err := b.publishInput(topic, in, agentCT, props); err != nil {
		return err
	}
	// pass emits one result; done when it was the final one (an
	// intermediate result that does not decode is a failure, hence final).
	pass := func(res hub.Result) (done bool, err error) {
		res = out(res)
		if err := emit(res); err != nil {
			return true, err
		}
		return res.Final(), nil
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.stop:
			return hub.Errorf(hub.EUNAVAILABLE, "the mqtt broker is stopping")
		case res := <-rt.ch:
			if done, err := pass(res); done {
				return err
			}
		case final := <-rt.final:
			return hub.PassFinal(rt.ch, final, pass)
		}
	}
}

// streamBuffer is how many values of a stream may wait for a slow consumer;
// beyond it values are dropped, as QoS 0 would.
const streamBuffer = 64

// stream passes on every publish on topic (retained first) until ctx ends;
// the inline subscription is removed in every case.
func (b *Broker) stream(ctx context.Context, topic, agentCT string,
	out func(hub.Result) hub.Result, emit func(hub.Result) error) error {
	ch := make(chan hub.Result, streamBuffer)
	var dropped atomic.Int64
	id := int(subID.Add(1))
	handler := func(_ *mochi.Client, _ packets.Subscription, pk packets.Packet) {
		if len(pk.Payload) == 0 {
			return // a cleared retained value
		}
		ct := pk.Properties.ContentType
		if ct == "" {
			ct = agentCT
		}
		select {
		case ch <- hub.Result{Status: hub.StatusRunning, Data: pk.Payload, ContentType: lmos.MediaOf(ct)}:
		default:
			dropped.Add(1)
		}
	}
	// Subscribe first, then say "subscribed" (pending), as the Transport
	// contract asks: a value published after the pending result is never
	// missed. The retained value (observeproperty) arrives inside Subscribe
	// and waits in ch, so it still follows the pending result.
	if err := b.server.Subscribe(topic, id, handler); err != nil {
		return fmt.Errorf("cannot subscribe %s: %w", topic, err)
	}
	b.streams.Add(1)
	defer func() {
		if err := b.server.Unsubscribe(topic, id); err != nil {
			b.log.Warn("cannot unsubscribe a stream", "topic", topic, "err", err)
		}
		b.streams.Add(-1)
		if n := dropped.Load(); n > 0 {
			b.log.Debug("dropped stream values for a slow consumer", "topic", topic, "dropped", n)
		}
	}()
	if err := emit(hub.Result{Status: hub.StatusPending}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.stop:
			return hub.Errorf(hub.EUNAVAILABLE, "the mqtt broker is stopping")
		case res := <-ch:
			res = out(res)
			if res.Status == hub.StatusFailed {
				b.log.Debug("dropping a stream value that does not decode", "topic", topic)
				continue
			}
			if err := emit(res); err != nil {
				return err
			}
		}
	}
}

// Subscribers counts the subscriptions (client, shared and the hub's own)
// that match a topic name.
func (b *Broker) Subscribers(topic string) int {
	s := b.server.Topics.Subscribers(topic)
	n := len(s.Subscriptions) + len(s.InlineSubscriptions)
	for _, g := range s.Shared {
		n += len(g)
	}
	return n
}

// Interactions reports the invocations waiting for results and the open
// streams: both are 0 when nothing is in progress.
func (b *Broker) Interactions() (invocations, streams int) {
	b.replies.mu.Lock()
	invocations = len(b.replies.routes)
	b.replies.mu.Unlock()
	return invocations, int(b.streams.Load())
}

// formContentType is the encoding the agent uses for the affordance: the
// contentType of its first mqtt form, else of its first form, else JSON
// (PROTOCOL §4.2).
func formContentType(in hub.Interaction) string {
	forms, _ := in.Affordance["forms"].([]any)
	first := ""
	for _, f := range forms {
		form, _ := f.(map[string]any)
		ct, _ := form["contentType"].(string)
		href, _ := form["href"].(string)
		if ct == "" {
			ct = lmos.MediaJSON
		}
		if strings.HasPrefix(href, "mqtt://") || strings.HasPrefix(href, "mqtts://") {
			return lmos.MediaOf(ct)
		}
		if first == "" {
			first = ct
		}
	}
	if first == "" {
		return lmos.MediaJSON
	}
	return lmos.MediaOf(first)
}
