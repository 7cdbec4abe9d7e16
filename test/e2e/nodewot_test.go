package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// nodeWoT is `node script args…` with node-wot's MQTT client warnings on
// stderr: node-wot only logs its mqtt.js client's error events
// ("MQTT client error: …"), and nodeWoTErrors finds them there.
func nodeWoT(ctx context.Context, script string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "DEBUG=node-wot:binding-mqtt:*:warn,node-wot:binding-mqtt:*:error")
	return cmd
}

// nodeWoTErrors fails the test on every protocol error node-wot's MQTT
// client reported.
func nodeWoTErrors(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "MQTT client error") {
			t.Errorf("node-wot: %s", line)
		}
	}
}

// TestNodeWoTConsumesMQTTAgent: node-wot, which nobody here wrote, fetches
// a Thing's TD from the hub and uses the MQTT forms the agent library
// filled in, with CBOR payloads: readProperty (retained), invokeAction and
// subscribeEvent.
func TestNodeWoTConsumesMQTTAgent(t *testing.T) {
	script := hubtest.InteropScript(t, "consume.mjs", "@node-wot/binding-mqtt")
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
	cmd := nodeWoT(ctx, script, h.URL+"/things/"+pathEscape(id), string(ops))
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
	nodeWoTErrors(t, stderr.String())
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

// runNodeWoT runs consume.mjs with ops (and the proxy forms when proxy is
// set), calls onSubscribed when node-wot listens for an observation or an
// event, and returns the op reports in order. A failed op or a non-zero
// exit fails the test.
func runNodeWoT(t *testing.T, ctx context.Context, tdURL string, ops []map[string]any, proxy map[string]any, onSubscribed func(name string)) []map[string]any {
	t.Helper()
	script := hubtest.InteropScript(t, "consume.mjs", "@node-wot/binding-mqtt")
	o, _ := json.Marshal(ops)
	args := []string{tdURL, string(o)}
	if proxy != nil {
		p, _ := json.Marshal(proxy)
		args = append(args, string(p))
	}
	cmd := nodeWoT(ctx, script, args...)
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Errorf("node-wot output %q: %v", sc.Text(), err)
			continue
		}
		if line["op"] == "subscribed" {
			onSubscribed(line["name"].(string))
			continue
		}
		if line["ok"] != true {
			t.Errorf("node-wot: %v", line)
		}
		out = append(out, line)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("node-wot failed: %v\n%s", err, stderr.String())
	}
	nodeWoTErrors(t, stderr.String())
	if len(out) != len(ops) {
		t.Fatalf("node-wot reported %d of %d ops\n%s", len(out), len(ops), stderr.String())
	}
	return out
}

// TestNodeWoTLongSequence: node-wot 0.8.16 drives an mqtt.js agent and a
// Go agent through a long sequence: reads, writes and hundreds of
// invocations through the HTTP proxy (node-wot's HTTP binding, each
// invocation answered by the agent with QoS 1 results carrying user
// properties), observations and events over MQTT (its MQTT binding), then
// more invocations: the agents stay responsive, every result is the
// invocation's own, every observed value and event arrives.
func TestNodeWoTLongSequence(t *testing.T) {
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := "mqtt://" + h.Main.MQTTAddr.String()
	const jsID, goID = "urn:example:nodewot-js", "urn:example:nodewot-go"
	jsAgent := startScript(t, ctx, "mqtt.js agent", "mqttjs-agent.mjs", url, jsID, "5", "1")
	goAgent := startGoCounter(t, ctx, url, goID)
	const invocations = 120
	for _, tc := range []struct {
		id   string
		emit func(n int)
	}{
		{jsID, func(n int) { jsAgent.do(10*time.Second, map[string]any{"cmd": "emit", "from": 0, "n": n}) }},
		{goID, func(n int) {
			for i := range n {
				if err := goAgent.Emit("tick", map[string]any{"seq": i}); err != nil {
					t.Errorf("emit: %v", err)
				}
			}
		}},
	} {
		func() {
			ops := []map[string]any{{"op": "readproperty", "name": "level", "expect": 0}}
			invoke := func(prefix string) {
				for i := range invocations {
					ops = append(ops, map[string]any{"op": "invokeaction", "name": "count", "input": map[string]any{"n": 2, "tag": fmt.Sprintf("%s-%d", prefix, i)}})
				}
			}
			invoke("a")
			ops = append(ops,
				map[string]any{"op": "writeproperty", "name": "level", "input": 7},
				map[string]any{"op": "readproperty", "name": "level", "expect": 7},
				// node-wot keeps to the scheme it used last (HTTP) unless told
				// which form: the MQTT one, behind the proxy's.
				map[string]any{"op": "observeproperty", "name": "level", "count": 2, "formIndex": 1},
				map[string]any{"op": "subscribeevent", "name": "tick", "count": 20})
			invoke("b")
			proxy := map[string]any{"base": h.URL + "/proxy/" + pathEscape(tc.id), "token": testToken}
			out := runNodeWoT(t, ctx, h.URL+"/things/"+pathEscape(tc.id), ops, proxy, func(name string) {
				switch name {
				case "level": // node-wot has the retained 7; a consumer of the proxy writes 8.
					resp, body := h.do("PUT", "/proxy/"+pathEscape(tc.id)+"/properties/level", "application/json", []byte("8"), testToken)
					if resp.StatusCode != 204 {
						t.Errorf("PUT level: %d %s", resp.StatusCode, body)
					}
				case "tick":
					tc.emit(20)
				}
			})
			for i, r := range out {
				op := ops[i]
				switch op["op"] {
				case "invokeaction":
					tag := op["input"].(map[string]any)["tag"]
					v, _ := r["value"].(map[string]any)
					if v["tag"] != tag || v["n"] != float64(2) || v["agent"] != tc.id {
						t.Errorf("%s: invocation %v: %v", tc.id, tag, r)
					}
				case "readproperty":
					if r["value"] != float64(op["expect"].(int)) {
						t.Errorf("%s: readproperty: %v, want %v", tc.id, r, op["expect"])
					}
				case "observeproperty":
					if vals, _ := r["values"].([]any); len(vals) != 2 || vals[0] != float64(7) || vals[1] != float64(8) {
						t.Errorf("%s: observeproperty: %v, want [7 8]", tc.id, r)
					}
				case "subscribeevent":
					vals, _ := r["values"].([]any)
					for i, v := range vals {
						if d, _ := v.(map[string]any); d["seq"] != float64(i) {
							t.Errorf("%s: event %d: %v", tc.id, i, v)
						}
					}
					if len(vals) != 20 {
						t.Errorf("%s: subscribeevent: %d events, want 20", tc.id, len(vals))
					}
				}
			}
		}()
	}
	jsAgent.exit()
}
