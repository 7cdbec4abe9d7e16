package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// TestNodeWSEnvelope: a WebSocket client nobody here wrote (npm ws, with
// cbor-x for binary frames) speaks the envelope to a WebSocket agent through
// the hub: read, streamed invocation, kotlin-wot spellings, CBOR, an
// unknown message type and an event.
func TestNodeWSEnvelope(t *testing.T) {
	script := hubtest.InteropScript(t, "ws-envelope.mjs", "ws")
	h := startHub(t, nil)
	a := h.startWSAgent("urn:uuid:5b0d6c1e-0000-4000-8000-0000000a0001", false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws", a.id)
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	steps := map[string]map[string]any{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("node output %q: %v", sc.Text(), err)
		}
		step, _ := line["step"].(string)
		steps[step] = line
		if step == "subscribed" {
			a.emit("alarm", map[string]any{"level": 9})
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node: %v\n%s\n%v", err, stderr.String(), steps)
	}
	reply := func(step string) map[string]any { m, _ := steps[step]["reply"].(map[string]any); return m }
	if steps["protocol"]["value"] != "lmosprotocol" {
		t.Errorf("protocol %v", steps["protocol"])
	}
	if r := reply("read"); r["messageType"] != "propertyReading" || r["value"] != 21.5 {
		t.Errorf("read %v", r)
	}
	if got := jsonText(steps["invoke"]["statuses"]); got != `[["pending",null],["running",{"n":1}],["running",{"n":2}],["running",{"n":3}],["completed",{"done":true}]]` {
		t.Errorf("invoke %s", got)
	}
	if r := reply("kotlin-read"); r["property"] != "temp" || r["data"] != 21.5 {
		t.Errorf("kotlin read %v", r)
	}
	if r := reply("cbor-invoke"); r["status"] != "completed" || jsonText(r["output"]) != `{"sum":42}` {
		t.Errorf("cbor invoke %v", r)
	}
	if r := reply("unknown"); r["messageType"] != "error" || r["type"] != "https://eclipse.dev/lmos/protocol/v1/errors#unsupported-message-type" || r["status"] != 400.0 {
		t.Errorf("unknown type %v", r)
	}
	if r := reply("subscribed"); r["messageType"] != "acknowledgement" {
		t.Errorf("subscribe %v", r)
	}
	if ev, _ := steps["event"]["event"].(map[string]any); ev["event"] != "alarm" || jsonText(ev["data"]) != `{"level":9}` {
		t.Errorf("event %v", steps["event"])
	}
}
