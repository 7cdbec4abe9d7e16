package e2e

// The side-by-side MQTT rate benchmarks (issue 25, "Measured fairly"):
// every broker a process of its own — the real lmos-hub binary, Debian's
// mosquitto and a bare mochi (test/kit/baremochi) — and the load generator
// (test/kit/mqttload) a further one, so that each broker pays the same hops
// between processes and its CPU time is read for its process alone.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// sideBroker is one broker of a side-by-side benchmark.
type sideBroker struct {
	name string
	addr string
	pid  int
	// args are mqttload's extra flags against it: on the hub the
	// publisher is the joined Thing whose event topic it publishes to.
	args []string
}

// sideShape is a load: pubs publishers → subs subscribers on one topic,
// n messages published per run over all publishers.
type sideShape struct {
	name       string
	pubs, subs int
	n          int
}

// sideBench is a side-by-side benchmark's brokers and load generator.
type sideBench struct {
	load    string // test/kit/mqttload's binary
	topic   string // the joined Thing's event topic
	brokers []sideBroker
}

// sideThingID is the Thing the hub's publishers connect as.
const sideThingID = "urn:uuid:7e3a1c52-0000-4000-8000-f0f0f0f0f0f0"

// startSideBySide builds the load generator, the hub and bare mochi and
// starts the three brokers, each a process of its own: the hub (`lmos-hub
// serve`, with sideThingID joined over MQTT as a Thing joins), mosquitto
// (with the configuration lines mosqConf) and mochi. The brokers stop at
// the benchmark's cleanup.
func startSideBySide(b *testing.B, mosqConf ...string) *sideBench {
	b.Helper()
	load := buildTool(b, "../kit/mqttload", "mqttload")
	hubBin := buildTool(b, lmosHubPkg, "lmos-hub")
	mochiBin := buildTool(b, "../kit/baremochi", "baremochi")
	hub := startHubBinary(b, hubBin, b.TempDir(), rrHubConfig(b, b.TempDir())...)
	cr := joinThings(b, hub.mqttAddr, []string{sideThingID})[0]
	mosqAddr, mosqPID := startMosquitto(b, mosqConf...)
	mochiPID, mochiAddr, _ := startBareMochiBinary(b, mochiBin)
	return &sideBench{
		load:  load,
		topic: "lmos/v1/things/" + lmos.TopicKey(sideThingID) + "/events/e",
		brokers: []sideBroker{
			{"hub", hub.mqttAddr, hub.pid, []string{"-user", cr.Username, "-pass", cr.Password}},
			{"mosquitto", mosqAddr, mosqPID, nil},
			{"mochi", mochiAddr, mochiPID, nil},
		},
	}
}

// sideTotals add up one broker's runs.
type sideTotals struct {
	deliveries, lost int64
	secs             float64
	cpu              time.Duration
}

// add adds the run r up.
func (t *sideTotals) add(r sideTotals) {
	t.deliveries += r.deliveries
	t.lost += r.lost
	t.secs += r.secs
	t.cpu += r.cpu
}

// mqttLoad runs the load generator load once with args against the
// broker name whose process is pid, and returns the run: what mqttload
// measured and the CPU time (user + system, from /proc) the broker's
// process used while it ran.
func mqttLoad(b *testing.B, load, name string, pid int, args ...string) sideTotals {
	b.Helper()
	cmd := exec.Command(load, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cpu0 := procCPU(b, pid)
	out, err := cmd.Output()
	used := procCPU(b, pid) - cpu0
	if err != nil {
		b.Fatalf("mqttload against %s: %v\n%s", name, err, stderr.Bytes())
	}
	var r fanoutResult
	if err := json.Unmarshal(out, &r); err != nil {
		b.Fatalf("mqttload output %q: %v", out, err)
	}
	return sideTotals{deliveries: r.Deliveries, lost: r.Expected - r.Deliveries, secs: r.Seconds, cpu: used}
}

func (t sideTotals) rate() float64 { return float64(t.deliveries) / t.secs }

// microsPerDelivery is the broker's CPU time per delivery in µs.
func (t sideTotals) microsPerDelivery() float64 {
	return t.cpu.Seconds() * 1e6 / float64(t.deliveries)
}

// run has mqttload put shape at qos (100-byte payloads, publishers at most
// 100 messages ahead of the slowest subscriber) on every broker, three
// interleaved rounds per op (hub, mosquitto, mochi, hub, …) so that a
// noisy moment hits them alike. It reports per broker deliveries/s (first
// publish to last delivery, over all rounds), µs/delivery (the user +
// system CPU time of the broker's process, read from /proc, while mqttload
// ran: connecting, subscribing and publishing) and lost (deliveries owed
// and not made; it must be 0); then the hub's ratios of both to mosquitto
// and to mochi.
func (s *sideBench) run(b *testing.B, qos int, sh sideShape) {
	sums := make([]sideTotals, len(s.brokers))
	for b.Loop() {
		for range 3 {
			for i, br := range s.brokers {
				args := append([]string{"-addr", br.addr, "-topic", s.topic, "-qos", strconv.Itoa(qos),
					"-pubs", strconv.Itoa(sh.pubs), "-subs", strconv.Itoa(sh.subs),
					"-n", strconv.Itoa(sh.n), "-size", "100", "-window", "100"}, br.args...)
				sums[i].add(mqttLoad(b, s.load, br.name, br.pid, args...))
			}
		}
	}
	for i, br := range s.brokers {
		b.ReportMetric(sums[i].rate(), br.name+"-deliveries/s")
		b.ReportMetric(sums[i].microsPerDelivery(), br.name+"-µs/delivery")
		b.ReportMetric(float64(sums[i].lost), br.name+"-lost")
	}
	for i, br := range s.brokers[1:] {
		p := sums[i+1]
		b.ReportMetric(sums[0].rate()/p.rate(), fmt.Sprintf("rate-hub/%s", br.name))
		b.ReportMetric(sums[0].microsPerDelivery()/p.microsPerDelivery(), fmt.Sprintf("cpu-hub/%s", br.name))
	}
}
