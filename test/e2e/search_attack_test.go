package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// Issue 12, point 1: "one query takes the hub down". Each test performs the
// attack, scaled down, over the real doors with clients nobody here wrote
// (Python paho, Go's net/http as any HTTP client).

// withMember returns td with one more top-level member.
func withMember(td []byte, name, value string) []byte {
	return append(bytes.TrimSuffix(bytes.TrimSpace(td), []byte("}")), []byte(`,"`+name+`":`+value+`}`)...)
}

// deepValue nests n objects.
func deepValue(n int) string {
	return strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n)
}

// heavySearch selects nothing, so only a budget or the client's going
// away stops it.
const heavySearch = `$..*..*..[?@=='no such value']`

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, so the hub sees another client.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
}

func (h *testHub) search(c *http.Client, ctx context.Context, query string) (*http.Response, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.URL+"/search/jsonpath?query="+url.QueryEscape(query), nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

type problemBody struct {
	Type             string `json:"type"`
	Status           int    `json:"status"`
	ValidationErrors []struct {
		Field string `json:"field"`
	} `json:"validationErrors"`
}

// pahoJoin publishes td for id with Python paho-mqtt (MQTT 3.1.1) and
// returns the join result; any client error fails the test.
func pahoJoin(t *testing.T, h *testHub, id string, td []byte) []byte {
	t.Helper()
	file := filepath.Join(t.TempDir(), "td.json")
	if err := os.WriteFile(file, td, 0o600); err != nil {
		t.Fatal(err)
	}
	topic := "lmos/v1/things/" + lmos.TopicKey(id) + "/td"
	const script = `
import sys, paho.mqtt.client as mqtt
host, port, topic, file = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
out = {}
def on_connect(c, u, f, rc):
    if rc != 0: sys.exit("connect rc %d" % rc)
    c.subscribe(topic + "/result", 1)
def on_subscribe(c, u, mid, qos):
    if qos[0] > 2: sys.exit("subscribe refused")
    c.publish(topic, open(file, "rb").read(), qos=1)
def on_message(c, u, m):
    out["r"] = m.payload
    c.disconnect()
def on_disconnect(c, u, rc):
    if rc != 0: sys.exit("disconnect rc %d" % rc)
c = mqtt.Client(client_id="deep-joiner", protocol=mqtt.MQTTv311)
c.on_connect, c.on_subscribe, c.on_message, c.on_disconnect = on_connect, on_subscribe, on_message, on_disconnect
c.connect(host, port)
c.loop_forever()
sys.stdout.buffer.write(out["r"])
`
	out, _ := runPaho(t, h, 20*time.Second, script, topic, file)
	return out
}

// TestAttackDeepTDThenDescendantSearch: the attack — an anonymous
// TD nested thousands deep joined over MQTT, then `$..*` — is refused at
// the door with the pointer where the depth is exceeded, on HTTP (PUT and
// merge patch) too, so the query stays small.
func TestAttackDeepTDThenDescendantSearch(t *testing.T) {
	h := startHub(t, nil)
	const id = "urn:example:deep"
	deep := withMember(makeTD(id, "Deep"), "x", deepValue(2000))

	var res struct {
		Status  string      `json:"status"`
		Problem problemBody `json:"problem"`
	}
	raw := pahoJoin(t, h, id, deep)
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("join result %s: %v", raw, err)
	}
	// The root is level 1, the value of "x" level 2: the value of the
	// 31st "a" is the 33rd level.
	wantPtr := "/x" + strings.Repeat("/a", 31)
	if res.Status != "rejected" || res.Problem.Status != 400 || !strings.HasSuffix(res.Problem.Type, "invalid") ||
		len(res.Problem.ValidationErrors) != 1 || res.Problem.ValidationErrors[0].Field != wantPtr {
		t.Fatalf("deep join: %s", raw)
	}
	if got := h.metric(`lmos_mqtt_refused_total{reason="registry.maxDepth"}`); got != 1 {
		t.Errorf("MQTT refusals for registry.maxDepth: %v", got)
	}

	// HTTP PUT, and a merge patch that would make a stored TD deep.
	resp, body := h.do(http.MethodPut, "/things/"+pathEscape(id), "application/td+json", deep, testToken)
	var p problemBody
	_ = json.Unmarshal(body, &p)
	if resp.StatusCode != 400 || len(p.ValidationErrors) != 1 || p.ValidationErrors[0].Field != wantPtr {
		t.Errorf("deep PUT: %d %s", resp.StatusCode, body)
	}
	h.put(id, makeTD(id, "Shallow"))
	resp, body = h.do(http.MethodPatch, "/things/"+pathEscape(id), "application/merge-patch+json", []byte(`{"x":`+deepValue(2000)+`}`), testToken)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "registry.maxDepth") && !strings.Contains(string(body), "levels") {
		t.Errorf("deep merge patch: %d %s", resp.StatusCode, body)
	}
	if got := h.metric(`lmos_http_refused_total{reason="registry.maxDepth"}`); got != 2 {
		t.Errorf("HTTP refusals for registry.maxDepth: %v", got)
	}

	// `$..*` over what is stored stays small and cheap.
	resp, body, err := h.search(http.DefaultClient, context.Background(), `$..*`)
	if err != nil || resp.StatusCode != 200 || len(body) > 64<<10 {
		t.Fatalf("$..*: %v %v, %d bytes", err, resp, len(body))
	}
}

