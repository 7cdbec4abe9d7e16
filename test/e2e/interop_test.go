package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// tdPlayground runs the W3C TD Playground validator (npm
// @thing-description-playground/core, checkJsonLd false) on files and
// returns each file's verdict. make test installs it; elsewhere the test
// skips unless LMOS_INTEROP=1 demands it.
func tdPlayground(t *testing.T, files ...string) map[string]bool {
	t.Helper()
	script := hubtest.InteropScript(t, "validate-td.mjs", "@thing-description-playground/core")
	cmd := exec.Command("node", append([]string{script}, files...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
		t.Fatalf("validator: %v\n%s", err, stderr.String())
	}
	verdicts := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			File   string `json:"file"`
			Valid  bool   `json:"valid"`
			Errors []any  `json:"errors"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("validator output %q: %v", sc.Text(), err)
		}
		verdicts[r.File] = r.Valid
		if !r.Valid {
			t.Logf("validator: %s invalid: %v", filepath.Base(r.File), r.Errors)
		}
	}
	if len(verdicts) != len(files) {
		t.Fatalf("validator judged %d of %d files:\n%s\n%s", len(verdicts), len(files), out, stderr.String())
	}
	return verdicts
}

// TestServedTDsPassPlayground validates every TD the hub serves: the
// samples as enriched by the hub, an anonymous one, and the directory TD.
// The invalid samples are rejected by both the hub and the validator.
func TestServedTDsPassPlayground(t *testing.T) {
	// TLS on: the directory TD carries its TLS links too (issue 14).
	h := startHub(t, func(c *Config) { c.TLS.Enabled = true })
	dir := t.TempDir()
	var served []string
	save := func(name string, body []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, s := range []struct{ file, id string }{
		{"thermostat-agent.json", thermostatID}, {"chat-agent.json", chatID}, {"diagnostics-tool.json", diagID},
	} {
		h.put(s.id, sample(t, s.file))
		_, body := h.do("GET", "/things/"+pathEscape(s.id), "", nil, "")
		served = append(served, save("served-"+s.file, body))
	}
	resp, _ := h.do("POST", "/things", "application/td+json", bytes.Replace(makeTD("x", "anonymous"), []byte(`"id":"x",`), nil, 1), testToken)
	if resp.StatusCode != 201 {
		t.Fatalf("POST anonymous: %d", resp.StatusCode)
	}
	_, body := h.do("GET", resp.Header.Get("Location"), "", nil, "")
	served = append(served, save("served-anonymous.json", body))
	_, body = h.do("GET", "/.well-known/wot", "", nil, "")
	served = append(served, save("directory.json", body))
	tlsResp, err := h.trustingClient().Get(h.HTTPSURL + "/.well-known/wot")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(tlsResp.Body)
	tlsResp.Body.Close()
	served = append(served, save("directory-https.json", body))

	var invalid []string
	for _, name := range []string{"invalid-missing-security.json", "invalid-undefined-security.json"} {
		raw := sample(t, name)
		var doc map[string]any
		_ = json.Unmarshal(raw, &doc)
		resp, body := h.do("PUT", "/things/"+pathEscape(doc["id"].(string)), "application/td+json", raw, testToken)
		expectProblem(t, resp, body, 400, "invalid Thing Description")
		invalid = append(invalid, save(name, raw))
	}
	var list []any
	h.getJSON("/things", 200, &list)
	if len(list) != 4 {
		t.Errorf("%d Things stored, want 4 (invalid samples must not be stored)", len(list))
	}

	// The hub's own validation, which includes the W3C TD 1.1 JSON Schema
	// (tdd-validation-jsonschema), accepts every TD it serves, the
	// directory TD included.
	for _, f := range served {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := hub.ParseDocument(raw)
		if err == nil {
			err = hub.Validate(doc)
		}
		if err != nil {
			t.Errorf("the hub's validation rejects %s it serves: %v %+v", filepath.Base(f), err, hub.ErrorFields(err))
		}
	}

	verdicts := tdPlayground(t, append(served, invalid...)...)
	for _, f := range served {
		if !verdicts[f] {
			t.Errorf("the TD playground rejects %s served by the hub", filepath.Base(f))
		}
	}
	for _, f := range invalid {
		if verdicts[f] {
			t.Errorf("the TD playground accepts %s", filepath.Base(f))
		}
	}
	if t.Failed() {
		t.Log(strings.Join(served, "\n"))
	}
}
