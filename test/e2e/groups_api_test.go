package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestGroupEventsOnBothFeeds: a whole hub, groups created, changed and
// dissolved through /api/groups while /api/events (SSE) and
// lmos/v1/hub/events (mosquitto_sub, MQTT 5) watch. Each feed gets every
// event, in the order the registry committed it, as the same object, and
// mosquitto_sub exits 0 once it has counted them all.
func TestGroupEventsOnBothFeeds(t *testing.T) {
	subBin := mosquittoTool(t, "mosquitto_sub")
	h := startHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")

	const events = 12
	// The retained hub status comes first: once it is printed, the
	// subscription to the events is in place too (one SUBSCRIBE).
	sub := exec.CommandContext(ctx, subBin, "-h", host, "-p", port, "-V", "5", "-v", "-C", "13", "-W", "30",
		"-t", "lmos/v1/hub/status", "-t", "lmos/v1/hub/events")
	var stderr bytes.Buffer
	sub.Stderr = &stderr
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "lmos/v1/hub/status ") {
		t.Fatalf("mosquitto_sub: first line %q, want the hub status (%s)", lines.Text(), stderr.String())
	}
	sse := h.openSSE("/api/events", "")

	call := func(method, path, ctype, body string, want int) {
		t.Helper()
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		resp, rb := h.do(method, path, ctype, b, testToken)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, rb, want)
		}
	}
	const a, b = "urn:example:grp-a", "urn:example:grp-b"
	h.put(a, makeTD(a, "A"))
	h.put(b, makeTD(b, "B"))
	call("POST", "/api/groups", "application/json", `{"id":"living","title":"Living room","members":["`+a+`"]}`, http.StatusCreated)
	call("PUT", "/api/groups/living/members/"+b, "", "", http.StatusOK)
	call("DELETE", "/api/groups/living/members/"+a, "", "", http.StatusNoContent)
	call("PATCH", "/api/groups/living", "application/merge-patch+json", `{"title":"Lounge"}`, http.StatusOK)
	call("DELETE", "/things/"+b, "", "", http.StatusNoContent)
	call("PUT", "/api/groups/living/members/"+a, "", "", http.StatusOK)
	call("DELETE", "/api/groups/living", "", "", http.StatusNoContent)
	want := []string{
		"thing_created " + a, "thing_created " + b,
		"group living created", "group living member_added " + a,
		"group living member_added " + b,
		"group living member_removed " + a,
		"group living updated",
		"thing_deleted " + b, "group living member_removed " + b,
		"group living member_added " + a,
		"group living member_removed " + a, "group living dissolved",
	}

	describe := func(data string) (string, map[string]any) {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		d := v["type"].(string) + " " + v["id"].(string)
		if g, ok := v["group"].(map[string]any); ok {
			d = "group " + g["group"].(string) + " " + g["action"].(string)
			if m, _ := g["member"].(string); m != "" {
				d += " " + m
			}
		}
		return d, v
	}
	var fromSSE, fromMQTT []map[string]any
	for i := range events {
		ev := sse.next(10 * time.Second)
		d, v := describe(ev.Data)
		if d != want[i] || ev.Type != v["type"] {
			t.Fatalf("/api/events #%d: %s %q, want %q", i, ev.Type, d, want[i])
		}
		fromSSE = append(fromSSE, v)
	}
	for i := range events {
		if !lines.Scan() {
			t.Fatalf("mosquitto_sub ended after %d events: %v %s", i, lines.Err(), stderr.String())
		}
		topic, payload, _ := strings.Cut(lines.Text(), " ")
		if topic != "lmos/v1/hub/events" {
			t.Fatalf("mosquitto_sub: topic %q", topic)
		}
		d, v := describe(payload)
		if d != want[i] {
			t.Fatalf("lmos/v1/hub/events #%d: %q, want %q", i, d, want[i])
		}
		fromMQTT = append(fromMQTT, v)
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("mosquitto_sub: %v %s", err, stderr.String())
	}
	for i := range events {
		if !reflect.DeepEqual(fromSSE[i], fromMQTT[i]) {
			t.Fatalf("event #%d differs:\nSSE  %v\nMQTT %v", i, fromSSE[i], fromMQTT[i])
		}
	}
}

// TestSSEr3labsHubEvents: /api/events read by github.com/r3labs/sse/v2 (a
// client nobody here wrote): every event owed arrives with its type and
// data, group events without an SSE id, keep-alives between them deliver
// nothing.
func TestSSEr3labsHubEvents(t *testing.T) {
	h := startHubHeartbeat(t, 10*time.Millisecond)
	s := openR3labs(t, h.URL+"/api/events")
	s.keepAlives(3)
	h.put("urn:ex:g1", makeTD("urn:ex:g1", "one"))
	if e := s.next("thing_created"); len(e.ID) == 0 {
		t.Errorf("thing_created without an id")
	}
	s.keepAlives(3)
	if resp, body := h.do(http.MethodPost, "/api/groups", "application/json", []byte(`{"id":"g","title":"G","members":["urn:ex:g1"]}`), testToken); resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	for _, action := range []string{"created", "member_added"} {
		e := s.next("group")
		var v struct{ Group struct{ Action string } }
		if err := json.Unmarshal(e.Data, &v); err != nil || v.Group.Action != action {
			t.Fatalf("group event %s: %v, want %s", e.Data, err, action)
		}
	}
	s.keepAlives(3)
	if resp, body := h.do(http.MethodDelete, "/api/groups/g", "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	s.next("group")
	s.next("group")
	s.keepAlives(3)
}
