package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/fxamacker/cbor/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// paddedTD is makeTD(id) grown to about size bytes with properties (each
// one more member to parse and summarise, as in issue 12's attack).
func paddedTD(t *testing.T, id string, size int) []byte {
	t.Helper()
	var td map[string]any
	if err := json.Unmarshal(makeTD(id, "padded"), &td); err != nil {
		t.Fatal(err)
	}
	props := map[string]any{}
	for i := 0; len(props)*52 < size; i++ {
		props[fmt.Sprintf("p%d", i)] = map[string]any{"type": "integer", "forms": []any{map[string]any{"href": "/p"}}}
	}
	td["properties"] = props
	b, err := json.Marshal(td)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pahoFloodScript publishes each (topic, content type, payload file) as one
// anonymous Paho client, waits for each join's result and prints it; any
// protocol error exits non-zero.
const pahoFloodScript = `
import sys, queue
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
host, port = sys.argv[1], int(sys.argv[2])
q, ready = queue.Queue(), queue.Queue()
c = mqtt.Client(client_id="flood-%s" % sys.argv[3], protocol=mqtt.MQTTv5)
def on_connect(c, u, f, rc, p=None):
    if rc != 0: sys.exit("connect rc %s" % rc)
    ready.put(True)
def on_subscribe(c, u, mid, rcs, p=None):
    ready.put([r.value for r in rcs])
def on_disconnect(c, u, rc, p=None):
    q.put(("disconnect", rc))
c.on_connect, c.on_subscribe, c.on_disconnect = on_connect, on_subscribe, on_disconnect
c.on_message = lambda c, u, m: q.put(("msg", m.payload.decode()))
c.connect(host, port, keepalive=30)
c.loop_start()
ready.get(timeout=10)
args = sys.argv[4:]
for i in range(0, len(args), 3):
    topic = args[i]
    c.subscribe(topic + "/result", qos=1)
    rcs = ready.get(timeout=10)
    if any(r >= 0x80 for r in rcs): sys.exit("subscribe refused %s" % rcs)
    props = Properties(PacketTypes.PUBLISH)
    props.ContentType = args[i+1]
    info = c.publish(topic, open(args[i+2], "rb").read(), qos=1, properties=props)
    info.wait_for_publish(timeout=10)
    if not info.is_published(): sys.exit("publish %d not acknowledged" % i)
    kind, v = q.get(timeout=20)
    if kind != "msg": sys.exit("disconnected rc %s" % v)
    print(v, flush=True)
    c.unsubscribe(topic + "/result")
c.disconnect()
c.loop_stop()
`

type floodJoin struct {
	id, contentType string
	payload         []byte
}

type floodResult struct {
	Status  string `json:"status"`
	Problem struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	} `json:"problem"`
}

// pahoFlood joins each of joins in turn from one Python Paho client.
func pahoFlood(t *testing.T, h *testHub, name string, joins []floodJoin) []floodResult {
	t.Helper()
	out, _ := runPaho(t, h, 60*time.Second, pahoFloodScript, append([]string{name}, joinArgs(t, joins, true)...)...)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(joins) {
		t.Fatalf("paho got %d results, want %d: %s", len(lines), len(joins), out)
	}
	res := make([]floodResult, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &res[i]); err != nil {
			t.Fatalf("result %q: %v", l, err)
		}
	}
	return res
}

