package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// A Thing's failure reaches the consumer the same whichever transport the
// Thing is on (PROTOCOL §10, hub.ThingFailed): its type, title, detail and
// instance where it sent them as strings, the hub's default detail where
// it sent none, and always status 502. Each door (HTTP, MQTT, WebSocket)
// is asked for each failure of an MQTT and a WebSocket agent, and answers
// the same for both.
func TestThingFailureIsTheSameFromEitherTransport(t *testing.T) {
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"
	mqttURL := "mqtt://" + h.Main.MQTTAddr.String()
	failures := map[string]*agent.Problem{
		"full": {Type: "https://agent.example/errors#jammed", Title: "Jammed", Status: 418,
			Detail: "the feeder is jammed", Instance: "/jobs/7"},
		// No detail: the hub's says the Thing failed.
		"bare": {Type: "https://agent.example/errors#jammed", Title: "Jammed", Status: 500},
	}
	start := func(url, id string) *agent.Agent {
		actions := map[string]any{}
		for name := range failures {
			actions[name] = map[string]any{}
		}
		a, err := agent.Connect(ctx, agent.Options{URL: url, TD: map[string]any{"id": id, "title": "failing", "@type": "lmos:Agent", "actions": actions}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		for name, p := range failures {
			a.HandleAction(name, func(context.Context, agent.Input) (any, error) { return nil, p })
		}
		return a
	}
	things := map[string]string{
		"mqtt": "urn:uuid:5b0d6c1e-0000-4000-8000-00000000fa01",
		"ws":   "urn:uuid:5b0d6c1e-0000-4000-8000-00000000fa02",
	}
	start(mqttURL, things["mqtt"])
	start(wsURL, things["ws"])
	consumers := map[string]*agent.Agent{
		"mqtt": start(mqttURL, "urn:uuid:5b0d6c1e-0000-4000-8000-00000000fa03"),
		"ws":   start(wsURL, "urn:uuid:5b0d6c1e-0000-4000-8000-00000000fa04"),
	}

	for name, sent := range failures {
		want := lmos.Problem{Type: sent.Type, Title: sent.Title, Status: 502, Detail: sent.Detail}
		if want.Detail == "" {
			want.Detail = "the Thing reported a failure"
		}
		// seen[door] is what each door answered for each agent transport.
		seen := map[string]map[string]string{}
		see := func(door, via string, p lmos.Problem) {
			b, _ := json.Marshal(p)
			if seen[door] == nil {
				seen[door] = map[string]string{}
			}
			seen[door][via] = string(b)
		}
		for via, id := range things {
			resp, body := h.request("POST", actionPath(id, name), "application/json", "", []byte(`{}`), testToken)
			p := expectProblem(t, resp, body, 502, want.Detail)
			if p.Type != want.Type || p.Title != want.Title || p.Instance != actionPath(id, name) {
				t.Errorf("%s from the %s agent over HTTP: %+v", name, via, p)
			}
			p.Instance = ""
			see("http", via, p)
			for door, c := range consumers {
				if door == "mqtt" && via == "mqtt" {
					// An MQTT consumer reaches an MQTT Thing through the
					// broker: the Thing answers it, not a door of the hub.
					continue
				}
				_, err := c.Invoke(ctx, id, name, nil)
				var got *agent.Problem
				if !errors.As(err, &got) {
					t.Fatalf("%s from the %s agent, %s consumer: %v", name, via, door, err)
				}
				if got.Type != want.Type || got.Title != want.Title || got.Status != 502 || got.Detail != want.Detail {
					t.Errorf("%s from the %s agent, %s consumer: %+v, want %+v", name, via, door, got, want)
				}
				see(door, via, *got)
			}
		}
		for door, vias := range seen {
			if len(vias) == 2 && vias["mqtt"] != vias["ws"] {
				t.Errorf("%s at the %s door differs by the agent's transport:\nmqtt %s\n  ws %s", name, door, vias["mqtt"], vias["ws"])
			}
		}
	}
}
