package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

func TestJSONLogChild(t *testing.T) {
	if os.Getenv("LMOS_HUB_JSONLOG_CHILD") != "1" {
		t.Skip("helper process of TestJSONLogOnlyJSON")
	}
	os.Exit(run(strings.Fields(os.Getenv("LMOS_HUB_CHILD_ARGS")), os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// jsonRecords parses every line of a JSON-mode log; a line that is not a
// JSON object with level and msg fails the test.
func jsonRecords(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(log, "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["level"] == nil || rec["msg"] == nil {
			t.Errorf("not a JSON log line: %q", line)
			continue
		}
		out = append(out, rec)
	}
	return out
}

// recordOf returns the first record saying msg, or nil.
func recordOf(recs []map[string]any, msg string) map[string]any {
	for _, r := range recs {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

// A process started with --log-format json writes nothing but JSON lines
// to stderr, from its start (library initialisation included) through
// joins, a scrape of /metrics and its stop; the joins are among them with
// their fields.
func TestJSONLogOnlyJSON(t *testing.T) {
	dir := t.TempDir()
	args := []string{"serve", "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0",
		"--mdns=false", "--admin-token", testToken, "--log-format", "json", "--log-level", "debug"}
	cmd := exec.Command(os.Args[0], "-test.run=^TestJSONLogChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LMOS_HUB_JSONLOG_CHILD=1", "LMOS_HUB_CHILD_ARGS="+strings.Join(args, " "))
	stdout, stderr := &cliSyncBuffer{}, &cliSyncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addrOf := func(msg string) string { // lenient: the lines are checked at the end
		for _, line := range strings.Split(stderr.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
				a, _ := rec["addr"].(string)
				return a
			}
		}
		return ""
	}
	testwait.Eventually(t, 20*time.Second, "the hub listening", func() bool { return addrOf("http listening") != "" && addrOf("mqtt listening") != "" })

	c := mqttclient.MustDial(t, addrOf("mqtt listening"), nil)
	c.MustJoin("urn:example:json-lamp", []byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":"urn:example:json-lamp","title":"Lamp",`+
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`))
	c.Join("urn:example:json-bad", []byte(`{"title":`), "")
	c.Close()
	resp, err := http.Get("http://" + addrOf("http listening") + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		exited <- nil // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit after SIGTERM; log:\n%s", stderr.String())
	}
	recs := jsonRecords(t, stderr.String())
	if r := recordOf(recs, "join accepted"); r == nil || r["door"] != "mqtt" || r["id"] != "urn:example:json-lamp" || r["level"] != "INFO" {
		t.Errorf("join accepted record %v", r)
	}
	if r := recordOf(recs, "join refused"); r == nil || r["reason"] != "invalid" || r["id"] != "urn:example:json-bad" {
		t.Errorf("join refused record %v", r)
	}
	if recordOf(recs, "stopped") == nil {
		t.Errorf("no stop record")
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr.String())
	}
}
