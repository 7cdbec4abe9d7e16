package mqtt

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/internal/transporttest"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The broker passes the behaviour suite every hub.Transport passes, with a
// paho agent that joined over MQTT on the other side.
func TestBrokerIsATransport(t *testing.T) {
	transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
		e := newEnv(t, nil)
		id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000a1"
		a := startSuiteAgent(t, e, id)
		return transporttest.Env{
			Transport: e.b,
			Registry:  e.reg,
			ThingID:   id,
			Agent:     a,
			Idle: func() (bool, string) {
				inv, streams := e.b.Interactions()
				return inv == 0 && streams == 0, fmt.Sprintf("%d invocations, %d streams", inv, streams)
			},
		}
	})
}

// suiteAgent is an MQTT agent as PROTOCOL §4 has it: it joins with the
// suite's TD, reconnects with the credentials the join issued, publishes
// its property retained and answers invocations on their Response Topic
// with the Correlation Data and an lmos-status user property.
type suiteAgent struct {
	c       *client
	e       *env
	ctx     context.Context // ends when the agent leaves
	leave   context.CancelFunc
	base    string
	hung    chan struct{}
	written chan []byte
}

func startSuiteAgent(t *testing.T, e *env, id string) *suiteAgent {
	t.Helper()
	key := lmos.TopicKey(id)
	j := mustDial(t, e.addr, nil)
	res := j.join(key, transporttest.TD(id, "mqtt://hub/lmos/v1/things/"+key), "")
	j.close()
	if res.Status != "accepted" || res.Credentials == nil {
		t.Fatalf("join: %+v", res)
	}
	a := &suiteAgent{c: mustDial(t, e.addr, withCreds(res.Credentials)), e: e, base: lmos.ThingsPrefix + key,
		hung: make(chan struct{}, 16), written: make(chan []byte, 16)}
	a.ctx, a.leave = context.WithCancel(context.Background())
	a.c.mustSub(a.base + "/actions/+")
	a.c.mustSub(a.base + "/properties/" + transporttest.PropertyLevel + "/set")
	a.c.mustPub(a.base+"/properties/"+transporttest.PropertyLevel, []byte(transporttest.LevelValue), 1, true)
	done := make(chan struct{})
	go a.serve(t, done)
	t.Cleanup(func() { a.leave(); a.c.close(); <-done })
	return a
}

// serve answers what reaches the agent until its connection ends.
func (a *suiteAgent) serve(t *testing.T, done chan struct{}) {
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
		case transporttest.ActionCount:
			n, _ := strconv.Atoi(string(m.Payload))
			a.reply(t, m, "pending", nil)
			for i := 1; i <= n; i++ {
				a.reply(t, m, "running", []byte(strconv.Itoa(i)))
			}
			a.reply(t, m, "completed", []byte(strconv.Itoa(n)))
		case transporttest.ActionFail:
			a.reply(t, m, "failed", []byte(`{"type":"`+transporttest.ProblemType+`","title":"Jammed","detail":"`+transporttest.ProblemDetail+`"}`))
		case transporttest.ActionHang:
			a.hung <- struct{}{}
		}
	}
}

func (a *suiteAgent) reply(t *testing.T, req *paho.Publish, status string, payload []byte) {
	if req.Properties == nil || req.Properties.ResponseTopic == "" {
		t.Errorf("invocation on %s without a Response Topic", req.Topic)
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, 5*time.Second)
	defer cancel()
	_, err := a.c.C.Publish(ctx, &paho.Publish{Topic: req.Properties.ResponseTopic, QoS: 1, Payload: payload,
		Properties: &paho.PublishProperties{CorrelationData: req.Properties.CorrelationData, ContentType: lmos.MediaJSON,
			User: paho.UserProperties{{Key: "lmos-status", Value: status}}}})
	if err != nil && a.ctx.Err() == nil {
		t.Errorf("reply %s: %v", status, err)
	}
}

func (a *suiteAgent) Hung() <-chan struct{}  { return a.hung }
func (a *suiteAgent) Written() <-chan []byte { return a.written }

func (a *suiteAgent) Emit(t testing.TB, data []byte) {
	t.Helper()
	a.c.mustPub(a.base+"/events/"+transporttest.EventTick, data, 1, false)
}

// Leave disconnects and returns once the broker dropped the agent's
// subscriptions (it handles the disconnect on its own goroutine).
func (a *suiteAgent) Leave(t testing.TB) {
	t.Helper()
	a.leave()
	a.c.close()
	eventually(t, 5*time.Second, "the broker drops the agent's subscriptions", func() bool {
		return a.e.b.Subscribers(a.base+"/actions/"+transporttest.ActionCount) == 0
	})
}