// TestTDSizeLimitOnEveryDoor: issue 12 found the 256 KiB TD limit held
// over HTTP only. One limit, registry.maxTDBytes, now refuses a larger TD
// on HTTP (even with a larger http.maxBodyBytes), on an MQTT join (JSON
// and CBOR, Eclipse Paho for Python) and on WebSocket registerThing, each
// counted by that limit's name, and nothing is stored.
func TestTDSizeLimitOnEveryDoor(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.MaxBodyBytes = 1 << 20 })
	const id = "urn:example:oversized"
	big := paddedTD(t, id, 300<<10)
	if len(big) <= hub.DefaultMaxTDBytes {
		t.Fatalf("test TD of %d bytes is within the limit", len(big))
	}
	before := h.snapshot()

	resp, body := h.do(http.MethodPut, "/things/"+pathEscape(id), "application/td+json", big, testToken)
	expectProblem(t, resp, body, http.StatusRequestEntityTooLarge, "registry.maxTDBytes")
	var anon map[string]any
	_ = json.Unmarshal(big, &anon)
	delete(anon, "id")
	anonRaw, _ := json.Marshal(anon)
	resp, body = h.do(http.MethodPost, "/things", "application/td+json", anonRaw, testToken)
	expectProblem(t, resp, body, http.StatusRequestEntityTooLarge, "registry.maxTDBytes")

	var doc any // CBOR is denser: a larger document to be over the limit
	_ = json.Unmarshal(paddedTD(t, id, 400<<10), &doc)
	cborBig, err := cbor.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range pahoFlood(t, h, "size", []floodJoin{{id, "application/td+json", big}, {id, "application/cbor", cborBig}}) {
		if r.Status != "rejected" || r.Problem.Status != 413 || !strings.Contains(r.Problem.Detail, "registry.maxTDBytes") {
			t.Errorf("MQTT join %d: %+v, want rejected with 413 naming registry.maxTDBytes", i, r)
		}
	}

	w := h.wsDial("lmosprotocol", nil)
	td := wsTD(id)
	td["description"] = strings.Repeat("x", 300<<10)
	expectWSError(t, w.reply(w.send(map[string]any{"messageType": "registerThing", "td": td}, false)),
		http.StatusRequestEntityTooLarge, hub.ETOOLARGE, "registry.maxTDBytes")

	if after := h.snapshot(); after != before {
		t.Errorf("state changed:\nbefore %s\nafter  %s", before, after)
	}
	for name, want := range map[string]float64{
		`lmos_http_refused_total{reason="registry.maxTDBytes"}`: 2,
		`lmos_mqtt_refused_total{reason="registry.maxTDBytes"}`: 2,
		`lmos_ws_refused_total{reason="registry.maxTDBytes"}`:   1,
	} {
		if got := h.metric(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// dirSize is the bytes of the files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestAnonymousFloodIsBoundedOnDiskAndAtRestart is issue 12's 300
// anonymous 1 MB joins in 10 s (744 MB on disk, 737 MB resident after a
// restart), scaled down: 60 joins of 200 KB from one anonymous Paho client
// against a hub whose registry.maxBytes is 2 MiB. The flood is refused with
// 507 once the quota is used, the data directory stays within a small
// multiple of the quota (bbolt's file doubles as it grows), and the restarted hub's heap grows by no more
// than the stored documents (summaries, never the documents, are loaded).
func TestAnonymousFloodIsBoundedOnDiskAndAtRestart(t *testing.T) {
	const maxBytes = 2 << 20
	edit := func(c *Config) { c.Registry.MaxBytes = maxBytes }
	h := startHub(t, edit)
	var joins []floodJoin
	for i := range 60 {
		id := fmt.Sprintf("urn:example:flood:%d", i)
		joins = append(joins, floodJoin{id, "application/td+json", paddedTD(t, id, 200<<10)})
	}
	accepted, full := 0, 0
	for _, r := range pahoFlood(t, h, "bytes", joins) {
		switch {
		case r.Status == "accepted":
			accepted++
		case r.Problem.Status == 507 && strings.Contains(r.Problem.Detail, "registry.maxBytes"):
			full++
		default:
			t.Errorf("flood join: %+v", r)
		}
	}
	if accepted == 0 || accepted*len(joins[0].payload) > maxBytes || full != len(joins)-accepted {
		t.Errorf("flood: %d accepted, %d refused full, of %d", accepted, full, len(joins))
	}
	if got := h.metric(`lmos_mqtt_refused_total{reason="registry.maxBytes"}`); int(got) != full {
		t.Errorf("refusals counted %v, want %d", got, full)
	}
	h.Close()
	size := dirSize(t, h.Dir)
	offered := len(joins) * len(joins[0].payload)
	t.Logf("offered %d bytes; data dir %d bytes with %d Things", offered, size, accepted)
	// bbolt doubles its file up to the size it needs: a quarter of the
	// file can be free pages.
	if size > 4*maxBytes+(1<<20) {
		t.Errorf("data dir %d bytes, want at most %d", size, 4*maxBytes+(1<<20))
	}

	base := heapInUse()
	h2 := startHubIn(t, h.Dir, edit)
	// The MCP door reads each Thing once after the start, one document
	// at a time: measure once it has (mid-read, a document being read is
	// in the heap too).
	<-h2.Main.MCP.Ready()
	grown := int64(heapInUse()) - int64(base)
	t.Logf("heap in use after restart: +%d bytes for %d Things", grown, accepted)
	if grown > maxBytes+(4<<20) {
		t.Errorf("restart grew the heap by %d bytes, more than the documents' quota", grown)
	}
	var st map[string]any
	h2.getJSON("/api/status", 200, &st)
	if n, _ := st["things"].(float64); int(n) != accepted {
		t.Errorf("after restart %v Things, want %d", st["things"], accepted)
	}
	// Still full after the restart: the count was restored from the store.
	if r := pahoFlood(t, h2, "again", joins[len(joins)-1:]); r[0].Problem.Status != 507 {
		t.Errorf("join after restart: %+v", r[0])
	}
}

// TestWSRegisterHitsSourceQuota: WebSocket registerThing is an anonymous
// write counted against the connection's address: past
// registry.maxThingsPerSource it gets an error 507 and nothing is stored.
func TestWSRegisterHitsSourceQuota(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Registry.MaxThingsPerSource = 2 })
	w := h.wsDial("lmosprotocol", nil)
	for i := range 2 {
		id := fmt.Sprintf("urn:example:ws-quota:%d", i)
		if r := w.reply(w.send(map[string]any{"messageType": "registerThing", "td": wsTD(id)}, false)); r["messageType"] == "error" {
			t.Fatalf("register %s: %v", id, r)
		}
	}
	before := h.snapshot()
	w2 := h.wsDial("lmosprotocol", nil) // another connection, the same address
	expectWSError(t, w2.reply(w2.send(map[string]any{"messageType": "registerThing", "td": wsTD("urn:example:ws-quota:2")}, false)),
		http.StatusInsufficientStorage, hub.EFULL, "registry.maxThingsPerSource")
	if after := h.snapshot(); after != before {
		t.Errorf("state changed:\nbefore %s\nafter  %s", before, after)
	}
	if got := h.metric(`lmos_ws_refused_total{reason="registry.maxThingsPerSource"}`); got != 1 {
		t.Errorf("refusals counted %v, want 1", got)
	}
}

