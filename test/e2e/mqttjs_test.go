package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// countTD is the Go agents' side of the action the mqtt.js scripts speak:
// count {n, tag} answers n running results {tag, i}, then completed
// {tag, n, agent}.
func countTD(id string) map[string]any {
	return map[string]any{
		"@type": "lmos:Agent", "id": id, "title": "Go counter",
		"properties": map[string]any{"level": map[string]any{"type": "number", "observable": true}},
		"actions": map[string]any{"count": map[string]any{"input": map[string]any{"type": "object",
			"properties": map[string]any{"n": map[string]any{"type": "integer"}, "tag": map[string]any{"type": "string"}}},
			"output": map[string]any{"type": "object"}}},
		"events": map[string]any{"tick": map[string]any{"data": map[string]any{"type": "object"}}},
	}
}

// startGoCounter connects a Go agent (MQTT 5 or ws://) serving countTD.
func startGoCounter(t *testing.T, ctx context.Context, url, id string) *agent.Agent {
	t.Helper()
	return newGoCounter(t, ctx, agent.Options{URL: url}, id, 0)
}

// newGoCounter is startGoCounter with more options and the first level.
func newGoCounter(t *testing.T, ctx context.Context, opts agent.Options, id string, level float64) *agent.Agent {
	t.Helper()
	opts.TD, opts.Timeout = countTD(id), 5*time.Second
	a, err := agent.Connect(ctx, opts)
	if err != nil {
		t.Fatalf("agent %s: %v", id, err)
	}
	t.Cleanup(func() { _ = a.Close() })
	a.HandleActionStream("count", func(ctx context.Context, in agent.Input, emit func(any) error) (any, error) {
		var v struct {
			N   int
			Tag string
		}
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		for i := range v.N {
			if err := emit(map[string]any{"tag": v.Tag, "i": i}); err != nil {
				return nil, err
			}
		}
		return map[string]any{"tag": v.Tag, "n": v.N, "agent": id}, nil
	})
	a.HandleWrite("level", func(ctx context.Context, v agent.Value) error {
		var level float64
		if err := v.Decode(&level); err != nil {
			return err
		}
		return a.SetProperty("level", level)
	})
	if err := a.SetProperty("level", level); err != nil {
		t.Fatal(err)
	}
	return a
}

func tags(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// checkResults reads one {"result"} report per tag from the mqtt.js
// consumer and checks each is that invocation's own: every partial result
// in order, the final one naming the tag and the agent that served it.
func checkResults(t *testing.T, c *scriptProc, want []string, parts int, agentID string, traced bool) {
	t.Helper()
	seen := map[string]bool{}
	for range want {
		m := c.next(30*time.Second, func(m map[string]any) bool { return m["result"] != nil })
		tag := m["result"].(string)
		if seen[tag] {
			t.Errorf("second final result for %s", tag)
		}
		seen[tag] = true
		running, _ := m["running"].([]any)
		ok := len(running) == parts
		for i := 0; ok && i < parts; i++ {
			ok = running[i] == float64(i)
		}
		out, _ := m["completed"].(map[string]any)
		if !ok || out["tag"] != tag || out["n"] != float64(parts) || out["agent"] != agentID {
			t.Errorf("invocation %s: running %v, completed %v; want %d partial results from %s", tag, running, out, parts, agentID)
		}
		if traced && m["traced"] != true {
			t.Errorf("invocation %s: the final result did not echo the traceparent", tag)
		}
	}
	for _, tag := range want {
		if !seen[tag] {
			t.Errorf("no result for %s", tag)
		}
	}
}

// checkTicks reads n {"msg"} reports on topic and checks they are ticks
// from..from+n-1 in order.
func checkTicks(t *testing.T, c *scriptProc, topic string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		m := c.next(10*time.Second, func(m map[string]any) bool { return m["msg"] == topic })
		d, _ := m["data"].(map[string]any)
		if d["seq"] != float64(i) {
			t.Fatalf("event %d on %s: %v", i, topic, m)
		}
	}
}

