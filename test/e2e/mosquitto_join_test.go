package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// A join whose Response Topic is neither a reply inbox nor its own
// td/result is refused: mosquitto_pub -d at QoS 1 shows PUBACK 0x83 and
// prints the Reason String; at QoS 0 it is dropped. Nothing is registered
// either way, and each refusal is counted.
func TestMosquittoJoinResponseTopicRefused(t *testing.T) {
	pub := mosquittoTool(t, "mosquitto_pub")
	h := startHub(t, nil)
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	const id = "urn:example:mosq-misdirected"
	td := string(hubtest.BareTD(id, "Misdirected"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	publish := func(qos string) string {
		cmd := exec.CommandContext(ctx, pub, "-d", "-V", "5", "-h", host, "-p", port, "-q", qos,
			"-t", "lmos/v1/things/"+id+"/td", "-D", "publish", "response-topic", "lmos/v1/things/"+id+"/reply", "-m", td)
		out, _ := cmd.CombinedOutput() // mosquitto_pub exits 0 after a refused PUBACK
		return string(out)
	}
	out := publish("1")
	want := "join refused: its result is published on lmos/v1/things/" + id + "/td/result to this connection only"
	if !strings.Contains(out, "received PUBACK (Mid: 1, RC:131)") || !strings.Contains(out, "Implementation specific error") || !strings.Contains(out, want) {
		t.Errorf("mosquitto_pub -q 1 output:\n%s\nwant PUBACK RC:131 and the reason %q", out, want)
	}
	if got := h.Main.Broker.Refused("mqtt.joinResponseTopic"); got != 1 {
		t.Errorf("mqtt.joinResponseTopic refusals = %d, want 1", got)
	}
	out = publish("0")
	if strings.Contains(out, "PUBACK") {
		t.Errorf("a QoS 0 join got an acknowledgement:\n%s", out)
	}
	waitFor(t, 30*time.Second, "the QoS 0 refusal counted", func() bool { return h.Main.Broker.Refused("mqtt.joinResponseTopic") == 2 })
	if _, err := h.Main.Registry.Get(id); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("the refused join registered the Thing: %v", err)
	}
	if resp, body := h.do(http.MethodGet, lmos.ThingPath(id), "", nil, ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET the refused Thing: %d %s", resp.StatusCode, body)
	}
}

// The mosquitto-clients walkthrough of a join in PROTOCOL §4.4 runs as
// written, pasted into a shell, against a fresh hub: mosquitto_rr gets
// the credentials on its one connection, and the lamp's status published
// with them makes it online.
func TestMosquittoJoinWalkthrough(t *testing.T) {
	mosquittoTool(t, "mosquitto_rr")
	mosquittoTool(t, "mosquitto_pub")
	h := startHub(t, nil)
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	script := walkthroughBlock(t, "mosquitto-join-walkthrough")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-eu", "-o", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HUB="+host, "PORT="+port)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the walkthrough failed: %v\n%s", err, out.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "join.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res lmos.JoinResult
	if err := json.Unmarshal(b, &res); err != nil || res.Status != lmos.JoinAccepted || res.Credentials == nil || res.Credentials.Password == "" {
		t.Fatalf("join result %s (%v)", b, err)
	}
	const id = "urn:example:desk-lamp"
	waitFor(t, 30*time.Second, "the lamp online", func() bool { s, _ := h.Presence(id); return s == "online" })
	if !strings.Contains(out.String(), `"status":"accepted"`) {
		t.Errorf("the walkthrough printed no accepted result:\n%s", out.String())
	}
}

// walkthroughBlock returns the ```sh block after the marker comment in
// docs/PROTOCOL.md, without the list item's indentation (as a reader
// copies it).
func walkthroughBlock(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "<!-- "+marker)
	if !ok {
		t.Fatalf("docs/PROTOCOL.md has no %s block", marker)
	}
	lines := strings.Split(after, "\n")[1:]
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "```sh" {
		t.Fatalf("no ```sh block after the %s marker", marker)
	}
	indent := lines[0][:strings.Index(lines[0], "`")]
	var script strings.Builder
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) == "```" {
			return script.String()
		}
		script.WriteString(strings.TrimPrefix(l, indent) + "\n")
	}
	t.Fatalf("the %s block does not end", marker)
	return ""
}
