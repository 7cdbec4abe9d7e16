package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// rawClient is an anonymous MQTT 5 client that records what it receives.
type rawClient struct {
	c    *paho.Client
	mu   sync.Mutex
	msgs []*paho.Publish
}

func (h *testHub) raw(clientID string) *rawClient {
	h.t.Helper()
	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &rawClient{}
	r.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			r.mu.Lock()
			r.msgs = append(r.msgs, pr.Packet)
			r.mu.Unlock()
			return true, nil
		}}})
	ctx := ctxT(h.t, 5*time.Second)
	if _, err := r.c.Connect(ctx, &paho.Connect{CleanStart: true, ClientID: clientID, KeepAlive: 30}); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = r.c.Disconnect(&paho.Disconnect{}) })
	return r
}

func (r *rawClient) received() []*paho.Publish {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*paho.Publish(nil), r.msgs...)
}

func (r *rawClient) publish(t *testing.T, topic string, payload []byte, responseTopic string, corr []byte, status string) {
	t.Helper()
	props := &paho.PublishProperties{ContentType: JSON, ResponseTopic: responseTopic, CorrelationData: corr}
	if status != "" {
		props.User.Add(statusProperty, status)
	}
	if _, err := r.c.Publish(ctxT(t, 5*time.Second), &paho.Publish{Topic: topic, Payload: payload, QoS: 1, Properties: props}); err != nil {
		t.Fatal(err)
	}
}

// tryPublish publishes a request with a Response Topic; false when the
// broker refused it.
func (r *rawClient) tryPublish(t *testing.T, topic string, payload []byte, responseTopic string, corr []byte) bool {
	t.Helper()
	props := &paho.PublishProperties{ContentType: JSON, ResponseTopic: responseTopic, CorrelationData: corr}
	_, err := r.c.Publish(ctxT(t, 5*time.Second), &paho.Publish{Topic: topic, Payload: payload, QoS: 1, Properties: props})
	if err != nil {
		t.Logf("the broker refused a request with Response Topic %q: %v", responseTopic, err)
	}
	return err == nil
}