// TestMQTTJSLongSequence: mqtt.js 5 as agent and consumer over MQTT 5 at
// QoS 1, through hundreds of results carrying user properties (the
// replies that made mochi's invalid PUBACK silence mqtt.js after the
// first one), then events, then more invocations: every result reaches its
// own request, every event arrives in order, and neither client reports
// any protocol error. The consumer also drives a Go agent (its replies are
// QoS 1 with lmos-status too) and a fire-and-forget MQTT 3.1.1 mqtt.js
// agent.
func TestMQTTJSLongSequence(t *testing.T) {
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := "mqtt://" + h.Main.MQTTAddr.String()
	const jsID, js3ID, goID = "urn:example:js-agent", "urn:example:js-agent-311", "urn:example:go-agent"
	jsAgent := startScript(t, ctx, "mqtt.js agent (v5)", "mqttjs-agent.mjs", url, jsID, "5", "1")
	js3Agent := startScript(t, ctx, "mqtt.js agent (v3.1.1)", "mqttjs-agent.mjs", url, js3ID, "4", "1")
	startGoCounter(t, ctx, url, goID)
	consumer := startScript(t, ctx, "mqtt.js consumer", "mqttjs-consumer.mjs", url)

	batch := func(id, prefix string, n, parts int) []string {
		tt := tags(prefix, n)
		consumer.do(60*time.Second, map[string]any{"cmd": "batch", "thing": id, "action": "count", "tags": tt, "n": parts, "inflight": 8, "qos": 1})
		return tt
	}
	checkResults(t, consumer, batch(jsID, "a", 300, 2), 2, jsID, true)
	checkResults(t, consumer, batch(goID, "g", 100, 2), 2, goID, true)

	tick := "lmos/v1/things/" + lmos.TopicKey(jsID) + "/events/tick"
	consumer.do(5*time.Second, map[string]any{"cmd": "sub", "topic": tick, "qos": 1})
	jsAgent.do(30*time.Second, map[string]any{"cmd": "emit", "from": 0, "n": 200})
	checkTicks(t, consumer, tick, 0, 200)

	// After all that the agent still answers, and so does the consumer.
	checkResults(t, consumer, batch(jsID, "b", 100, 3), 3, jsID, true)

	// An MQTT 3.1.1 agent cannot see the Response Topic: fire-and-forget,
	// observed through the done event it publishes instead.
	done := "lmos/v1/things/" + lmos.TopicKey(js3ID) + "/events/done"
	consumer.do(5*time.Second, map[string]any{"cmd": "sub", "topic": done, "qos": 1})
	fired := tags("f", 50)
	consumer.do(30*time.Second, map[string]any{"cmd": "fire", "thing": js3ID, "action": "count", "tags": fired, "n": 1, "qos": 1})
	for _, tag := range fired {
		m := consumer.next(10*time.Second, func(m map[string]any) bool { return m["msg"] == done })
		if d, _ := m["data"].(map[string]any); d["tag"] != tag {
			t.Fatalf("done event %v, want tag %s", m, tag)
		}
	}
	jsAgent.exit()
	js3Agent.exit()
	consumer.exit()
}

// TestPahoPythonClients: Eclipse paho-mqtt for Python (1.6.1, Debian
// bookworm's) as agent and consumer over MQTT 5 and 3.1.1, crossed with
// mqtt.js: every invocation gets its own partial and final results, QoS 1
// with user properties both ways; a 3.1.1 consumer gets every event and a
// 3.1.1 agent every fire-and-forget invocation; no client reports an
// error or loses its connection.
func TestPahoPythonClients(t *testing.T) {
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := "mqtt://" + h.Main.MQTTAddr.String()
	const pyID, py3ID, jsID = "urn:example:py-agent", "urn:example:py-agent-311", "urn:example:js-agent"
	pyAgent := startScript(t, ctx, "paho-mqtt agent (v5)", "paho_client.py", "agent", url, pyID, "5")
	py3Agent := startScript(t, ctx, "paho-mqtt agent (v3.1.1)", "paho_client.py", "agent", url, py3ID, "4")
	jsAgent := startScript(t, ctx, "mqtt.js agent", "mqttjs-agent.mjs", url, jsID, "5", "1")
	pyConsumer := startScript(t, ctx, "paho-mqtt consumer (v5)", "paho_client.py", "consumer", url, "5")
	py3Consumer := startScript(t, ctx, "paho-mqtt consumer (v3.1.1)", "paho_client.py", "consumer", url, "4")
	jsConsumer := startScript(t, ctx, "mqtt.js consumer", "mqttjs-consumer.mjs", url)

	batch := func(c *scriptProc, id, prefix string, n, parts int) []string {
		tt := tags(prefix, n)
		c.do(60*time.Second, map[string]any{"cmd": "batch", "thing": id, "action": "count", "tags": tt, "n": parts, "inflight": 4, "qos": 1})
		return tt
	}
	checkResults(t, pyConsumer, batch(pyConsumer, pyID, "pp", 25, 2), 2, pyID, true)
	checkResults(t, pyConsumer, batch(pyConsumer, jsID, "pj", 25, 2), 2, jsID, true)
	checkResults(t, jsConsumer, batch(jsConsumer, pyID, "jp", 25, 2), 2, pyID, true)

	tick := "lmos/v1/things/" + lmos.TopicKey(pyID) + "/events/tick"
	py3Consumer.do(5*time.Second, map[string]any{"cmd": "sub", "topic": tick})
	pyAgent.do(10*time.Second, map[string]any{"cmd": "emit", "from": 0, "n": 30})
	checkTicks(t, py3Consumer, tick, 0, 30)

	done := "lmos/v1/things/" + lmos.TopicKey(py3ID) + "/events/done"
	pyConsumer.do(5*time.Second, map[string]any{"cmd": "sub", "topic": done})
	fired := tags("f", 20)
	py3Consumer.do(10*time.Second, map[string]any{"cmd": "fire", "thing": py3ID, "action": "count", "tags": fired, "n": 1})
	for _, tag := range fired {
		m := pyConsumer.next(10*time.Second, func(m map[string]any) bool { return m["msg"] == done })
		if d, _ := m["data"].(map[string]any); d["tag"] != tag {
			t.Fatalf("done event %v, want tag %s", m, tag)
		}
	}
	for _, p := range []*scriptProc{pyAgent, py3Agent, jsAgent, pyConsumer, py3Consumer, jsConsumer} {
		p.exit()
	}
}
