package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// mosquittoTool returns the path of a mosquitto client (Debian
// mosquitto-clients), skipping without it unless LMOS_INTEROP=1.
func mosquittoTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("%s not installed (run scripts/test-deps.sh): %v", name, err)
		}
		t.Skipf("%s not installed; `make test` installs it", name)
	}
	return p
}

// TestMosquittoClients: the Eclipse Mosquitto command-line clients against
// an mqtt.js agent and a Go agent. mosquitto_rr (MQTT 5, QoS 1, its
// response topic in its own reply inbox, Correlation Data and a
// traceparent user property) invokes the action again and again and gets
// each time exactly its own result with lmos-status completed;
// mosquitto_sub (v5 and v3.1.1) counts every event; mosquitto_pub writes
// a property and invokes fire-and-forget over 3.1.1. Every client must
// exit 0.
func TestMosquittoClients(t *testing.T) {
	rr := mosquittoTool(t, "mosquitto_rr")
	sub := mosquittoTool(t, "mosquitto_sub")
	pub := mosquittoTool(t, "mosquitto_pub")
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	url := "mqtt://" + h.Main.MQTTAddr.String()
	const jsID, goID = "urn:example:mosq-js", "urn:example:mosq-go"
	jsAgent := startScript(t, ctx, "mqtt.js agent", "mqttjs-agent.mjs", url, jsID, "5", "1")
	startGoCounter(t, ctx, url, goID)
	topic := func(id, rest string) string { return "lmos/v1/things/" + lmos.TopicKey(id) + "/" + rest }
	run := func(bin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s%s", bin, args, err, out, stderr.String())
		}
		return string(out)
	}

	for _, id := range []string{jsID, goID} {
		for i := range 15 {
			tag := fmt.Sprintf("rr-%d", i)
			cid := "mosq-rr-" + strconv.Itoa(i)
			// %P: user properties, %D: correlation data, %p: payload.
			out := run(rr, "-V", "5", "-q", "1", "-W", "10", "-i", cid,
				"-t", topic(id, "actions/count"), "-e", "lmos/v1/clients/"+cid+"/r",
				"-D", "PUBLISH", "correlation-data", tag,
				"-D", "PUBLISH", "user-property", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
				"-D", "PUBLISH", "content-type", "application/json",
				"-F", "%P|%D|%p", "-m", `{"n":0,"tag":"`+tag+`"}`)
			if i == 0 {
				t.Logf("mosquitto_rr to %s: %s", id, out)
			}
			parts := strings.SplitN(strings.TrimSpace(out), "|", 3)
			if len(parts) != 3 || !strings.Contains(parts[0], "lmos-status:completed") || parts[1] != tag {
				t.Fatalf("mosquitto_rr to %s got %q, want lmos-status completed and correlation data %s", id, out, tag)
			}
			var res map[string]any
			if err := json.Unmarshal([]byte(parts[2]), &res); err != nil || res["tag"] != tag || res["agent"] != id {
				t.Fatalf("mosquitto_rr to %s: result %q (%v)", id, parts[2], err)
			}
		}
	}

	// mosquitto_sub counts every event, over v5 and v3.1.1.
	for _, v := range []string{"5", "311"} {
		tick := topic(jsID, "events/tick")
		// The previous mosquitto_sub's subscription is removed after its
		// connection ended: wait, so that the count below is this one's.
		waitFor(t, 5*time.Second, "no subscriber of "+tick, func() bool { return h.Main.Broker.Subscribers(tick) == 0 })
		cmd := exec.CommandContext(ctx, sub, "-h", host, "-p", port, "-V", v, "-q", "1", "-t", tick, "-C", "40", "-W", "20", "-F", "%p")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "mosquitto_sub subscribed", func() bool { return h.Main.Broker.Subscribers(tick) == 1 })
		jsAgent.do(10*time.Second, map[string]any{"cmd": "emit", "from": 0, "n": 40})
		if err := cmd.Wait(); err != nil {
			t.Fatalf("mosquitto_sub -V %s: %v\n%s", v, err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		for i, l := range lines {
			if l != fmt.Sprintf(`{"seq":%d}`, i) {
				t.Fatalf("mosquitto_sub -V %s: event %d is %q", v, i, l)
			}
		}
		if len(lines) != 40 {
			t.Fatalf("mosquitto_sub -V %s: %d events, want 40", v, len(lines))
		}
	}

	// mosquitto_pub writes a property (v5, with a user property) and
	// invokes fire-and-forget over 3.1.1.
	run(pub, "-V", "5", "-q", "1", "-t", topic(jsID, "properties/level/set"), "-m", "5",
		"-D", "PUBLISH", "user-property", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if m := jsAgent.next(5*time.Second, func(m map[string]any) bool { return m["wrote"] != nil }); m["wrote"] != float64(5) {
		t.Fatalf("the agent wrote %v, want 5", m)
	}
	done := topic(jsID, "events/done")
	cmd := exec.CommandContext(ctx, sub, "-h", host, "-p", port, "-V", "311", "-q", "1", "-t", done, "-C", "5", "-W", "20", "-F", "%p")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "mosquitto_sub subscribed", func() bool { return h.Main.Broker.Subscribers(done) == 1 })
	for i := range 5 {
		run(pub, "-V", "311", "-q", "1", "-t", topic(jsID, "actions/count"), "-m", fmt.Sprintf(`{"n":1,"tag":"ff-%d"}`, i))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mosquitto_sub: %v\n%s", err, stderr.String())
	}
	if got, want := strings.TrimSpace(stdout.String()), `{"tag":"ff-0"}
{"tag":"ff-1"}
{"tag":"ff-2"}
{"tag":"ff-3"}
{"tag":"ff-4"}`; got != want {
		t.Fatalf("done events %q, want %q", got, want)
	}
	jsAgent.exit()
}

// TestMosquittoDeregisteredCredentialsRefused: a Thing deregisters itself
// with mosquitto_pub (an empty …/td with its credentials), which must exit
// 0; its Thing and credential go in one commit, after which mosquitto_sub
// connecting with the same credentials is refused as not authorised, over
// MQTT 5 and 3.1.1.
func TestMosquittoDeregisteredCredentialsRefused(t *testing.T) {
	pub := mosquittoTool(t, "mosquitto_pub")
	sub := mosquittoTool(t, "mosquitto_sub")
	h := startHub(t, nil)
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	const id = "urn:example:mosq-leaver"
	tid := lmos.TopicKey(id)
	creds := h.mqttDial(nil).join(id, makeTD(id, "Leaver"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(bin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port, "-u", creds.Username, "-P", creds.Password}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(pub, "-V", "5", "-q", "1", "-i", "leaver", "-t", "lmos/v1/things/"+tid+"/td", "-n"); err != nil {
		t.Fatalf("mosquitto_pub deregistration: %v\n%s", err, out)
	}
	waitFor(t, 5*time.Second, "the Thing deleted", func() bool {
		_, err := h.Main.Registry.Get(id)
		return hub.ErrorCode(err) == hub.ENOTFOUND
	})
	// The CONNACK mosquitto reports: 0x86 in MQTT 5, 0x05 in 3.1.1.
	for v, want := range map[string]string{"5": "Bad User Name or Password", "311": "not authorised"} {
		out, err := run(sub, "-V", v, "-i", "leaver-"+v, "-t", "lmos/v1/things/"+tid+"/status", "-C", "1", "-W", "5")
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("mosquitto_sub -V %s with deleted credentials: %v, want %q\n%s", v, err, want, out)
		}
	}
}
