package e2e

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
)

// The agent package picks its transport by URL: the same API over ws://
// (the hub's /ws) as over mqtt://, and agents of either transport reach
// each other.
func TestAgentOverWebSocket(t *testing.T) {
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"
	mqttURL := "mqtt://" + h.Main.MQTTAddr.String()
	td := func(id string) map[string]any {
		return map[string]any{"id": id, "title": "counter", "@type": "lmos:Agent",
			"actions":    map[string]any{"count": map[string]any{}},
			"properties": map[string]any{"temp": map[string]any{"type": "number"}, "mode": map[string]any{"type": "string"}},
			"events":     map[string]any{"alarm": map[string]any{}}}
	}
	serve := func(a *agent.Agent) {
		a.HandleActionStream("count", func(ctx context.Context, in agent.Input, emit func(any) error) (any, error) {
			for i := 1; i <= 3; i++ {
				if err := emit(map[string]int{"n": i}); err != nil {
					return nil, err
				}
			}
			return map[string]bool{"done": true}, nil
		})
		a.HandleWrite("mode", func(ctx context.Context, v agent.Value) error {
			var s string
			if err := v.Decode(&s); err != nil {
				return err
			}
			return a.SetProperty("mode", s)
		})
	}
	wsID, mqttID := "urn:uuid:5b0d6c1e-0000-4000-8000-00000000f001", "urn:uuid:5b0d6c1e-0000-4000-8000-00000000f002"
	wsA, err := agent.Connect(ctx, agent.Options{URL: wsURL, TD: td(wsID)})
	if err != nil {
		t.Fatal(err)
	}
	defer wsA.Close()
	mqA, err := agent.Connect(ctx, agent.Options{URL: mqttURL, TD: td(mqttID)})
	if err != nil {
		t.Fatal(err)
	}
	defer mqA.Close()
	serve(wsA)
	serve(mqA)
	if s, via := h.presenceOf(wsID); s != "online" || via != "ws" {
		t.Fatalf("ws agent presence %s via %s", s, via)
	}
	if err := wsA.SetProperty("temp", 21.5); err != nil {
		t.Fatal(err)
	}
	if err := mqA.SetProperty("temp", 22.5); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		consumer *agent.Agent
		target   string
		temp     string
	}{{"mqtt-to-ws", mqA, wsID, "21.5"}, {"ws-to-mqtt", wsA, mqttID, "22.5"}, {"ws-to-ws", wsA, wsID, "21.5"}} {
		t.Run(tc.name, func(t *testing.T) {
			var partials []string
			out, err := tc.consumer.Invoke(ctx, tc.target, "count", nil, agent.WithPartial(func(o agent.Output) {
				partials = append(partials, o.String())
			}))
			if err != nil || compact(out.Payload) != `{"done":true}` || strings.Join(partials, ",") != `{"n":1},{"n":2},{"n":3}` {
				t.Errorf("invoke: %s %q %v", out.Payload, partials, err)
			}
			var v agent.Value
			waitFor(t, 3*time.Second, "temp", func() bool {
				v, err = tc.consumer.ReadProperty(ctx, tc.target, "temp")
				return err == nil
			})
			if got, _ := v.JSON(); string(got) != tc.temp {
				t.Errorf("read temp = %s, want %s", got, tc.temp)
			}
			events := make(chan string, 4)
			stop, err := tc.consumer.Subscribe(ctx, tc.target, "alarm", func(v agent.Value) { j, _ := v.JSON(); events <- string(j) })
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			emitter := wsA
			if tc.target == mqttID {
				emitter = mqA
			}
			if err := emitter.Emit("alarm", map[string]string{"to": tc.name}); err != nil {
				t.Fatal(err)
			}
			select {
			case e := <-events:
				if compact([]byte(e)) != `{"to":"`+tc.name+`"}` {
					t.Errorf("event %s", e)
				}
			case <-time.After(5 * time.Second):
				t.Error("no event")
			}
		})
	}
	// A write reaches the WebSocket agent's handler; an unknown action is
	// the agent's 404 problem.
	if err := mqA.WriteProperty(ctx, wsID, "mode", "eco", agent.WithAck()); err != nil {
		t.Errorf("write: %v", err)
	}
	_, err = mqA.Invoke(ctx, wsID, "nope", nil)
	var p *agent.Problem
	if !errors.As(err, &p) || p.Status != 404 {
		t.Errorf("unknown action: %v", err)
	}
	// Close: offline.
	wsA.Close()
	waitFor(t, 2*time.Second, "offline", func() bool { s, _ := h.presenceOf(wsID); return s == "offline" })
}

// TestWSAgentReconnectsWhileTheHubHoldsItsOldSocket: the network drops a
// WebSocket agent's connection, the agent notices first and reconnects
// while the hub still holds its old socket, so the hub refuses the new
// registration with 409 until a failed ping drops the old one. The agent
// keeps trying (it used to give up for good at the first 409) and comes
// back online; the hub drops the dead socket without waiting for a close
// handshake (it used to wait 5 s).
func TestWSAgentReconnectsWhileTheHubHoldsItsOldSocket(t *testing.T) {
	h := startHub(t, func(c *Config) {
		c.HTTP.WebSocket.PingInterval = Duration(500 * time.Millisecond)
		c.HTTP.ProxyTimeout = Duration(5 * time.Second)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	relay := startRelay(t, h.Main.HTTPAddr.String())
	const id = "urn:example:ws-stalled"
	log := &warnings{t: t}
	newGoCounter(t, ctx, agent.Options{URL: "ws://" + relay.addr() + "/ws", Logger: slog.New(log)}, id, 1)
	presence := func() string {
		th, err := h.Main.Registry.Get(id)
		if err != nil {
			return err.Error()
		}
		return th.Meta.Presence.Status
	}
	if p := presence(); p != "online" {
		t.Fatalf("presence %s", p)
	}
	relay.stall()
	stalled := time.Now()
	// The hub drops a socket whose ping went unanswered at once (a close
	// handshake with a dead peer would hold the Thing online 5 s longer):
	// within two ping intervals, here with 3 s to spare.
	waitFor(t, 4*time.Second, "the hub drops the stalled socket", func() bool { return presence() == "offline" })
	t.Logf("offline after %v", time.Since(stalled))
	waitFor(t, 15*time.Second, "the agent back online", func() bool { return presence() == "online" })
	t.Logf("online after %v", time.Since(stalled))
	// It serves again.
	resp, body := h.request("POST", "/proxy/"+pathEscape(id)+"/actions/count", "application/json", "", []byte(`{"n":1,"tag":"back"}`), testToken)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"tag":"back"`) {
		t.Errorf("invoke after the reconnect: %d %s", resp.StatusCode, body)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, m := range log.msgs {
		t.Errorf("the agent warned: %s", m)
	}
}
