package e2e

// MQTT benchmarks (issue 3), all with real MQTT 5 clients (paho.golang) on
// loopback: the CBOR action round trip through the hub to 100 agents, the
// fan-out to 50 subscribers against the hub, Debian's mosquitto and a bare
// mochi broker in the same run, and the RSS of the real binary holding
// 1,000 idle clients. Figures and commands are in docs/PERFORMANCE.md.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/memprof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/mqttdial"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
	"github.com/eclipse/paho.golang/paho"
	"github.com/fxamacker/cbor/v2"
)

// mosquittoBin is where Debian's mosquitto package installs the broker.
const mosquittoBin = "/usr/sbin/mosquitto"

// benchMQTT connects an MQTT 5 client to addr; every message it receives
// goes to onMsg (nil: none expected). It is disconnected at cleanup.
func benchMQTT(b *testing.B, addr string, cp *paho.Connect, onMsg func(*paho.Publish)) *paho.Client {
	b.Helper()
	c, err := mqttdial.Dial(addr, cp, onMsg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}

// benchSubscribe subscribes c to filter and fails unless it is granted.
func benchSubscribe(b *testing.B, c *paho.Client, filter string, qos byte) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil {
		b.Fatalf("subscribe %s: %v", filter, err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
		b.Fatalf("subscribe %s refused: %v", filter, sa.Reasons)
	}
}

// agentTD is a minimal valid TD of an agent with one MQTT action, echo.
func agentTD(id string) []byte {
	doc, _ := json.Marshal(map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Agent",
		"id":                  id,
		"title":               "Echo agent " + id[len(id)-4:],
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{"echo": map[string]any{
			"forms": []any{map[string]any{
				"href":        "mqtt://127.0.0.1/lmos/v1/things/" + lmos.TopicKey(id) + "/actions/echo",
				"op":          "invokeaction",
				"contentType": "application/cbor",
			}},
		}},
	})
	return doc
}

// benchAgentID is the id of the i-th benchmark agent.
func benchAgentID(i int) string { return fmt.Sprintf("urn:uuid:7e3a1c52-0000-4000-8000-%012d", i) }

// joinThings joins the Things ids over MQTT (PROTOCOL §4.4) from one
// anonymous client and returns their credentials in order.
func joinThings(b *testing.B, addr string, ids []string) []joinCreds {
	b.Helper()
	results := make(chan *paho.Publish, len(ids))
	c, err := mqttdial.Dial(addr, &paho.Connect{ClientID: "bench-joiner", CleanStart: true, KeepAlive: 60}, func(p *paho.Publish) { results <- p })
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Disconnect(&paho.Disconnect{}) }()
	benchSubscribe(b, c, "lmos/v1/things/+/td/result", 1)
	creds := make([]joinCreds, len(ids))
	for i, id := range ids {
		tid := lmos.TopicKey(id)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Publish(ctx, &paho.Publish{Topic: "lmos/v1/things/" + tid + "/td", QoS: 1, Retain: true, Payload: agentTD(id),
			Properties: &paho.PublishProperties{ContentType: "application/td+json"}})
		cancel()
		if err != nil {
			b.Fatalf("publish td of %s: %v", id, err)
		}
		select {
		case p := <-results:
			var res struct {
				Status      string     `json:"status"`
				Credentials *joinCreds `json:"credentials"`
			}
			if p.Topic != "lmos/v1/things/"+tid+"/td/result" || json.Unmarshal(p.Payload, &res) != nil || res.Status != "accepted" || res.Credentials == nil {
				b.Fatalf("join of %s: %s %s", id, p.Topic, p.Payload)
			}
			creds[i] = *res.Credentials
		case <-time.After(10 * time.Second):
			b.Fatalf("no join result for %s within 10 s", id)
		}
	}
	return creds
}