// heapPeak samples the heap's live and unswept objects until the returned
// function is called, which reports how far the heap grew above its size
// at the start.
func heapPeak(t *testing.T) func() uint64 {
	t.Helper()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	start := read()
	var peak uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		if peak < start {
			return 0
		}
		return peak - start
	}
}

// TestAttackDescendantSearchOverOrdinaryTDs: `$..*..*..*` over the shared
// sample TDs is 400 by default (too many descendant segments).
func TestAttackDescendantSearchOverOrdinaryTDs(t *testing.T) {
	h := startHub(t, nil)
	for _, name := range []string{"thermostat-agent.json", "diagnostics-tool.json", "chat-agent.json"} {
		td := sample(t, name)
		var v struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(td, &v)
		h.put(v.ID, td)
	}
	resp, body, err := h.search(http.DefaultClient, context.Background(), `$..*..*..*`)
	var p problemBody
	if err != nil || resp.StatusCode != 400 || json.Unmarshal(body, &p) != nil || !strings.HasSuffix(p.Type, "invalid") ||
		!strings.Contains(string(body), "descendant") {
		t.Errorf("$..*..*..*: %v %v %.300s", err, resp, body)
	}
	if got := h.metric(`lmos_http_refused_total{reason="search.maxDescendants"}`); got != 1 {
		t.Errorf("refusals for search.maxDescendants: %v", got)
	}
	// Two descendant segments over ordinary TDs are answered.
	if resp, body, err := h.search(http.DefaultClient, context.Background(), `$..*..*`); err != nil || resp.StatusCode != 200 || !json.Valid(body) {
		t.Errorf("$..*..*: %v %v %.300s", err, resp, body)
	}
}

