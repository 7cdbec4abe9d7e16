package transporttest

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// agentBase is what both agents share: the suite's channels, a context
// that ends when the agent leaves, and the condition Leave waits for.
type agentBase struct {
	id      string
	ctx     context.Context
	leave   context.CancelFunc
	gone    func() bool
	hung    chan struct{}
	written chan []byte
}

func newAgentBase(id string, gone func() bool) agentBase {
	ctx, cancel := context.WithCancel(context.Background())
	return agentBase{id: id, ctx: ctx, leave: cancel, gone: gone, hung: make(chan struct{}, 16), written: make(chan []byte, 16)}
}

func (a *agentBase) Hung() <-chan struct{}  { return a.hung }
func (a *agentBase) Written() <-chan []byte { return a.written }

// waitGone waits until the hub has seen the agent leave.
func (a *agentBase) waitGone(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !a.gone() {
		if time.Now().After(deadline) {
			t.Fatalf("the hub did not see agent %s leave within %v", a.id, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mqttAgent is an MQTT agent as PROTOCOL §4 has it: it joins with the
// suite's TD, reconnects with the credentials the join issued, publishes
// its property retained and answers invocations on their Response Topic
// with the Correlation Data and an lmos-status user property.
type mqttAgent struct {
	agentBase
	c    *mqttclient.Client
	base string
}

// StartMQTTAgent joins Thing id through the broker at addr and serves it
// until the test ends; gone reports whether the hub has seen the agent
// leave (Leave waits for it).
func StartMQTTAgent(t *testing.T, addr, id string, gone func() bool) Agent {
	t.Helper()
	key := lmos.TopicKey(id)
	j := mqttclient.MustDial(t, addr, nil)
	creds := j.MustJoin(key, TD(id, "mqtt://hub/"+lmos.ThingsPrefix+key))
	j.Close()
	a := &mqttAgent{agentBase: newAgentBase(id, gone), c: mqttclient.MustDial(t, addr, mqttclient.WithCreds(creds.Username, creds.Password)),
		base: lmos.ThingsPrefix + key}
	a.c.MustSub(a.base + "/actions/+")
	a.c.MustSub(a.base + "/properties/" + PropertyLevel + "/set")
	a.c.MustPub(a.base+"/properties/"+PropertyLevel, []byte(LevelValue), 1, true)
	done := make(chan struct{})
	go a.serve(t, done)
	t.Cleanup(func() { a.leave(); a.c.Close(); <-done })
	return a
}

// serve answers what reaches the agent until it leaves.
func (a *mqttAgent) serve(t *testing.T, done chan struct{}) {
	defer close(done)
	for {
		var m *paho.Publish
		select {
		case m = <-a.c.Msgs:
		case <-a.c.C.Done():
			return
		case <-a.ctx.Done():
			return
		}
		if strings.HasSuffix(m.Topic, "/set") {
			a.written <- m.Payload
			continue
		}
		switch strings.TrimPrefix(m.Topic, a.base+"/actions/") {
		case ActionCount:
			n, _ := strconv.Atoi(string(m.Payload))
			a.reply(t, m, "pending", nil)
			for i := 1; i <= n; i++ {
				a.reply(t, m, "running", []byte(strconv.Itoa(i)))
			}
			a.reply(t, m, "completed", []byte(strconv.Itoa(n)))
		case ActionFail:
			a.reply(t, m, "failed", []byte(`{"type":"`+ProblemType+`","title":"Jammed","detail":"`+ProblemDetail+`"}`))
		case ActionHang:
			a.hung <- struct{}{}
		}
	}
}

func (a *mqttAgent) reply(t *testing.T, req *paho.Publish, status string, payload []byte) {
	if req.Properties == nil || req.Properties.ResponseTopic == "" {
		t.Errorf("invocation on %s without a Response Topic", req.Topic)
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, wait)
	defer cancel()
	_, err := a.c.C.Publish(ctx, &paho.Publish{Topic: req.Properties.ResponseTopic, QoS: 1, Payload: payload,
		Properties: &paho.PublishProperties{CorrelationData: req.Properties.CorrelationData, ContentType: lmos.MediaJSON,
			User: paho.UserProperties{{Key: lmos.StatusProperty, Value: status}}}})
	if err != nil && a.ctx.Err() == nil {
		t.Errorf("reply %s: %v", status, err)
	}
}

func (a *mqttAgent) Emit(t testing.TB, data []byte) {
	t.Helper()
	a.c.MustPub(a.base+"/events/"+EventTick, data, 1, false)
}

func (a *mqttAgent) Leave(t testing.TB) {
	t.Helper()
	a.leave()
	a.c.Close()
	a.waitGone(t)
}

// wsAgent is a WebSocket agent written against PROTOCOL §5: it registers
// the suite's TD with registerThing and answers the hub's requests by
// correlationId.
type wsAgent struct {
	agentBase
	c    *websocket.Conn
	acks chan map[string]any // replies to the agent's own messages
}

// StartWSAgent registers Thing id on the hub's WebSocket endpoint wsURL
// (ws://host:port/ws) and serves it until the test ends; gone reports
// whether the hub has seen the agent leave (Leave waits for it).
func StartWSAgent(t *testing.T, wsURL, id string, gone func() bool) Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"lmosprotocol"}})
	if err != nil {
		t.Fatalf("dial %s: %v", wsURL, err)
	}
	a := &wsAgent{agentBase: newAgentBase(id, gone), c: c, acks: make(chan map[string]any, 16)}
	done := make(chan struct{})
	go a.serve(t, done)
	t.Cleanup(func() { a.leave(); _ = c.Close(websocket.StatusNormalClosure, ""); <-done })
	var td map[string]any
	if err := json.Unmarshal(TD(id, "ws://hub/ws"), &td); err != nil {
		t.Fatal(err)
	}
	a.send(t, map[string]any{"messageType": "registerThing", "thingId": id, "td": td})
	select {
	case r := <-a.acks:
		if r["messageType"] != "acknowledgement" {
			t.Fatalf("registerThing: %v", r)
		}
	case <-time.After(wait):
		t.Fatal("registerThing: no reply")
	}
	return a
}