// thingConnect is the CONNECT of a joined Thing.
func thingConnect(cr joinCreds) *paho.Connect {
	return &paho.Connect{ClientID: "agent-" + cr.Username, CleanStart: true, KeepAlive: 60,
		Username: cr.Username, UsernameFlag: true, Password: []byte(cr.Password), PasswordFlag: true}
}

type echoInput struct {
	N    uint64 `cbor:"n"`
	Text string `cbor:"text"`
}

type echoOutput struct {
	Echo  echoInput `cbor:"echo"`
	Agent string    `cbor:"agent"`
}

// BenchmarkMQTTActionRoundTrip100Agents: one requester invokes the echo
// action of 100 agents in turn through the hub (in-process, as main starts
// it), CBOR both ways, with Response Topic and Correlation Data
// (PROTOCOL §4.3); one op is one invocation until its completed result
// arrives in the requester's inbox. Sub-benchmarks: QoS 0 and QoS 1 for
// both the invocation and the result.
func BenchmarkMQTTActionRoundTrip100Agents(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	const agents = 100
	addr, ids, creds := startJoinedBenchHub(b, agents)
	connects := make([]*paho.Connect, agents)
	for i, cr := range creds {
		connects[i] = thingConnect(cr)
	}
	invoke := startEchoAgents(b, addr, ids, connects)
	for _, qos := range []byte{0, 1} {
		b.Run(fmt.Sprintf("qos%d", qos), func(b *testing.B) {
			for range 2 * agents { // warm up: every agent, every connection
				if _, err := invoke(qos); err != nil {
					b.Fatal(err)
				}
			}
			var lat []time.Duration
			for b.Loop() {
				d, err := invoke(qos)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, d)
			}
			percentile.Report(b, lat, time.Millisecond, "ms")
		})
	}
}

// startJoinedBenchHub starts a benchmark hub and joins n agents' Things
// (benchAgentID) to its broker; it returns the broker's address, the ids
// and their credentials.
func startJoinedBenchHub(b *testing.B, n int) (addr string, ids []string, creds []joinCreds) {
	b.Helper()
	m, _, stop := startBenchHub(b, b.TempDir(), nil)
	b.Cleanup(stop)
	addr = m.MQTTAddr.String()
	ids = make([]string, n)
	for i := range ids {
		ids[i] = benchAgentID(i)
	}
	return addr, ids, joinThings(b, addr, ids)
}

