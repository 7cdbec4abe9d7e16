package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// busyHub is a hub (with TLS) that has done some of everything: MQTT and
// WebSocket joins, a refused join, HTTP requests and a refusal, an event
// stream, a group.
func busyHub(t *testing.T) *testHub {
	t.Helper()
	h := startTLSHub(t, nil)
	h.put(thermostatID, sample(t, "thermostat-agent.json"))
	h.do(http.MethodGet, "/things/urn:none", "", nil, "")
	c := h.MQTT(nil)
	c.MustJoin("urn:example:metrics-lamp", makeTD("urn:example:metrics-lamp", "Lamp"))
	if p := c.Join("urn:example:metrics-bad", []byte(`{"title":`), ""); !bytes.Contains(p, []byte(`"status"`)) {
		t.Fatalf("refused join result %s", p)
	}
	wsMember(t, h, "urn:example:metrics-ws") // closed with the hub
	s := h.openSSE("/events", "")
	h.put("urn:example:metrics-after", makeTD("urn:example:metrics-after", "After"))
	s.next(10 * time.Second)
	s.Close()
	h.startAgent(agentID)
	if resp, b := h.request("POST", actionPath(agentID, "addJSON"), "application/json", "", []byte(`{"a":1,"b":2}`), testToken); resp.StatusCode != 200 {
		t.Fatalf("invoke: %d %s", resp.StatusCode, b)
	}
	body := `{"id":"metrics","title":"Metrics","members":["urn:example:metrics-lamp"]}`
	if resp, b := h.do(http.MethodPost, "/api/groups", "application/json", []byte(body), testToken); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create group: %d %s", resp.StatusCode, b)
	}
	return h
}

// scrape reads the hub's /metrics.
func (h *testHub) scrape() []byte {
	h.t.Helper()
	resp, body := h.do(http.MethodGet, "/metrics", "", nil, "")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		h.t.Fatalf("/metrics: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return body
}

// exposition checks the Prometheus text exposition b: every sample belongs
// to a family announced by a non-empty # HELP and a # TYPE, each written
// once and before its samples. It returns the complaints and the families'
// types.
func exposition(b []byte) (bad []string, types map[string]string) {
	help, types := map[string]string{}, map[string]string{}
	seen := map[string]bool{} // families whose samples began
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "# HELP "), strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) < 3 {
				bad = append(bad, fmt.Sprintf("line %d: %q", n, line))
				continue
			}
			m := help
			if f[1] == "TYPE" {
				m = types
			}
			if _, dup := m[f[2]]; dup || seen[f[2]] {
				bad = append(bad, fmt.Sprintf("line %d: %s of %s again or after its samples", n, f[1], f[2]))
			}
			m[f[2]] = strings.Join(f[3:], " ")
		case strings.HasPrefix(line, "#"):
			bad = append(bad, fmt.Sprintf("line %d: unknown comment %q", n, line))
		default:
			name, _, _ := strings.Cut(line, " ")
			name, _, _ = strings.Cut(name, "{")
			fam := family(name, types)
			seen[fam] = true
			if help[fam] == "" || types[fam] == "" {
				bad = append(bad, fmt.Sprintf("line %d: %s has no HELP text or no TYPE (help %q, type %q)", n, name, help[fam], types[fam]))
			}
		}
	}
	for fam := range help {
		if types[fam] == "" {
			bad = append(bad, fmt.Sprintf("%s: HELP without TYPE", fam))
		}
	}
	return bad, types
}

// family is the family of the sample name: a histogram's or summary's
// _bucket, _sum and _count samples belong to the family without them.
func family(name string, types map[string]string) string {
	if _, ok := types[name]; ok {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suffix); ok {
			if t := types[f]; t == "histogram" || t == "summary" {
				return f
			}
		}
	}
	return name
}

// promtoolPath is Debian's promtool (package prometheus), which `make
// test` installs; without it the test skips unless CI or LMOS_INTEROP=1.
func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("promtool not installed (Debian prometheus; run scripts/test-deps.sh as root): %v", err)
		}
		t.Skip("skipping: needs promtool (Debian prometheus), which `make test` installs; set CI or LMOS_INTEROP=1 to make this a failure")
	}
	return p
}

