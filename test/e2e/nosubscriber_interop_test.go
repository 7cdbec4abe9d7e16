package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// runMQTTJS runs test/interop/mqttjs-checks.mjs and returns its JSON lines by
// step; a non-zero exit (an mqtt.js error event, an unexpected close or
// server DISCONNECT, a missing message) fails the test.
func runMQTTJS(t *testing.T, args ...string) map[string][]map[string]any {
	t.Helper()
	return runMQTTJSScript(t, "mqttjs-checks.mjs", 20*time.Second, args...)
}

// runMQTTJSScript runs an mqtt.js script of test/interop within d and
// returns its JSON lines by their "step"; a non-zero exit or a line that
// is not JSON fails the test.
func runMQTTJSScript(t *testing.T, name string, d time.Duration, args ...string) map[string][]map[string]any {
	t.Helper()
	script := hubtest.InteropScript(t, name, "mqtt")
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	steps := map[string][]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("%s output %q: %v", name, sc.Text(), err)
		}
		step, _ := line["step"].(string)
		steps[step] = append(steps[step], line)
	}
	if err != nil {
		t.Fatalf("%s %v: %v\n%s\n%s", name, args, err, out, stderr.String())
	}
	return steps
}

// TestMQTTJSInboxAfterUserProperties is issue 10's reproduction with
// mqtt.js 5.16 itself: a client publishes QoS 1 with the user property
// lmos-status=completed, then another client publishes twice to its
// inbox. mochi acknowledged such a publish with PUBACK 0x01 and the
// publish's properties; mqtt.js rejected it, and nothing arrived after.
// Both messages (and the first one, to the other client) must arrive,
// with no error event, in MQTT 5 and 3.1.1.
func TestMQTTJSInboxAfterUserProperties(t *testing.T) {
	h := startHub(t, nil)
	url := "mqtt://" + h.Main.MQTTAddr.String()
	for _, v := range []string{"5", "4"} {
		steps := runMQTTJS(t, "inbox", url, v)
		msgs := func(step string) []any {
			if len(steps[step]) != 1 {
				t.Fatalf("v%s: %s: %v", v, step, steps)
			}
			m, _ := steps[step][0]["messages"].([]any)
			return m
		}
		var payloads []string
		for _, m := range msgs("a-received") {
			payloads = append(payloads, m.(map[string]any)["payload"].(string))
		}
		if strings.Join(payloads, ",") != "first,second" {
			t.Errorf("v%s: A received %v, want first and second", v, payloads)
		}
		b := msgs("b-received")
		if len(b) != 1 {
			t.Fatalf("v%s: B received %v", v, b)
		}
		if user, _ := b[0].(map[string]any)["user"].(map[string]any); v == "5" && user["lmos-status"] != "completed" {
			t.Errorf("v%s: B's message lost its user property: %v", v, b[0])
		}
	}
}

// TestUnservedRequestClients: consumers nobody here wrote (mqtt.js,
// mosquitto_rr) publish requests nobody serves; each gets the hub's failed
// result at once (404 for an unknown Thing or action, 503 for an offline
// Thing), and mqtt.js sees PUBACK 0x10.
func TestUnservedRequestClients(t *testing.T) {
	h := startHub(t, nil)
	addr := h.Main.MQTTAddr.String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const goneID = "urn:unserved:gone"
	gone, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + addr, TD: map[string]any{"id": goneID, "title": "gone",
		"actions": map[string]any{"run": map[string]any{}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the agent offline", func() bool { s, _ := h.presenceOf(goneID); return s == "offline" })
	rows := []struct {
		topic  string
		status float64
		typ    string
	}{
		{"lmos/v1/things/urn:unserved:nobody/actions/run", 404, "not-found"},
		{"lmos/v1/things/" + lmos.TopicKey(goneID) + "/actions/fly", 404, "not-found"},
		{"lmos/v1/things/" + lmos.TopicKey(goneID) + "/actions/run", 503, "unavailable"},
	}

	t.Run("mqtt.js", func(t *testing.T) {
		args := []string{"request", "mqtt://" + addr}
		for _, r := range rows {
			args = append(args, r.topic)
		}
		results := runMQTTJS(t, args...)["result"]
		if len(results) != len(rows) {
			t.Fatalf("%d results: %v", len(results), results)
		}
		for i, r := range rows {
			res, _ := results[i]["result"].(map[string]any)
			prob, _ := res["payload"].(map[string]any)
			if results[i]["puback"] != float64(0x10) || res["status"] != "failed" || res["contentType"] != "application/json" ||
				prob["status"] != r.status || prob["type"] != lmos.ErrorTypeBase+r.typ {
				t.Errorf("%s: %v, want PUBACK 0x10 and a failed %v", r.topic, results[i], r.status)
			}
		}
	})

	t.Run("mosquitto_rr", func(t *testing.T) {
		if _, err := exec.LookPath("mosquitto_rr"); err != nil {
			t.Skip("mosquitto_rr not installed; make test installs it")
		}
		host, port, _ := strings.Cut(addr, ":")
		for _, r := range rows {
			cmd := exec.CommandContext(ctx, "mosquitto_rr", "-h", host, "-p", port, "-i", "rr-consumer", "-q", "1",
				"-t", r.topic, "-e", "lmos/v1/clients/rr-consumer/r", "-m", `{"a":1}`, "-W", "5", "-F", "%P|%p")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: mosquitto_rr: %v\n%s%s", r.topic, err, out, stderr.String())
			}
			user, payload, _ := strings.Cut(strings.TrimSpace(string(out)), "|")
			var prob struct {
				Type   string
				Status float64
			}
			if err := json.Unmarshal([]byte(payload), &prob); err != nil || !strings.Contains(user, "lmos-status:failed") ||
				prob.Status != r.status || prob.Type != lmos.ErrorTypeBase+r.typ {
				t.Errorf("%s: mosquitto_rr got %q (%v), want a failed %v", r.topic, out, err, r.status)
			}
		}
	})
}