// startEchoAgents connects one echo agent per id to the broker at addr
// (with connects[i]), each subscribed to its echo action topic, and a
// requester subscribed to its reply inbox. invoke sends the next
// invocation (the agents in turn) at qos and returns the time until its
// completed result arrived, checked.
func startEchoAgents(b *testing.B, addr string, ids []string, connects []*paho.Connect) (invoke func(qos byte) (time.Duration, error)) {
	b.Helper()
	ready := make(chan struct{})
	for i, cp := range connects {
		var agent *paho.Client
		agent = benchMQTT(b, addr, cp, func(p *paho.Publish) {
			<-ready // agent is set
			if p.Properties == nil || p.Properties.ResponseTopic == "" {
				return
			}
			var in echoInput
			status := "completed"
			if err := cbor.Unmarshal(p.Payload, &in); err != nil {
				status = "failed"
			}
			out, _ := cbor.Marshal(echoOutput{Echo: in, Agent: ids[i]})
			props := &paho.PublishProperties{ResponseTopic: "", CorrelationData: p.Properties.CorrelationData, ContentType: "application/cbor"}
			props.User.Add("lmos-status", status)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = agent.Publish(ctx, &paho.Publish{Topic: p.Properties.ResponseTopic, QoS: p.QoS, Payload: out, Properties: props})
		})
		benchSubscribe(b, agent, "lmos/v1/things/"+lmos.TopicKey(ids[i])+"/actions/echo", 1)
	}
	close(ready)

	const reqID = "bench-requester"
	inbox := "lmos/v1/clients/" + reqID + "/replies"
	replies := make(chan *paho.Publish, 16)
	req := benchMQTT(b, addr, &paho.Connect{ClientID: reqID, CleanStart: true, KeepAlive: 60}, func(p *paho.Publish) { replies <- p })
	benchSubscribe(b, req, inbox, 1)

	var seq uint64
	agents := uint64(len(ids))
	return func(qos byte) (time.Duration, error) {
		seq++
		tid := lmos.TopicKey(ids[seq%agents])
		in, err := cbor.Marshal(echoInput{N: seq, Text: "hello agent"})
		if err != nil {
			return 0, err
		}
		corr := binary.BigEndian.AppendUint64(nil, seq)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := req.Publish(ctx, &paho.Publish{Topic: "lmos/v1/things/" + tid + "/actions/echo", QoS: qos, Payload: in,
			Properties: &paho.PublishProperties{ResponseTopic: inbox, CorrelationData: corr, ContentType: "application/cbor"}}); err != nil {
			return 0, fmt.Errorf("invoke: %w", err)
		}
		for {
			select {
			case p := <-replies:
				if !bytes.Equal(p.Properties.CorrelationData, corr) {
					continue // a late reply of an earlier, failed invocation
				}
				d := time.Since(start)
				var out echoOutput
				if st := p.Properties.User.Get("lmos-status"); st != "completed" {
					return 0, fmt.Errorf("result status %q", st)
				}
				if p.Properties.ContentType != "application/cbor" || cbor.Unmarshal(p.Payload, &out) != nil || out.Echo.N != seq || out.Agent != ids[seq%agents] {
					return 0, fmt.Errorf("bad result %x", p.Payload)
				}
				return d, nil
			case <-time.After(10 * time.Second):
				return 0, fmt.Errorf("no result for invocation %d of %s within 10 s", seq, tid)
			}
		}
	}
}

// lmosHubPkg is the hub's main package, relative to this directory.
const lmosHubPkg = "../../cmd/lmos-hub"