// A requester cannot make the agent publish its results outside a reply
// inbox: not on the agent's td topic (an empty result would deregister
// it), not on its events. The request still runs, fire-and-forget.
func TestResponseTopicOnlyInReplyInboxes(t *testing.T) {
	h := startHub(t)
	srv := h.connect("urn:test:reflect", nil)
	writes := make(chan string, 8)
	srv.HandleWrite("level", func(ctx context.Context, v Value) error { writes <- string(v.Payload); return nil })
	srv.HandleAction("add", func(ctx context.Context, in Input) (any, error) { return 42, nil })
	evil := h.raw("evil")
	if _, err := evil.c.Subscribe(ctxT(t, 5*time.Second), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: "lmos/v1/things/urn:test:reflect/events/alarm", QoS: 1},
		{Topic: "lmos/v1/clients/evil/#", QoS: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	base := "lmos/v1/things/urn:test:reflect/"
	bad := []string{base + "td", base + "events/alarm", base + "status", "lmos/v1/clients/", "lmos/v1/clients//x", "lmos/v1/hub/events"}
	// The library checks by itself, whatever the broker lets through.
	for _, rt := range bad {
		if _, r := mqttOf(srv).replierFor(&paho.Publish{Topic: base + "actions/add", Properties: &paho.PublishProperties{ResponseTopic: rt}}, JSON); r.topic != "" {
			t.Errorf("the agent would reply on %q", rt)
		}
	}
	if _, r := mqttOf(srv).replierFor(&paho.Publish{Topic: base + "actions/add", Properties: &paho.PublishProperties{ResponseTopic: "lmos/v1/clients/c/r"}}, JSON); r.topic != "lmos/v1/clients/c/r" {
		t.Errorf("the agent would not reply in an inbox: %q", r.topic)
	}
	for _, rt := range bad {
		// A broker may refuse such a request itself (lmos-hub does, PUBACK
		// 0x87); one that forwards it must not get a reflected result.
		if !evil.tryPublish(t, base+"properties/level/set", []byte(`1`), rt, []byte("c")) {
			continue
		}
		select {
		case <-writes:
		case <-time.After(5 * time.Second):
			t.Fatalf("the write with Response Topic %q did not run", rt)
		}
		evil.tryPublish(t, base+"actions/add", []byte(`{}`), rt, []byte("c"))
	}
	// A reply inbox still gets its result, after all of the above.
	evil.publish(t, base+"actions/add", []byte(`{}`), "lmos/v1/clients/evil/r", []byte("ok"), "")
	waitFor(t, 5*time.Second, "the reply in the inbox", func() bool {
		for _, m := range evil.received() {
			if m.Topic == "lmos/v1/clients/evil/r" && string(m.Properties.CorrelationData) == "ok" {
				return true
			}
		}
		return false
	})
	for _, m := range evil.received() {
		if m.Topic != "lmos/v1/clients/evil/r" {
			t.Errorf("the agent published a result on %s: %q", m.Topic, m.Payload)
		}
	}
	if _, err := h.reg.Get(srv.ID()); err != nil {
		t.Fatalf("the agent was deregistered: %v", err)
	}
	// Presence is applied asynchronously by the hub: wait for it.
	waitFor(t, 5*time.Second, "presence online", func() bool { return h.presence(srv.ID()) == "online" })
}

// A flood of requests runs at most 64 handlers at once; the rest are
// answered 503 in their reply inbox.
func TestHandlerConcurrencyCapped(t *testing.T) {
	h := startHub(t)
	srv := h.connect("urn:test:flood", nil)
	release := make(chan struct{})
	var running, peak atomic.Int64
	srv.HandleAction("add", func(ctx context.Context, in Input) (any, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		return 1, nil
	})
	cons := h.raw("flooder")
	if _, err := cons.c.Subscribe(ctxT(t, 5*time.Second), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "lmos/v1/clients/flooder/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	const n = maxHandlers + 6
	for i := range n {
		cons.publish(t, "lmos/v1/things/urn:test:flood/actions/add", []byte(`{}`), "lmos/v1/clients/flooder/r", fmt.Appendf(nil, "%d", i), "")
	}
	// Requests without a reply inbox beyond the cap are dropped.
	for range 20 {
		cons.publish(t, "lmos/v1/things/urn:test:flood/actions/add", []byte(`{}`), "", nil, "")
	}
	waitFor(t, 5*time.Second, "6 busy replies", func() bool { return len(cons.received()) >= n-maxHandlers })
	for _, m := range cons.received() {
		var p Problem
		if m.Properties.User.Get(statusProperty) != StatusFailed || (Value{Payload: m.Payload, ContentType: JSON}).Decode(&p) != nil ||
			p.Status != http.StatusServiceUnavailable || !strings.HasSuffix(p.Type, "#unavailable") {
			t.Errorf("busy reply %s %q", m.Properties.User.Get(statusProperty), m.Payload)
		}
	}
	// The refusals can arrive before every accepted handler has started.
	waitFor(t, 5*time.Second, "the accepted handlers running", func() bool { return running.Load() == maxHandlers })
	close(release)
	waitFor(t, 5*time.Second, "every accepted request answered", func() bool { return len(cons.received()) >= n })
	if p := peak.Load(); p > maxHandlers {
		t.Fatalf("%d handlers ran at once", p)
	}
	// Slots are given back: the agent serves again.
	cli := h.connect("urn:test:flood-client", nil)
	if _, err := cli.Invoke(ctxT(t, 5*time.Second), srv.ID(), "add", nil); err != nil {
		t.Fatal(err)
	}
}

// WriteProperty does not wait for an acknowledgement (agents do not
// acknowledge writes): it returns once the broker took the value. WithAck
// waits for the writing agent's result.
func TestWritePropertyDoesNotWaitForAck(t *testing.T) {
	h := startHub(t)
	srv := h.connect("urn:test:writee", nil)
	release := make(chan struct{})
	got := make(chan string, 4)
	srv.HandleWrite("level", func(ctx context.Context, v Value) error {
		got <- string(v.Payload)
		<-release
		return nil
	})
	cli := h.connect("urn:test:writer", nil)
	start := time.Now()
	if err := cli.WriteProperty(ctxT(t, 3*time.Second), srv.ID(), "level", 7); err != nil {
		t.Fatalf("WriteProperty: %v after %v", err, time.Since(start))
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("WriteProperty took %v", d)
	}
	if v := <-got; v != "7" {
		t.Fatalf("the agent got %q", v)
	}
	// Nobody subscribed: the broker still takes it.
	if err := cli.WriteProperty(ctxT(t, 3*time.Second), "urn:test:nobody", "x", 1); err != nil {
		t.Fatal(err)
	}
	// WithAck waits for the handler.
	done := make(chan error, 1)
	go func() { done <- cli.WriteProperty(ctxT(t, 5*time.Second), srv.ID(), "level", 8, WithAck()) }()
	<-got
	select {
	case err := <-done:
		t.Fatalf("WithAck returned before the handler did: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A result whose lmos-status is none of the four is a failure of the
// agent, as the hub treats it; a result without lmos-status is completed.
func TestUnknownStatusIsFailure(t *testing.T) {
	h := startHub(t)
	cli := h.connect("urn:test:asker", nil)
	responder := h.raw("responder")
	silentAgent(h) // subscribes, so the hub does not answer the requests itself
	for _, c := range []struct {
		status string // "-": no lmos-status
		want   int    // problem status, 0: success
	}{{"weird", 502}, {" completed", 502}, {"-", 0}, {StatusCompleted, 0}} {
		res := make(chan error, 1)
		go func() {
			_, err := cli.Invoke(ctxT(t, 5*time.Second), "urn:test:silent", "add", nil)
			res <- err
		}()
		var corr string
		waitFor(t, 5*time.Second, "the request pending", func() bool {
			l := mqttOf(cli)
			l.mu.Lock()
			defer l.mu.Unlock()
			for k := range l.pending {
				corr = k
				return true
			}
			return false
		})
		status := c.status
		if status == "-" {
			status = ""
		}
		responder.publish(t, mqttOf(cli).inbox+"replies", []byte(`1`), "", []byte(corr), status)
		err := <-res
		var p *Problem
		switch {
		case c.want == 0 && err != nil:
			t.Errorf("%q: %v", c.status, err)
		case c.want != 0 && (!errors.As(err, &p) || p.Status != c.want || !strings.HasSuffix(p.Type, "#failed")):
			t.Errorf("%q: %v (%+v)", c.status, err, p)
		}
	}
	if p := NewProblem(http.StatusGatewayTimeout, ""); !strings.HasSuffix(p.Type, "#timeout") {
		t.Errorf("504: %s", p.Type)
	}
}
