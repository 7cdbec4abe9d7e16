package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/hubtest"
	"github.com/eclipse-lmos/lmos-hub/internal/transporttest"
)

// The WebSocket gateway passes the behaviour suite every hub.Transport
// passes, with an agent speaking the LMOS envelope over a coder/websocket
// connection on the other side. The gateway carries its agents' streams
// through the broker, so the hub runs whole, as main runs it.
func TestWebSocketGatewayIsATransport(t *testing.T) {
	transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
		h := hubtest.Start(t, nil)
		id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000b1"
		a := startEnvelopeAgent(t, h, id)
		return transporttest.Env{
			Transport: h.Main.Web.WSTransport(),
			Registry:  h.Main.Registry,
			ThingID:   id,
			Agent:     a,
			// The gateway's own requests are not visible from outside;
			// its streams are the broker's.
			Idle: func() (bool, string) {
				inv, streams := h.Main.Broker.Interactions()
				return inv == 0 && streams == 0, fmt.Sprintf("broker: %d invocations, %d streams", inv, streams)
			},
		}
	})
}

// envelopeAgent is a WebSocket agent written against PROTOCOL §5: it
// registers the suite's TD with registerThing and answers the hub's
// requests by correlationId.
type envelopeAgent struct {
	id      string
	h       *hubtest.Hub
	c       *websocket.Conn
	ctx     context.Context // ends when the agent leaves
	leave   context.CancelFunc
	hung    chan struct{}
	written chan []byte
	acks    chan map[string]any // replies to the agent's own messages
}

func startEnvelopeAgent(t *testing.T, h *hubtest.Hub, id string) *envelopeAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws",
		&websocket.DialOptions{Subprotocols: []string{"lmosprotocol"}})
	if err != nil {
		t.Fatalf("dial /ws: %v", err)
	}
	a := &envelopeAgent{id: id, h: h, c: c, hung: make(chan struct{}, 16), written: make(chan []byte, 16),
		acks: make(chan map[string]any, 16)}
	a.ctx, a.leave = context.WithCancel(context.Background())
	done := make(chan struct{})
	go a.serve(t, done)
	t.Cleanup(func() { a.leave(); _ = c.Close(websocket.StatusNormalClosure, ""); <-done })
	var td map[string]any
	if err := json.Unmarshal(transporttest.TD(id, "ws://hub/ws"), &td); err != nil {
		t.Fatal(err)
	}
	a.send(t, map[string]any{"messageType": "registerThing", "thingId": id, "td": td})
	select {
	case r := <-a.acks:
		if r["messageType"] != "acknowledgement" {
			t.Fatalf("registerThing: %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("registerThing: no reply")
	}
	return a
}

func (a *envelopeAgent) send(t testing.TB, m map[string]any) {
	if _, ok := m["messageId"]; !ok {
		m["messageId"] = uuid.NewString()
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Errorf("encode %v: %v", m, err)
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, 5*time.Second)
	defer cancel()
	if err := a.c.Write(ctx, websocket.MessageText, b); err != nil && a.ctx.Err() == nil {
		t.Errorf("ws write: %v", err)
	}
}

// serve answers the hub's requests until the connection ends; anything
// the hub sends that does not decode fails the test.
func (a *envelopeAgent) serve(t *testing.T, done chan struct{}) {
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
			v, _ := strconv.Atoi(transporttest.LevelValue)
			answer(map[string]any{"messageType": "propertyReading", "name": m["name"], "value": v})
		case "writeProperty":
			v, _ := json.Marshal(m["value"])
			a.written <- v
			answer(map[string]any{"messageType": "acknowledgement"})
		case "invokeAction":
			a.invoke(m, answer)
		default:
			a.acks <- m
		}
	}
}

func (a *envelopeAgent) invoke(m map[string]any, answer func(map[string]any)) {
	status := func(s string, extra map[string]any) {
		r := map[string]any{"messageType": "actionStatus", "action": m["action"], "status": s}
		for k, v := range extra {
			r[k] = v
		}
		answer(r)
	}
	switch m["action"] {
	case transporttest.ActionCount:
		n, _ := m["input"].(float64)
		status("pending", nil)
		for i := 1; i <= int(n); i++ {
			status("running", map[string]any{"output": i})
		}
		status("completed", map[string]any{"output": int(n)})
	case transporttest.ActionFail:
		status("failed", map[string]any{"error": map[string]any{"type": transporttest.ProblemType, "title": "Jammed",
			"status": 500, "detail": transporttest.ProblemDetail}})
	case transporttest.ActionHang:
		a.hung <- struct{}{}
	}
}

func (a *envelopeAgent) Hung() <-chan struct{}  { return a.hung }
func (a *envelopeAgent) Written() <-chan []byte { return a.written }

func (a *envelopeAgent) Emit(t testing.TB, data []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	a.send(t, map[string]any{"messageType": "event", "thingId": a.id, "event": transporttest.EventTick, "data": v})
}

// Leave closes the connection and returns once the hub has taken the
// Thing offline (after it forgot the connection).
func (a *envelopeAgent) Leave(t testing.TB) {
	t.Helper()
	a.leave()
	_ = a.c.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		th, err := a.h.Main.Registry.Get(a.id)
		if err == nil && th.Meta.Presence.Status == hub.PresenceOffline {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub did not take %s offline: %v %v", a.id, th.Meta.Presence, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