// pahoTimedScript joins each (topic, payload file) from one Python Paho
// client bound to a local address, publishing them all before waiting,
// and prints each result with the CLOCK_MONOTONIC time it arrived (shared
// by the processes of this machine, so two runs can be ordered).
const pahoTimedScript = `
import sys, time, queue
import paho.mqtt.client as mqtt
host, port, bind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pairs = [(sys.argv[i], sys.argv[i+1]) for i in range(4, len(sys.argv), 2)]
q, ready = queue.Queue(), queue.Queue()
c = mqtt.Client(client_id="timed-" + bind, protocol=mqtt.MQTTv5)
def on_connect(c, u, f, rc, p=None):
    if rc != 0: sys.exit("connect rc %s" % rc)
    ready.put(True)
def on_subscribe(c, u, mid, rcs, p=None):
    ready.put([r.value for r in rcs])
def on_disconnect(c, u, rc, p=None):
    q.put(("disconnect", rc, 0))
c.on_connect, c.on_subscribe, c.on_disconnect = on_connect, on_subscribe, on_disconnect
c.on_message = lambda c, u, m: q.put(("msg", m.payload.decode(), time.clock_gettime(time.CLOCK_MONOTONIC)))
c.connect(host, port, keepalive=30, bind_address=bind)
c.loop_start()
ready.get(timeout=10)
for topic, _ in pairs:
    c.subscribe(topic + "/result", qos=1)
    rcs = ready.get(timeout=10)
    if any(r >= 0x80 for r in rcs): sys.exit("subscribe refused %s" % rcs)
print("ready", file=sys.stderr, flush=True)
sys.stdin.readline()  # go
infos = [c.publish(topic, open(f, "rb").read(), qos=1) for topic, f in pairs]
for _ in pairs:
    kind, v, at = q.get(timeout=60)
    if kind != "msg": sys.exit("disconnected rc %s" % v)
    print("%.6f %s" % (at, v), flush=True)
for i in infos:
    # The PUBACK may come after the join's result: wait for it (bounded).
    i.wait_for_publish(timeout=60)
    if not i.is_published(): sys.exit("a publish was not acknowledged")
c.disconnect()
c.loop_stop()
`

type timedResult struct {
	at  float64
	res floodResult
}