// buildTool builds the main package pkg (relative to this directory) into
// a temp dir, statically as the release build does.
func buildTool(b testing.TB, pkg, name string) string {
	b.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(b.TempDir(), name)
	build := exec.Command(gobin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("cannot build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// fanoutResult is what test/kit/mqttload prints.
type fanoutResult struct {
	Deliveries int64   `json:"deliveries"`
	Expected   int64   `json:"expected"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"perSecond"`
}

// BenchmarkMQTTFanout50: one publisher, 50 subscribers on one topic, QoS 0,
// 10,000 messages of 100 bytes (500,000 deliveries per round), generated by
// test/kit/mqttload in its own process, against the hub (the built binary;
// the publisher is a joined Thing publishing its event), Debian's mosquitto
// with set_tcp_nodelay (Go sets TCP_NODELAY on the hub's and mochi's
// connections; with Nagle's algorithm mosquitto's QoS 0 1→1 rate was a
// third of it) and a bare mochi broker (test/kit/baremochi), each a process
// of its own (issue 25), in three interleaved rounds of the same run.
// sideBench.run says what each op does and reports (per broker
// deliveries/s, µs/delivery of the broker's CPU and lost; the hub's ratios
// to mosquitto and to mochi).
func BenchmarkMQTTFanout50(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	startSideBySide(b, "set_tcp_nodelay true").run(b, 0, sideShape{"1to50", 1, 50, 10000})
}

// BenchmarkMQTTQoS0 is BenchmarkMQTTFanout50's other shapes at QoS 0, on
// the same kind of broker processes: 1→1 and 50→1, 50,000 messages each.
func BenchmarkMQTTQoS0(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	s := startSideBySide(b, "set_tcp_nodelay true")
	for _, sh := range []sideShape{
		{"1to1", 1, 1, 50000},
		{"50to1", 50, 1, 50000},
	} {
		b.Run(sh.name, func(b *testing.B) { s.run(b, 0, sh) })
	}
}

// procCPU is the CPU time (user + system) process pid used so far, from
// /proc/{pid}/stat (in clock ticks, 100 per second on Linux).
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: state is
	// field 3, utime 14, stime 15.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("cannot parse /proc/%d/stat: %s", pid, stat)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// startMosquitto starts Debian's mosquitto on a free loopback port with
// anonymous access (and the configuration lines conf) and returns its
// address and pid; it is killed at cleanup.
func startMosquitto(b *testing.B, conf ...string) (addr string, pid int) {
	b.Helper()
	if _, err := os.Stat(mosquittoBin); err != nil {
		b.Skipf("%s not found: install the broker with `sudo apt-get install -y mosquitto` "+
			"(and `sudo systemctl disable --now mosquitto` if you do not want its service)", mosquittoBin)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr = ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	ln.Close()
	dir := b.TempDir()
	file := filepath.Join(dir, "mosquitto.conf")
	text := "listener " + port + " 127.0.0.1\nallow_anonymous true\npersistence false\n"
	for _, line := range conf {
		text += line + "\n"
	}
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	// Run as root, mosquitto drops to the user mosquitto: let it read.
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(mosquittoBin, "-c", file)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr, cmd.Process.Pid
		}
		select {
		case <-exited:
			b.Fatalf("mosquitto exited: %s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("mosquitto not listening on %s within 10 s: %s", addr, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hubProcess is the real binary running on a temp data dir.
type hubProcess struct {
	pid      int
	httpBase string
	mqttAddr string
	// stop ends it (SIGTERM); it runs at cleanup too.
	stop func()
}

// startHubBinary runs bin on dir (with the extra serve flags) until it
// logs both listening addresses and answers GET /healthz.
func startHubBinary(b *testing.B, bin, dir string, extra ...string) hubProcess {
	b.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0",
		"--mdns=false", "--admin-token", testToken, "--log-format", "json"}, extra...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LMOS_HUB_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	b.Cleanup(stop)
	addrs := make(chan [2]string, 2)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && strings.HasSuffix(line.Msg, " listening") {
				addrs <- [2]string{line.Msg, line.Addr}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	p := hubProcess{pid: cmd.Process.Pid, stop: stop}
	for p.httpBase == "" || p.mqttAddr == "" {
		select {
		case a := <-addrs:
			switch a[0] {
			case "http listening":
				p.httpBase = "http://" + a[1]
			case "mqtt listening":
				p.mqttAddr = a[1]
			}
		case <-exited:
			b.Fatal("lmos-hub exited before listening")
		case <-time.After(60 * time.Second):
			b.Fatal("lmos-hub did not log both listening addresses within 60 s")
		}
	}
	c := benchClient(b)
	if err := fetch(c, http.MethodGet, p.httpBase+"/healthz", nil, http.StatusOK); err != nil {
		b.Fatal(err)
	}
	c.CloseIdleConnections()
	return p
}

// procMemMB reads the memory of pid in MB (memprof.ProcMB: VmRSS, VmHWM,
// RssAnon, RssFile, Pss, …).
func procMemMB(b *testing.B, pid int) map[string]float64 {
	b.Helper()
	mb, err := memprof.ProcMB(pid)
	if err != nil {
		b.Skipf("cannot read RSS: %v", err)
	}
	return mb
}

// raiseNoFile raises the soft limit of open files to at least n (this
// process holds the clients' sockets; the hub child inherits the limit).
func raiseNoFile(b *testing.B, n uint64) {
	b.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	lim.Cur = min(max(n, lim.Cur), lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < n {
		b.Skipf("cannot raise the open files limit to %d (hard limit %d): %v", n, lim.Max, err)
	}
}

// BenchmarkMQTTIdleAgentsRSS builds the real binary, starts it, reads its
// memory 10 s after start (steadyFrom: start-up is over), connects 1,000
// MQTT 5 clients (anonymous, keepalive 60 s, each subscribed to its own
// reply inbox), waits 5 s and reads it again: with
// an empty store, and with 10k TDs stored. In the same run it measures
// Debian's mosquitto and a bare mochi (test/kit/baremochi), each in its
// own process too, under the same clients. Its "-idle-" metrics are the
// RSS before the clients, before the runtime's first forced collection;
// the steady idle figure is BenchmarkSteadyIdleRSS's. Each reading reports
// VmRSS, RssAnon (heap and stacks: what the process alone holds) and PSS
// (memprof.ProcMB).
//
// KB/client is the slope of VmRSS from 100 clients to 1,000: what each
// more client costs (KB/client-anon: of it, heap and stacks). The first
// clients also map the binary's pages their code runs, once, whatever
// their number; KB/client-from-idle counts those too, spread over 1,000.
func BenchmarkMQTTIdleAgentsRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	const clients, warmClients = 1000, 100
	raiseNoFile(b, 2*clients+512)
	bin := buildTool(b, lmosHubPkg, "lmos-hub")
	measure := func(b *testing.B, name string, start func(b *testing.B) (pid int, addr string, stop func())) {
		for b.Loop() {
			pid, addr, stop := start(b)
			time.Sleep(steadyFrom)
			base := procMemMB(b, pid)
			conns := make([]*paho.Client, clients)
			// connect connects clients from to to, 16 at a time, then waits
			// 5 s for them to go idle (the hub parks them after 1 s).
			connect := func(from, to int) {
				var wg sync.WaitGroup
				next := atomic.Int64{}
				next.Store(int64(from))
				var failed atomic.Value
				for range 16 {
					wg.Go(func() {
						for i := int(next.Add(1)) - 1; i < to; i = int(next.Add(1)) - 1 {
							id := fmt.Sprintf("idle-%d", i)
							c, err := mqttdial.Dial(addr, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 60}, func(*paho.Publish) {})
							if err != nil {
								failed.Store(err)
								return
							}
							conns[i] = c
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							_, err = c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "lmos/v1/clients/" + id + "/#", QoS: 1}}})
							cancel()
							if err != nil {
								failed.Store(err)
								return
							}
						}
					})
				}
				wg.Wait()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				time.Sleep(5 * time.Second)
			}
			// The first warmClients map the code their connections run; the
			// slope over the rest is what each more client costs.
			connect(0, warmClients)
			warmed := procMemMB(b, pid)
			connect(warmClients, clients)
			loaded := procMemMB(b, pid)
			for _, c := range conns {
				if c != nil {
					_ = c.Disconnect(&paho.Disconnect{})
				}
			}
			stop()
			b.ReportMetric(base["VmRSS"], name+"-idle-RSS-MB")
			b.ReportMetric(base["RssAnon"], name+"-idle-anon-MB")
			b.ReportMetric(base["Pss"], name+"-idle-PSS-MB")
			b.ReportMetric(loaded["VmRSS"], name+"-1k-clients-RSS-MB")
			b.ReportMetric(loaded["RssAnon"], name+"-1k-clients-anon-MB")
			b.ReportMetric(loaded["Pss"], name+"-1k-clients-PSS-MB")
			b.ReportMetric(loaded["VmHWM"], name+"-1k-clients-peak-RSS-MB")
			b.ReportMetric((loaded["VmRSS"]-warmed["VmRSS"])*1024/(clients-warmClients), "KB/client")
			b.ReportMetric((loaded["RssAnon"]-warmed["RssAnon"])*1024/(clients-warmClients), "KB/client-anon")
			b.ReportMetric((loaded["VmRSS"]-base["VmRSS"])*1024/clients, "KB/client-from-idle")
		}
	}
	var extra []string
	hub := func(dir string) func(b *testing.B) (int, string, func()) {
		return func(b *testing.B) (int, string, func()) {
			p := startHubBinary(b, bin, dir, extra...)
			return p.pid, p.mqttAddr, p.stop
		}
	}
	b.Run("empty", func(b *testing.B) { measure(b, "empty", hub(b.TempDir())) })
	b.Run("10kTDs", func(b *testing.B) {
		dir := b.TempDir()
		fillDir(b, dir)
		measure(b, "10kTDs", hub(dir))
	})
	b.Run("mosquitto", func(b *testing.B) {
		measure(b, "mosquitto", func(b *testing.B) (int, string, func()) {
			addr, pid := startMosquitto(b)
			return pid, addr, func() {}
		})
	})
	mochiBin := buildTool(b, "../kit/baremochi", "baremochi")
	b.Run("mochi", func(b *testing.B) {
		measure(b, "mochi", func(b *testing.B) (int, string, func()) { return startBareMochiBinary(b, mochiBin) })
	})
}

// startBareMochiBinary runs test/kit/baremochi on a free loopback port
// until it says where it listens; it is stopped at cleanup at the latest.
func startBareMochiBinary(b *testing.B, bin string) (pid int, addr string, stop func()) {
	b.Helper()
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	b.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		b.Fatalf("baremochi did not say where it listens: %q %v", line, err)
	}
	return cmd.Process.Pid, addr, stop
}

