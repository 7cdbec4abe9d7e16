package e2e

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// curl, a client nobody in this project wrote, against the conditional
// requests of RFC 9110 (issue 11 point 7) and an unsupported content coding
// (tdd-http-unsupported-feature). Its own --etag-save/--etag-compare keep
// and send the ETag.
func TestRFC9110_Curl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl is needed (scripts/test-deps.sh installs it): %v", err)
	}
	h := startHub(t, nil)
	id := "urn:ex:curl"
	td := makeTD(id, "curl")
	h.put(id, td)
	dir := t.TempDir()
	url := h.URL + "/things/" + pathEscape(id)
	// run returns the HTTP status curl saw and the body; a curl failure
	// (exit != 0) fails the test.
	run := func(args ...string) (string, []byte) {
		t.Helper()
		out := filepath.Join(dir, "out")
		args = append([]string{"-sS", "-o", out, "-w", "%{http_code}", "-H", "Authorization: Bearer " + testToken}, args...)
		cmd := exec.Command(curl, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		code, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl %q: %v: %s", args, err, stderr.String())
		}
		body, _ := os.ReadFile(out)
		_ = os.Remove(out)
		return string(code), body
	}
	etag := filepath.Join(dir, "etag")
	if code, body := run("--etag-save", etag, url+"?enriched=false"); code != "200" || !bytes.Equal(body, td) {
		t.Fatalf("GET: %s %s", code, body)
	}
	if code, body := run("--etag-compare", etag, url+"?enriched=false"); code != "304" || len(body) != 0 {
		t.Errorf("GET with the saved ETag: %s %q, want 304 without body", code, body)
	}
	saved, _ := os.ReadFile(etag)
	tag := strings.TrimSpace(string(saved))
	// Another client changes the Thing; curl's If-Match is now stale.
	h.put(id, makeTD(id, "changed"))
	after, _, _ := h.stored(id)
	if code, body := run("-X", "PATCH", "-H", "Content-Type: application/merge-patch+json", "-H", "If-Match: "+tag,
		"--data-binary", `{"title":"curl"}`, url); code != "412" || !bytes.Contains(body, []byte("#precondition-failed")) {
		t.Errorf("PATCH with a stale If-Match: %s %s, want 412 precondition-failed", code, body)
	}
	if raw, _, _ := h.stored(id); !bytes.Equal(raw, after) {
		t.Errorf("stale PATCH changed the Thing: %s", raw)
	}
	// A gzip body.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(makeTD(id, "zipped"))
	_ = zw.Close()
	file := filepath.Join(dir, "td.json.gz")
	if err := os.WriteFile(file, gz.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := run("-X", "PUT", "-H", "Content-Type: application/td+json", "-H", "Content-Encoding: gzip",
		"--data-binary", "@"+file, url); code != "415" || !bytes.Contains(body, []byte(`\"gzip\"`)) {
		t.Errorf("gzip PUT: %s %s, want 415 naming gzip", code, body)
	}
	if raw, _, _ := h.stored(id); !bytes.Equal(raw, after) {
		t.Errorf("gzip PUT changed the Thing: %s", raw)
	}
}