// joinArgs writes each join's payload to a file and returns the script
// arguments for them: topic, (content type,) file.
func joinArgs(t *testing.T, joins []floodJoin, contentType bool) []string {
	t.Helper()
	var args []string
	dir := t.TempDir()
	for i, j := range joins {
		f := filepath.Join(dir, fmt.Sprintf("%d", i))
		if err := os.WriteFile(f, j.payload, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "lmos/v1/things/"+lmos.TopicKey(j.id)+"/td")
		if contentType {
			args = append(args, j.contentType)
		}
		args = append(args, f)
	}
	return args
}

// pahoTimed starts pahoTimedScript from bind and returns once its client
// is connected and subscribed; go makes it publish, and the channel gets
// its results, in the order they arrived, when it is done.
func pahoTimed(t *testing.T, h *testHub, bind string, joins []floodJoin) (goAhead func(), results <-chan []timedResult) {
	t.Helper()
	py := pahoPython(t)
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	args := append([]string{"-c", pahoTimedScript, host, port, bind}, joinArgs(t, joins, false)...)
	out := make(chan []timedResult, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cmd := exec.CommandContext(ctx, py, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderrPipe)
	if !sc.Scan() || sc.Text() != "ready" {
		cancel()
		_ = cmd.Wait()
		t.Fatalf("paho from %s did not get ready: %q", bind, sc.Text())
	}
	var stderr bytes.Buffer
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
		}
	}()
	go func() {
		defer cancel()
		<-stderrDone
		err := cmd.Wait()
		b := stdout.Bytes()
		if err != nil {
			t.Errorf("paho from %s: %v\n%s%s", bind, err, b, stderr.String())
			out <- nil
			return
		}
		var res []timedResult
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			at, js, _ := strings.Cut(l, " ")
			var r timedResult
			if _, err := fmt.Sscan(at, &r.at); err != nil || json.Unmarshal([]byte(js), &r.res) != nil {
				t.Errorf("paho from %s: line %q", bind, l)
			}
			res = append(res, r)
		}
		out <- res
	}()
	return func() { _, _ = io.WriteString(stdin, "go\n") }, out
}

// TestHeavyJoinFloodWithPaho is issue 12's stall with a client nobody here
// wrote: 16 heavy joins (~240 KB, thousands of members each) from one
// address, their ids chosen to share the join worker of the victim's id,
// then the victim joins from another address (127.0.0.2). Its result must
// come while most of the flood is still waiting.
func TestHeavyJoinFloodWithPaho(t *testing.T) {
	h := startHub(t, nil)
	const victim = "urn:example:legit"
	worker := func(id string) uint32 {
		f := fnv.New32a()
		f.Write([]byte(lmos.TopicKey(id)))
		return f.Sum32() % 8 // the broker's join workers
	}
	var flood []floodJoin
	for i := 0; len(flood) < 16; i++ {
		if id := fmt.Sprintf("urn:example:heavy:%d", i); worker(id) == worker(victim) {
			flood = append(flood, floodJoin{id, "", paddedTD(t, id, 230<<10)})
		}
	}
	goFlood, floodDone := pahoTimed(t, h, "127.0.0.1", flood)
	goLegit, legitDone := pahoTimed(t, h, "127.0.0.2", []floodJoin{{victim, "", makeTD(victim, "legit")}})
	goFlood()
	// The victim joins once the flood is under way: the hub has answered
	// the flood's first join.
	waitFor(t, 30*time.Second, "the flood's first join", func() bool {
		_, err := h.Main.Registry.Get(flood[0].id)
		return err == nil
	})
	start := time.Now()
	goLegit()
	legit := <-legitDone
	waited := time.Since(start)
	floodRes := <-floodDone
	if len(legit) != 1 || legit[0].res.Status != "accepted" || len(floodRes) != len(flood) {
		t.Fatalf("legit %+v; %d flood results of %d", legit, len(floodRes), len(flood))
	}
	after := 0
	for _, r := range floodRes {
		if r.res.Status != "accepted" {
			t.Errorf("flood join: %+v", r.res)
		}
		if r.at > legit[0].at {
			after++
		}
	}
	t.Logf("the legitimate join took %v; %d of %d flood joins were answered after it", waited, after, len(flood))
	if after < len(flood)/2 {
		t.Errorf("the legitimate join waited for the flood: only %d of %d flood joins were answered after it", after, len(flood))
	}
}