// BenchmarkSteadyIdleRSS measures idle RSS at steady state. It starts side
// by side, without clients: the real binary with an empty store and with
// 10k TDs, Debian's mosquitto (set_tcp_nodelay, as the QoS 1 benchmarks
// run it) and a bare mochi (test/kit/baremochi). It samples each one's
// memory (memprof.ProcMB) 2 s after it answered (the moment the other RSS
// benchmarks read) and then every 5 s until 190 s after that
// (LMOS_BENCH_IDLE_SECS sets the window). The window outlasts the Go
// runtime's forced collection, which touches the collector's code and
// stack maps again, and lets an idle heap grow by whatever the process
// allocates while idle: a figure taken 2 s after start flatters a process
// that releases its start-up pages. The collection is forced once two
// minutes have passed since the last one, but only when sysmon looks, and
// in a process without timers sysmon sleeps up to a minute at a time
// (runtime/proc.go: forcegcperiod/2): so up to 180 s after start-up's
// collection, which comes before the process answers.
//
// Per process it reports VmRSS at 2 s and its maximum over the window; the
// maximum from 10 s on ("-idle-steady-max-", past start-up's tail) and the
// value at the end of VmRSS, RssAnon (heap and stacks: what the process
// alone holds) and PSS (its share of the pages it maps, the binary's
// counted once across processes); RssFile at the end; and the hub's
// steady maxima over mosquitto's. Each process's series is logged.
func BenchmarkSteadyIdleRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	window := 190 * time.Second
	if s := os.Getenv("LMOS_BENCH_IDLE_SECS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 15 || n > 3600 {
			b.Fatalf("LMOS_BENCH_IDLE_SECS=%q: want whole seconds from 15 to 3600", s)
		}
		window = time.Duration(n) * time.Second
	}
	// When each process is read, after it answered: 2 s, every 5 s, the end.
	offsets := []time.Duration{2 * time.Second}
	for t := 5 * time.Second; t < window; t += 5 * time.Second {
		offsets = append(offsets, t)
	}
	if window > offsets[len(offsets)-1] {
		offsets = append(offsets, window)
	}
	hubBin := buildTool(b, lmosHubPkg, "lmos-hub")
	mochiBin := buildTool(b, "../kit/baremochi", "baremochi")
	full := b.TempDir()
	fillDir(b, full)
	for b.Loop() {
		var procs []*idleSampler
		started := func(name string, pid int) *idleSampler {
			p := &idleSampler{name: name, pid: pid, start: time.Now()}
			procs = append(procs, p)
			return p
		}
		_, pid := startMosquitto(b, "set_tcp_nodelay true")
		mosq := started("mosquitto", pid)
		pid, _, stopMochi := startBareMochiBinary(b, mochiBin)
		started("mochi", pid)
		empty := startHubBinary(b, hubBin, b.TempDir())
		hub := started("hub", empty.pid)
		loaded := startHubBinary(b, hubBin, full)
		started("hub10kTDs", loaded.pid)

		// Read whichever process is due next until every one has read
		// its last offset.
		for {
			var next *idleSampler
			for _, p := range procs {
				if p.taken < len(offsets) && (next == nil || p.due(offsets).Before(next.due(offsets))) {
					next = p
				}
			}
			if next == nil {
				break
			}
			time.Sleep(time.Until(next.due(offsets)))
			if err := next.sample(offsets); err != nil {
				b.Fatal(err)
			}
		}
		empty.stop()
		loaded.stop()
		stopMochi()

		for _, p := range procs {
			b.ReportMetric(p.at2s, p.name+"-idle-2s-RSS-MB")
			b.ReportMetric(p.max, p.name+"-idle-max-RSS-MB")
			for _, f := range steadyFields {
				b.ReportMetric(p.steadyMax[f.field], p.name+"-idle-steady-max-"+f.unit)
				b.ReportMetric(p.end[f.field], p.name+"-idle-end-"+f.unit)
			}
			b.ReportMetric(p.end["RssFile"], p.name+"-idle-end-file-MB")
			b.Logf("%s VmRSS/RssAnon/PSS MB by seconds since it answered:%s", p.name, p.series.String())
		}
		for _, f := range steadyFields {
			b.ReportMetric(hub.steadyMax[f.field]/mosq.steadyMax[f.field], "idle-steady-max-"+strings.TrimSuffix(f.unit, "-MB")+"-hub/mosquitto")
		}
	}
}

