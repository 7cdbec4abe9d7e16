package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
)

// TestNodeWoTConsumesMQTTAgent: node-wot, which nobody here wrote, fetches
// a Thing's TD from the hub and uses the MQTT forms the agent library
// filled in, with CBOR payloads: readProperty (retained), invokeAction and
// subscribeEvent.
func TestNodeWoTConsumesMQTTAgent(t *testing.T) {
	script := interopScript(t, "consume.mjs", "@node-wot/binding-mqtt")
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const id = "urn:example:nodewot-thermostat"
	a, err := agent.Connect(ctx, agent.Options{
		URL:         "mqtt://" + h.Main.MQTTAddr.String(),
		ContentType: agent.CBOR,
		Logger:      h.Main.Logger,
		TD: map[string]any{
			"@context": []any{"https://www.w3.org/2022/wot/td/v1.1"}, "@type": "lmos:Agent",
			"id": id, "title": "Thermostat for node-wot",
			"properties": map[string]any{"temperature": map[string]any{"type": "number", "readOnly": true, "observable": true}},
			"actions": map[string]any{"setTarget": map[string]any{
				"input": map[string]any{"type": "object", "properties": map[string]any{"celsius": map[string]any{"type": "number"}}}}},
			"events": map[string]any{"overheat": map[string]any{"data": map[string]any{"type": "object"}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.SetProperty("temperature", 21.5); err != nil {
		t.Fatal(err)
	}
	invoked := make(chan float64, 1)
	a.HandleAction("setTarget", func(ctx context.Context, in agent.Input) (any, error) {
		var v struct{ Celsius float64 }
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		invoked <- v.Celsius
		return map[string]bool{"accepted": true}, nil
	})

	ops, _ := json.Marshal([]map[string]any{
		{"op": "readproperty", "name": "temperature"},
		{"op": "invokeaction", "name": "setTarget", "input": map[string]any{"celsius": 23}},
		{"op": "subscribeevent", "name": "overheat", "count": 2},
	})
	cmd := exec.CommandContext(ctx, "node", script, h.URL+"/things/"+pathEscape(id), string(ops))
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	results := map[string]map[string]any{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("node-wot output %q: %v", sc.Text(), err)
		}
		if line["op"] == "subscribed" {
			// node-wot listens now: the agent emits two events.
			for i := range 2 {
				if err := a.Emit("overheat", map[string]any{"celsius": 31 + i}); err != nil {
					t.Errorf("emit: %v", err)
				}
			}
			continue
		}
		results[line["op"].(string)] = line
	}
	err = cmd.Wait()
	t.Logf("node-wot: %v\n%s", results, stderr.String())
	if err != nil {
		t.Errorf("node-wot failed: %v", err)
	}
	if r := results["readproperty"]; r["ok"] != true || r["value"] != 21.5 {
		t.Errorf("readProperty = %v", r)
	}
	if r := results["invokeaction"]; r["ok"] != true {
		t.Errorf("invokeAction = %v", r)
	}
	select {
	case c := <-invoked:
		if c != 23 {
			t.Errorf("the agent got celsius %v, want 23", c)
		}
	case <-time.After(5 * time.Second):
		t.Error("node-wot's invocation never reached the agent")
	}
	r := results["subscribeevent"]
	vals, _ := r["values"].([]any)
	if r["ok"] != true || len(vals) != 2 || vals[0].(map[string]any)["celsius"] != float64(31) {
		t.Errorf("subscribeEvent = %v", r)
	}
}
