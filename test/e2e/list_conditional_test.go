package e2e

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// getIfNoneMatch GETs path with If-None-Match: tag ("" sends none) with
// Go's client; it returns the status, the ETag and the body.
func getIfNoneMatch(t *testing.T, h *testHub, path, tag string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tag != "" {
		req.Header.Set("If-None-Match", tag)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("ETag"), body
}

// curlIfNoneMatch is the same with curl: status, ETag and body.
func curlIfNoneMatch(t *testing.T, curl string, h *testHub, path, tag string) (string, string, []byte) {
	t.Helper()
	dir := t.TempDir()
	body, hdrs := filepath.Join(dir, "body"), filepath.Join(dir, "headers")
	out, err := exec.Command(curl, "-sS", "-o", body, "-D", hdrs, "-w", "%{http_code}", "-H", "If-None-Match: "+tag, h.URL+path).Output()
	if err != nil {
		t.Fatalf("curl %s: %v", path, err)
	}
	b, _ := os.ReadFile(body)
	hd, _ := os.ReadFile(hdrs)
	etag := ""
	for _, l := range strings.Split(string(hd), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "ETag") {
			etag = strings.TrimSpace(v)
		}
	}
	return string(out), etag, b
}

// GET /things honours If-None-Match with the ETag it sends, for the whole
// listing and for each page: 304 with no body while nothing changed, 200
// with a new tag after a write, and after a presence change, which is no
// new revision of the collection but changes the body.
func TestListIfNoneMatch(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("curl not installed: %v", err)
		}
		t.Skip("curl not installed")
	}
	h := startHub(t, nil)
	h.Put("urn:ex:list-a", hubtest.BareTD("urn:ex:list-a", "A"))
	h.Put("urn:ex:list-b", hubtest.BareTD("urn:ex:list-b", "B"))
	for _, path := range []string{"/things", "/things?limit=1", "/things?offset=1&limit=1", "/things?format=collection"} {
		code, tag, _ := getIfNoneMatch(t, h, path, "")
		if code != http.StatusOK || !strings.HasPrefix(tag, `W/"`) {
			t.Fatalf("GET %s: %d, ETag %q", path, code, tag)
		}
		if code, tag2, body := getIfNoneMatch(t, h, path, tag); code != http.StatusNotModified || len(body) != 0 || tag2 != tag {
			t.Errorf("GET %s If-None-Match %s (Go): %d, ETag %q, %d bytes; want 304, the same tag, no body", path, tag, code, tag2, len(body))
		}
		if code, tag2, body := curlIfNoneMatch(t, curl, h, path, tag); code != "304" || len(body) != 0 || tag2 != tag {
			t.Errorf("GET %s If-None-Match %s (curl): %s, ETag %q, %d bytes; want 304, the same tag, no body", path, tag, code, tag2, len(body))
		}
		if code, _, _ := getIfNoneMatch(t, h, path, `W/"0-0000000000000000", `+tag); code != http.StatusNotModified {
			t.Errorf("GET %s with the tag in a list: %d, want 304", path, code)
		}
		if code, _, body := getIfNoneMatch(t, h, path, `W/"12345"`); code != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s with another tag: %d, %d bytes", path, code, len(body))
		}
	}

	_, before, _ := getIfNoneMatch(t, h, "/things", "")
	h.Put("urn:ex:list-c", hubtest.BareTD("urn:ex:list-c", "C"))
	code, after, body := getIfNoneMatch(t, h, "/things", before)
	if code != http.StatusOK || after == before || !strings.Contains(string(body), "urn:ex:list-c") {
		t.Errorf("after a PUT: %d, ETag %q (was %q)", code, after, before)
	}
	if code, _, _ := curlIfNoneMatch(t, curl, h, "/things", before); code != "200" {
		t.Errorf("after a PUT (curl): %s, want 200", code)
	}

	// A presence change: the agent joins, then says it is online (or
	// offline, if the join already made it online).
	const id = "urn:ex:list-agent"
	creds := h.mqttDial(nil).join(id, makeTD(id, "Agent"))
	agent := h.mqttDial(mqttclient.WithCreds(creds.Username, creds.Password))
	was, _ := h.Presence(id)
	want := map[bool]string{true: "offline", false: "online"}[was == "online"]
	_, joined, _ := getIfNoneMatch(t, h, "/things", "")
	agent.pub("lmos/v1/things/"+id+"/status", []byte(want), true)
	waitFor(t, 30*time.Second, "the agent "+want, func() bool { s, _ := h.Presence(id); return s == want })
	code, now, body := getIfNoneMatch(t, h, "/things", joined)
	if code != http.StatusOK || now == joined || !strings.Contains(string(body), `"`+want+`"`) {
		t.Errorf("after a presence change: %d, ETag %q (was %q); want 200 with the new presence", code, now, joined)
	}
}