func (a *wsAgent) send(t testing.TB, m map[string]any) {
	if _, ok := m["messageId"]; !ok {
		m["messageId"] = uuid.NewString()
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Errorf("encode %v: %v", m, err)
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, wait)
	defer cancel()
	if err := a.c.Write(ctx, websocket.MessageText, b); err != nil && a.ctx.Err() == nil {
		t.Errorf("ws write: %v", err)
	}
}

// serve answers the hub's requests until the agent leaves; a frame of the
// hub that does not decode, or the hub closing the connection, fails the
// test.
func (a *wsAgent) serve(t *testing.T, done chan struct{}) {
	defer close(done)
	for {
		typ, b, err := a.c.Read(a.ctx)
		if err != nil {
			if a.ctx.Err() == nil {
				t.Errorf("the hub closed the agent's connection: %v", err)
			}
			return
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); typ != websocket.MessageText || err != nil {
			t.Errorf("undecodable frame from the hub (%v): %q", err, b)
			continue
		}
		answer := func(r map[string]any) {
			r["thingId"], r["correlationId"] = a.id, m["messageId"]
			a.send(t, r)
		}
		switch m["messageType"] {
		case "readProperty":
			v, _ := strconv.Atoi(LevelValue)
			answer(map[string]any{"messageType": "propertyReading", "name": m["name"], "value": v})
		case "writeProperty":
			v, _ := json.Marshal(m["value"])
			a.written <- v
			answer(map[string]any{"messageType": "acknowledgement"})
		case "invokeAction":
			a.invoke(m, answer)
		default:
			select {
			case a.acks <- m:
			default:
				t.Errorf("unexpected message from the hub: %v", m)
			}
		}
	}
}

func (a *wsAgent) invoke(m map[string]any, answer func(map[string]any)) {
	status := func(s string, extra map[string]any) {
		r := map[string]any{"messageType": "actionStatus", "action": m["action"], "status": s}
		for k, v := range extra {
			r[k] = v
		}
		answer(r)
	}
	switch m["action"] {
	case ActionCount:
		n, _ := m["input"].(float64)
		status("pending", nil)
		for i := 1; i <= int(n); i++ {
			status("running", map[string]any{"output": i})
		}
		status("completed", map[string]any{"output": int(n)})
	case ActionFail:
		status("failed", map[string]any{"error": map[string]any{"type": ProblemType, "title": "Jammed",
			"status": 500, "detail": ProblemDetail}})
	case ActionHang:
		a.hung <- struct{}{}
	}
}

func (a *wsAgent) Emit(t testing.TB, data []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	a.send(t, map[string]any{"messageType": "event", "thingId": a.id, "event": EventTick, "data": v})
}

func (a *wsAgent) Leave(t testing.TB) {
	t.Helper()
	a.leave()
	_ = a.c.Close(websocket.StatusNormalClosure, "")
	a.waitGone(t)
}
