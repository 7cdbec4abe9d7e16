package e2e

// The request/response benchmark (issue 25): every broker a process of its
// own — the real lmos-hub binary, Debian's mosquitto and a bare mochi
// (test/kit/baremochi) — and the load generator (test/kit/rrload) in a
// further one, so that each broker pays the same hops between processes.
// Figures and commands are in docs/PERFORMANCE.md.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/memprof"
)

// rrAgent is an entry of test/kit/rrload's -agents file.
type rrAgent struct {
	ID       string `json:"id"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// rrResult is what test/kit/rrload prints.
type rrResult struct {
	LatenciesNs    []int64 `json:"latenciesNs"`
	BrokerCPUNs    int64   `json:"brokerCPUNs"`
	BrokerSwitches int64   `json:"brokerSwitches"`
}

// rrBroker is one broker under BenchmarkMQTTRequestResponse100Agents.
type rrBroker struct {
	name   string
	addr   string
	pid    int
	agents string // rrload's -agents file
}

// BenchmarkMQTTRequestResponse100Agents: 100 echo agents and one requester
// (test/kit/rrload, paho.golang, in a process of its own) on the hub (the
// built binary, `lmos-hub serve`; its agents joined over MQTT as LMOS
// agents do and connect with the credentials their join issued), Debian's
// mosquitto with set_tcp_nodelay and a bare mochi broker, each a process of
// its own. The requester invokes the agents in turn, one invocation at a
// time, CBOR both ways with Response Topic and Correlation Data (PROTOCOL
// §4.3), each timed from its publish until its checked result; QoS 0 and
// QoS 1 for the invocation and the result. One op is three interleaved
// rounds (hub, mosquitto, mochi, hub, …) of 200 invocations to warm up and
// 3,000 timed per broker, so that a noisy moment hits every broker alike.
//
// Reported per broker: p50 and p99 in µs over the three rounds (each
// round's are logged), the broker process's CPU time (user + system) and
// its threads' voluntary context switches per round trip (each a thread
// going to sleep; a figure that other load on the machine hardly moves,
// unlike the times), its RssAnon and PSS in MB after the op
// (memprof.ProcMB);
// then hub/mosquitto and mochi/mosquitto ratios of p50 and p99.
//
// LMOS_BENCH_BROKER_ENV="K=V …" starts the hub and mochi (the Go brokers,
// not the load generator) with those environment variables too, say
// "GOMAXPROCS=1 GODEBUG=schedtrace=2147483647" (docs/PERFORMANCE.md).
func BenchmarkMQTTRequestResponse100Agents(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	const (
		agents = 100
		rounds = 3
		timed  = 3000
		warmup = 2 * agents // every agent, every connection
	)
	load := buildTool(b, "../kit/rrload", "rrload")
	hubBin := buildTool(b, lmosHubPkg, "lmos-hub")
	mochiBin := buildTool(b, "../kit/baremochi", "baremochi")
	dir := b.TempDir()

	restore := setBrokerEnv(b)
	hub := startHubBinary(b, hubBin, b.TempDir(), rrHubConfig(b, dir)...)
	mochiPID, mochiAddr, _ := startBareMochiBinary(b, mochiBin)
	restore()
	b.Logf("the Go brokers' extra environment: %q", os.Getenv("LMOS_BENCH_BROKER_ENV"))
	ids := make([]string, agents)
	for i := range ids {
		ids[i] = benchAgentID(i)
	}
	hubAgents := make([]rrAgent, agents)
	anonAgents := make([]rrAgent, agents)
	for i, cr := range joinThings(b, hub.mqttAddr, ids) {
		hubAgents[i] = rrAgent{ID: ids[i], Username: cr.Username, Password: cr.Password}
		anonAgents[i] = rrAgent{ID: ids[i]}
	}
	mosqAddr, mosqPID := startMosquitto(b, "set_tcp_nodelay true")
	brokers := []rrBroker{
		{"hub", hub.mqttAddr, hub.pid, writeJSON(b, filepath.Join(dir, "hub-agents.json"), hubAgents)},
		{"mosquitto", mosqAddr, mosqPID, writeJSON(b, filepath.Join(dir, "agents.json"), anonAgents)},
		{"mochi", mochiAddr, mochiPID, filepath.Join(dir, "agents.json")},
	}
	for _, qos := range []int{0, 1} {
		b.Run(fmt.Sprintf("qos%d", qos), func(b *testing.B) {
			lat := make([][]time.Duration, len(brokers))
			cpu := make([]time.Duration, len(brokers))
			switches := make([]int64, len(brokers))
			for b.Loop() {
				for round := range rounds {
					for i, br := range brokers {
						r := runRRLoad(b, load, br, qos, warmup, timed)
						l := make([]time.Duration, len(r.LatenciesNs))
						for j, ns := range r.LatenciesNs {
							l[j] = time.Duration(ns)
						}
						p50, p99 := percentiles(l)
						b.Logf("qos%d round %d %-9s p50 %6.1f µs p99 %6.1f µs, broker CPU %5.1f µs and %4.1f context switches per round trip",
							qos, round+1, br.name, p50, p99, float64(r.BrokerCPUNs)/1e3/float64(timed), float64(r.BrokerSwitches)/float64(timed))
						lat[i] = append(lat[i], l...)
						cpu[i] += time.Duration(r.BrokerCPUNs)
						switches[i] += r.BrokerSwitches
					}
				}
			}
			p50 := make([]float64, len(brokers))
			p99 := make([]float64, len(brokers))
			for i, br := range brokers {
				p50[i], p99[i] = percentiles(lat[i])
				b.ReportMetric(p50[i], br.name+"-p50-µs")
				b.ReportMetric(p99[i], br.name+"-p99-µs")
				b.ReportMetric(float64(cpu[i].Nanoseconds())/1e3/float64(len(lat[i])), br.name+"-CPU-µs/op")
				b.ReportMetric(float64(switches[i])/float64(len(lat[i])), br.name+"-switches/op")
				mb, err := memprof.ProcMB(br.pid)
				if err != nil {
					b.Fatalf("cannot read the memory of %s: %v", br.name, err)
				}
				b.ReportMetric(mb["RssAnon"], br.name+"-anon-MB")
				b.ReportMetric(mb["Pss"], br.name+"-PSS-MB")
			}
			for i, br := range brokers {
				if br.name == "mosquitto" {
					continue
				}
				b.ReportMetric(p50[i]/p50[1], "p50-"+br.name+"/mosquitto")
				b.ReportMetric(p99[i]/p99[1], "p99-"+br.name+"/mosquitto")
			}
		})
	}
}

// rrHubConfig is the extra serve flags of the benchmark's hub: a
// configuration file without the registry's bounds (as benchEdit).
func rrHubConfig(b *testing.B, dir string) []string {
	b.Helper()
	cfg := filepath.Join(dir, "hub.yaml")
	yaml := "registry:\n  maxThings: 0\n  maxBytes: 0\n  maxThingsPerSource: 0\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	return []string{"--config", cfg}
}

// setBrokerEnv sets the variables of LMOS_BENCH_BROKER_ENV in this
// process, for the Go brokers it starts next to inherit; restore unsets
// them again.
func setBrokerEnv(b *testing.B) (restore func()) {
	b.Helper()
	var undo []func()
	for _, kv := range strings.Fields(os.Getenv("LMOS_BENCH_BROKER_ENV")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			b.Fatalf("LMOS_BENCH_BROKER_ENV: %q is no K=V", kv)
		}
		old, had := os.LookupEnv(k)
		if err := os.Setenv(k, v); err != nil {
			b.Fatal(err)
		}
		undo = append(undo, func() {
			if had {
				_ = os.Setenv(k, old)
			} else {
				_ = os.Unsetenv(k)
			}
		})
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// writeJSON writes v as JSON to file and returns file.
func writeJSON(b *testing.B, file string, v any) string {
	b.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		b.Fatal(err)
	}
	return file
}

// runRRLoad runs test/kit/rrload once against br.
func runRRLoad(b *testing.B, load string, br rrBroker, qos, warmup, timed int) rrResult {
	b.Helper()
	cmd := exec.Command(load, "-addr", br.addr, "-agents", br.agents, "-qos", strconv.Itoa(qos),
		"-warmup", strconv.Itoa(warmup), "-n", strconv.Itoa(timed), "-pid", strconv.Itoa(br.pid))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("rrload against %s: %v\n%s", br.name, err, stderr.Bytes())
	}
	var r rrResult
	if err := json.Unmarshal(out, &r); err != nil {
		b.Fatalf("rrload output %q: %v", out, err)
	}
	if len(r.LatenciesNs) != timed {
		b.Fatalf("rrload against %s timed %d invocations, want %d", br.name, len(r.LatenciesNs), timed)
	}
	return r
}

// percentiles sorts lat and returns its p50 and p99 in µs.
func percentiles(lat []time.Duration) (p50, p99 float64) {
	slices.Sort(lat)
	return float64(lat[len(lat)/2]) / 1e3, float64(lat[len(lat)*99/100]) / 1e3
}