// steadyFrom is when BenchmarkSteadyIdleRSS's idle figure starts: past
// start-up's tail (the first write of the broker's state, the readiness
// probe).
const steadyFrom = 10 * time.Second

// steadyFields are the readings BenchmarkSteadyIdleRSS reports for each
// process, with the unit of their metrics.
var steadyFields = []struct{ field, unit string }{
	{"VmRSS", "RSS-MB"},
	{"RssAnon", "anon-MB"},
	{"Pss", "PSS-MB"},
}

// idleSampler is one process BenchmarkSteadyIdleRSS reads.
type idleSampler struct {
	name  string
	pid   int
	start time.Time
	taken int // offsets read so far
	at2s  float64
	max   float64
	// steadyMax is the maximum of each of steadyFields from steadyFrom on.
	steadyMax map[string]float64
	end       map[string]float64
	// series: " t:VmRSS/RssAnon/Pss" per reading.
	series strings.Builder
}

// due is when the process's next reading is due.
func (p *idleSampler) due(offsets []time.Duration) time.Time {
	return p.start.Add(offsets[p.taken])
}

// sample reads the process's memory as its next reading. A process
// without VmRSS has exited (a zombie keeps its status file).
func (p *idleSampler) sample(offsets []time.Duration) error {
	mb, err := memprof.ProcMB(p.pid)
	if err != nil {
		return fmt.Errorf("%s (pid %d): %w", p.name, p.pid, err)
	}
	rss, ok := mb["VmRSS"]
	if !ok {
		return fmt.Errorf("%s (pid %d) exited while idle", p.name, p.pid)
	}
	if p.taken == 0 {
		p.at2s = rss
	}
	p.max = max(p.max, rss)
	if offsets[p.taken] >= steadyFrom {
		if p.steadyMax == nil {
			p.steadyMax = map[string]float64{}
		}
		for _, f := range steadyFields {
			p.steadyMax[f.field] = max(p.steadyMax[f.field], mb[f.field])
		}
	}
	p.end = mb
	fmt.Fprintf(&p.series, " %d:%.2f/%.2f/%.2f", int(offsets[p.taken].Seconds()), rss, mb["RssAnon"], mb["Pss"])
	p.taken++
	return nil
}