// TestAttackSearchBudgets: with three descendant segments allowed, wide
// TDs within the depth limit make `$..*..*..*` hit the 16 MiB byte budget
// after the status went out (the response is aborted), and heavySearch
// the node budget before any byte (503 with Retry-After), while another client is answered
// meanwhile and no answer is held whole in memory.
func TestAttackSearchBudgets(t *testing.T) {
	h := startHub(t, func(c *Config) {
		c.Search.MaxDescendants = 3
		c.Search.Timeout = Duration(time.Minute) // budgets decide, not the machine's speed
	})
	const wide = 20 // heavySearch visits ~600k nodes in each
	for i := range wide {
		id := fmt.Sprintf("urn:example:wide%d", i)
		h.put(id, withMember(makeTD(id, "Wide"), "x", tdgen.Nested(28, 100)))
	}
	other := clientFrom("127.0.0.2")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered int
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, body, err := h.search(other, context.Background(), `$[*].id`)
			var got []string
			if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || len(got) != wide {
				t.Errorf("other client meanwhile: %v %v %s", err, resp, body)
				return
			}
			answered++
		}
	})
	// The answer is streamed: the byte budget runs out after the status
	// went out, so the response is aborted and the client sees a broken
	// body, never a shorter array that looks whole.
	peak := heapPeak(t)
	resp, body, err := h.search(http.DefaultClient, context.Background(), `$..*..*..*`)
	grew := peak()
	if resp == nil || resp.StatusCode != 200 || err == nil || json.Valid(body) || len(body) > 16<<20 {
		t.Errorf("$..*..*..*: %v %v, %d bytes", err, resp, len(body))
	}
	if got := h.metric(`lmos_http_refused_total{reason="search.maxResultBytes"}`); got != 1 {
		t.Errorf("refusals for search.maxResultBytes: %v", got)
	}
	// The answer was never held whole: the heap grew by the client's copy
	// of the body (16 MiB) and garbage, not by an answer built in memory.
	t.Logf("heap grew by %d MB at most", grew>>20)
	if grew > 96<<20 {
		t.Errorf("the heap grew by %d MB", grew>>20)
	}
	// A search that runs out of nodes before its first byte is a clear 503.
	var p problemBody
	resp, body, err = h.search(http.DefaultClient, context.Background(), heavySearch)
	if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || json.Unmarshal(body, &p) != nil || !strings.HasSuffix(p.Type, "unavailable") {
		t.Errorf("heavy search: %v %v %.300s", err, resp, body)
	}
	if got := h.metric(`lmos_http_refused_total{reason="search.maxNodes"}`); got != 1 {
		t.Errorf("refusals for search.maxNodes: %v", got)
	}
	close(stop)
	wg.Wait()
	if answered == 0 {
		t.Error("the other client got no answer meanwhile")
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heavyHub has n Things that heavySearch takes seconds over, with budgets
// so large that only the client's going away stops it.
func heavyHub(t *testing.T, n int, edit func(*Config)) *testHub {
	h := startHub(t, func(c *Config) {
		c.Search.MaxDescendants = 3
		c.Search.MaxNodes = 1 << 40
		c.Search.MaxResultBytes = 1 << 40
		c.Search.Timeout = Duration(10 * time.Minute)
		if edit != nil {
			edit(c)
		}
	})
	x := tdgen.Nested(28, 100)
	for i := range n {
		id := fmt.Sprintf("urn:example:heavy%d", i)
		h.put(id, withMember(makeTD(id, "Heavy"), "x", x))
	}
	return h
}

// TestAttackAbandonedSearchStops: a client that gives up on a heavy query
// leaves no work behind: the search ends, and the hub's CPU goes idle.
func TestAttackAbandonedSearchStops(t *testing.T) {
	h := heavyHub(t, 100, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := h.search(http.DefaultClient, ctx, heavySearch)
		done <- err
	}()
	waitFor(t, 10*time.Second, "the search is running", func() bool {
		_, nodes := h.Main.Registry.SearchStats()
		return nodes > 100_000
	})
	cancel()
	<-done
	// The hub notices the closed connection and stops; then nothing runs.
	waitFor(t, 2*time.Second, "the abandoned search ends", func() bool {
		running, _ := h.Main.Registry.SearchStats()
		return running == 0
	})
	_, nodes := h.Main.Registry.SearchStats()
	cpu := cpuTime(t)
	time.Sleep(300 * time.Millisecond)
	if used := cpuTime(t) - cpu; used > 150*time.Millisecond {
		t.Errorf("the hub used %v of CPU in 300ms after the client left", used)
	}
	if _, later := h.Main.Registry.SearchStats(); later != nodes {
		t.Errorf("%d nodes visited after the search ended", later-nodes)
	}
}

// TestAttackParallelSearchesOneClient: one client's searches beyond
// search.maxConcurrentPerClient get 429 at once, while another client is
// served.
func TestAttackParallelSearchesOneClient(t *testing.T) {
	h := heavyHub(t, 100, func(c *Config) { c.Search.MaxConcurrent = 4 })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { _, _, _ = h.search(http.DefaultClient, ctx, heavySearch) })
	}
	waitFor(t, 10*time.Second, "two heavy searches running", func() bool {
		running, _ := h.Main.Registry.SearchStats()
		return running == 2
	})
	quick := &http.Client{Timeout: 5 * time.Second}
	var extra sync.WaitGroup
	for range 3 {
		extra.Go(func() {
			resp, body, err := h.search(quick, context.Background(), heavySearch)
			var p problemBody
			if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" ||
				json.Unmarshal(body, &p) != nil || !strings.HasSuffix(p.Type, "rate-limited") {
				t.Errorf("extra search: %v %v %s", err, resp, body)
			}
		})
	}
	extra.Wait()
	resp, body, err := h.search(clientFrom("127.0.0.2"), context.Background(), `$[*].id`)
	var ids []string
	if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &ids) != nil || len(ids) != 100 {
		t.Errorf("other client: %v %v %.200s", err, resp, body)
	}
	cancel()
	wg.Wait()
	waitFor(t, 2*time.Second, "the heavy searches end", func() bool {
		running, _ := h.Main.Registry.SearchStats()
		return running == 0
	})
	if got := h.metric(`lmos_http_refused_total{reason="search.maxConcurrentPerClient"}`); got != 3 {
		t.Errorf("refusals for search.maxConcurrentPerClient: %v", got)
	}
	if resp, _, err := h.search(quick, context.Background(), `$[0].id`); err != nil || resp.StatusCode != 200 {
		t.Errorf("the client after its searches ended: %v %v", err, resp)
	}
}

// TestDeepTDOverWebSocket: registerThing with a TD one level too deep is
// refused with the pointer under /td, JSON and CBOR alike, and nothing is
// stored.
func TestDeepTDOverWebSocket(t *testing.T) {
	h := startHub(t, nil)
	w := h.wsDial("lmosprotocol", nil)
	td := wsTD("urn:uuid:5b0d6c1e-0000-4000-8000-00000000d001")
	var x any = 1
	for range 32 { // the value of "x" is level 2: 32 objects reach level 33
		x = map[string]any{"a": x}
	}
	td["x"] = x
	r := w.reply(w.send(map[string]any{"messageType": "registerThing", "td": td}, false))
	expectWSError(t, r, 400, "invalid", "deeper than 32")
	ve, _ := r["validationErrors"].([]any)
	if len(ve) != 1 || !strings.HasSuffix(fmt.Sprint(ve[0].(map[string]any)["field"]), "/x"+strings.Repeat("/a", 31)) {
		t.Errorf("validationErrors %v", r["validationErrors"])
	}
	if n := h.Main.Registry.Count(); n != 0 {
		t.Errorf("a deep TD was stored (%d Things)", n)
	}
	if got := h.metric(`lmos_ws_refused_total{reason="registry.maxDepth"}`); got != 1 {
		t.Errorf("WebSocket refusals for registry.maxDepth: %v", got)
	}
}