// Every family of /metrics says what it counts (# HELP with a text) and
// its type, on a hub that has done some of everything.
func TestMetricsEveryFamilyDescribed(t *testing.T) {
	h := busyHub(t)
	body := h.scrape()
	bad, types := exposition(body)
	for _, b := range bad {
		t.Error(b)
	}
	for _, want := range []string{"lmos_http_requests_total", "lmos_mqtt_refused_total", "lmos_ws_connections", "process_resident_memory_bytes",
		"lmos_tls_handshake_failures_total", "lmos_group_channel_delivered_total", "go_goroutines", "lmos_joins_total", "lmos_joins_refused_total",
		"lmos_interactions_total", "lmos_interaction_duration_seconds", "lmos_presence_things", "lmos_mdns_announcements_total", "lmos_mdns_things_total",
		"process_open_fds", "lmos_verify_signatures_total"} {
		if types[want] == "" {
			t.Errorf("no family %s in /metrics", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// promtool check metrics finds nothing to complain of in /metrics.
func TestMetricsPromtoolClean(t *testing.T) {
	promtool := promtoolPath(t)
	h := busyHub(t)
	body := h.scrape()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// wantMetric fails unless series of /metrics reads want.
func wantMetric(t *testing.T, h *testHub, series string, want int) {
	t.Helper()
	if got := metricValue(t, h, series); got != want {
		t.Errorf("%s = %d, want %d", series, got, want)
	}
}

// Each join is counted by door and how it ended, a refused one also by
// reason; each routed interaction by the consumer's door, the Thing's
// transport and its outcome, and timed; presence is counted by status.
func TestMetricsCountJoinsAndInteractions(t *testing.T) {
	h := startHub(t, nil)
	accepted := `lmos_joins_total{door="mqtt",status="accepted"}`
	wantMetric(t, h, accepted, 0)
	wantMetric(t, h, `lmos_presence_things{status="online"}`, 0)
	h.startAgent(agentID)
	wantMetric(t, h, accepted, 1)
	wantMetric(t, h, `lmos_presence_things{status="online"}`, 1)

	c := h.MQTT(nil)
	if p := c.Join("urn:example:metrics-bad", []byte(`{"title":`), ""); !bytes.Contains(p, []byte(`"rejected"`)) {
		t.Fatalf("join of a broken TD: %s", p)
	}
	wantMetric(t, h, `lmos_joins_total{door="mqtt",status="rejected"}`, 1)
	wantMetric(t, h, `lmos_joins_refused_total{door="mqtt",reason="invalid"}`, 1)
	wantMetric(t, h, accepted, 1)

	wsMember(t, h, "urn:example:metrics-ws")
	wantMetric(t, h, `lmos_joins_total{door="ws",status="accepted"}`, 1)
	wantMetric(t, h, `lmos_presence_things{status="online"}`, 2)

	series := func(outcome string) string {
		return `lmos_interactions_total{door="http",transport="mqtt",outcome="` + outcome + `"}`
	}
	timed := `lmos_interaction_duration_seconds_count{transport="mqtt"}`
	for _, c := range []struct {
		action, input, outcome string
		status                 int
	}{
		{"addJSON", `{"a":1,"b":2}`, "completed", 200},
		{"fail", `{}`, "failed", 502},
	} {
		wantMetric(t, h, series(c.outcome), 0)
		if resp, body := h.request("POST", actionPath(agentID, c.action), "application/json", "", []byte(c.input), testToken); resp.StatusCode != c.status {
			t.Fatalf("%s: %d %s", c.action, resp.StatusCode, body)
		}
		wantMetric(t, h, series(c.outcome), 1)
	}
	wantMetric(t, h, timed, 2)
	// Refused before it reaches the Thing: counted, not timed.
	refused := `lmos_interactions_total{door="http",transport="none",outcome="refused"}`
	wantMetric(t, h, refused, 0)
	if resp, body := h.request("POST", actionPath(agentID, "order"), "application/json", "", []byte(`{"code":"x"}`), testToken); resp.StatusCode != 400 {
		t.Fatalf("order with a bad code: %d %s", resp.StatusCode, body)
	}
	wantMetric(t, h, refused, 1)
	wantMetric(t, h, timed, 2)
}

// An interaction the Thing never answers is counted as a timeout, and
// timed.
func TestMetricsCountTimeouts(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.ProxyTimeout = Duration(300 * time.Millisecond) })
	h.startAgent(agentID)
	series := `lmos_interactions_total{door="http",transport="mqtt",outcome="timeout"}`
	wantMetric(t, h, series, 0)
	if resp, body := h.request("POST", actionPath(agentID, "never"), "application/json", "", []byte(`{}`), testToken); resp.StatusCode != 504 {
		t.Fatalf("never: %d %s", resp.StatusCode, body)
	}
	wantMetric(t, h, series, 1)
	wantMetric(t, h, `lmos_interaction_duration_seconds_count{transport="mqtt"}`, 1)
}

// A join parked for approval is counted as pending.
func TestMetricsCountPendingJoins(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	pending := `lmos_joins_total{door="mqtt",status="pending"}`
	wantMetric(t, h, pending, 0)
	wantMetric(t, h, "lmos_join_pending", 0)
	c := h.MQTT(nil)
	if p := c.Join("urn:example:metrics-wait", makeTD("urn:example:metrics-wait", "Wait"), ""); !bytes.Contains(p, []byte(`"pending"`)) {
		t.Fatalf("join in approve mode: %s", p)
	}
	wantMetric(t, h, pending, 1)
	wantMetric(t, h, "lmos_join_pending", 1)
	wantMetric(t, h, `lmos_joins_total{door="mqtt",status="accepted"}`, 0)
}

// /healthz names mDNS among its components: "off" when turned off, "up"
// once it advertises; either way the hub is up.
func TestHealthzShowsMDNS(t *testing.T) {
	var health struct {
		Status     string
		Components map[string]string
	}
	off := startHub(t, nil)
	off.getJSON("/healthz", 200, &health)
	if health.Status != "up" || health.Components["mdns"] != "off" || health.Components["store"] != "up" {
		t.Fatalf("healthz with mdns off %+v", health)
	}
	// On an interface that does not exist nothing goes on the wire.
	on := startHub(t, func(c *Config) { c.MDNS.Enabled, c.MDNS.Interfaces = true, []string{"lmos-none0"} })
	waitFor(t, 10*time.Second, "mdns up on /healthz", func() bool {
		on.getJSON("/healthz", 200, &health)
		return health.Components["mdns"] == "up"
	})
	if health.Status != "up" {
		t.Fatalf("healthz with mdns up %+v", health)
	}
	wantMetric(t, on, "lmos_mdns_announcements_total", 0) // no interface to send on
}
