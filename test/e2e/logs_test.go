package e2e

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// loggedHub is a hub logging JSON at info into a buffer, on a clock the
// test moves.
type loggedHub struct {
	*testHub
	log *hubtest.SyncBuffer
	mu  sync.Mutex
	now time.Time
}

func startLoggedHub(t *testing.T, edit func(*Config)) *loggedHub {
	t.Helper()
	cfg := hubtest.Config(t.TempDir())
	if edit != nil {
		edit(&cfg)
	}
	lh := &loggedHub{log: &hubtest.SyncBuffer{}, now: time.Now()}
	m := app.NewMain(cfg, io.Discard, slog.New(slog.NewJSONHandler(lh.log, &slog.HandlerOptions{Level: slog.LevelInfo})))
	m.Now = func() time.Time { lh.mu.Lock(); defer lh.mu.Unlock(); return lh.now }
	lh.testHub = runHub(t, m)
	return lh
}

// advance moves the hub's clock on by d.
func (lh *loggedHub) advance(d time.Duration) {
	lh.mu.Lock()
	defer lh.mu.Unlock()
	lh.now = lh.now.Add(d)
}

// records returns the log records whose msg is msg; every line must be
// a JSON object.
func (lh *loggedHub) records(msg string) []map[string]any {
	lh.t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(lh.log.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			lh.t.Fatalf("log line is not JSON: %q", line)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// wantRecords fails unless exactly n records say msg, and returns them.
func (lh *loggedHub) wantRecords(msg string, n int) []map[string]any {
	lh.t.Helper()
	recs := lh.records(msg)
	if len(recs) != n {
		lh.t.Fatalf("%d log records %q, want %d:\n%s", len(recs), msg, n, lh.log.String())
	}
	return recs
}

// wantFields fails unless rec holds each field with its value.
func wantFields(t *testing.T, rec map[string]any, fields map[string]any) {
	t.Helper()
	for k, v := range fields {
		if rec[k] != v {
			t.Errorf("log record %v: %s = %v, want %v", rec, k, rec[k], v)
		}
	}
}

// Every join is logged at info: accepted, refused and why (at most one
// line per source address and 10 s, the next one counting those held
// back), and a Thing taken over by a new connection.
func TestLogJoins(t *testing.T) {
	h := startLoggedHub(t, nil)
	c := h.MQTT(nil)
	c.MustJoin("urn:example:log-lamp", makeTD("urn:example:log-lamp", "Lamp"))
	rec := h.wantRecords("join accepted", 1)[0]
	wantFields(t, rec, map[string]any{"level": "INFO", "door": "mqtt", "id": "urn:example:log-lamp", "created": true, "component": "join"})
	if addr, _ := rec["addr"].(string); !strings.HasPrefix(addr, "127.0.0.1") {
		t.Errorf("join accepted addr %v", rec["addr"])
	}

	for range 5 {
		c.Join("urn:example:log-bad", []byte(`{"title":`), "")
	}
	rec = h.wantRecords("join refused", 1)[0]
	wantFields(t, rec, map[string]any{"door": "mqtt", "id": "urn:example:log-bad", "reason": "invalid"})
	if _, ok := rec["suppressed"]; ok {
		t.Errorf("first refusal line says suppressed: %v", rec)
	}
	h.advance(11 * time.Second)
	c.Join("urn:example:log-bad", []byte(`{"title":`), "")
	recs := h.wantRecords("join refused", 2)
	wantFields(t, recs[1], map[string]any{"reason": "invalid", "suppressed": float64(4)})

	// The WebSocket door: a registration, then, once that connection is
	// gone, another connection taking the Thing over.
	w := wsMember(t, h.testHub, "urn:example:log-ws")
	wantFields(t, h.wantRecords("join accepted", 2)[1], map[string]any{"door": "ws", "id": "urn:example:log-ws", "created": true})
	h.wantRecords("thing taken over by a new connection", 0)
	w.c.CloseNow()
	waitFor(t, 5*time.Second, "the agent offline", func() bool { s, _ := h.presenceOf("urn:example:log-ws"); return s == "offline" })
	wsMember(t, h.testHub, "urn:example:log-ws")
	wantFields(t, h.wantRecords("thing taken over by a new connection", 1)[0], map[string]any{"door": "ws", "id": "urn:example:log-ws"})
}

// A join parked for approval is logged at info.
func TestLogPendingJoin(t *testing.T) {
	h := startLoggedHub(t, func(c *Config) { c.Join.Mode = "approve" })
	h.MQTT(nil).Join("urn:example:log-wait", makeTD("urn:example:log-wait", "Wait"), "")
	wantFields(t, h.wantRecords("join waits for approval", 1)[0], map[string]any{"level": "INFO", "door": "mqtt", "id": "urn:example:log-wait"})
}

// MQTT access refusals are logged at most once per client and 10 s, the
// next line counting those held back; a client id taken over by a new
// connection is logged.
func TestLogMQTTRefusalsAndTakeover(t *testing.T) {
	h := startLoggedHub(t, nil)
	c := h.MQTT(&paho.Connect{ClientID: "log-client", CleanStart: true})
	for range 5 {
		if _, err := c.Sub("not/lmos"); err == nil {
			t.Fatal("subscription outside lmos/ granted")
		}
	}
	rec := h.wantRecords("mqtt access refused", 1)[0]
	wantFields(t, rec, map[string]any{"level": "INFO", "client": "log-client", "op": "subscribe", "topic": "not/lmos", "reason": "acl"})
	h.advance(11 * time.Second)
	c.Sub("not/lmos")
	wantFields(t, h.wantRecords("mqtt access refused", 2)[1], map[string]any{"client": "log-client", "suppressed": float64(4)})

	mqttclient.MustDial(t, h.MQTTAddr(), &paho.Connect{ClientID: "log-client", CleanStart: true})
	waitFor(t, 5*time.Second, "the takeover logged", func() bool { return len(h.records("mqtt client id taken over by a new connection")) == 1 })
	wantFields(t, h.records("mqtt client id taken over by a new connection")[0], map[string]any{"client": "log-client"})
}
