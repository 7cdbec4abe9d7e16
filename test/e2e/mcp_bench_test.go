package e2e

// Benchmarks of the MCP door (issue 29): the real lmos-hub binary as a
// process of its own; the MCP clients (the official Go SDK, as the door's
// tests use it), the HTTP proxy's client and the agent (the agent library
// over MQTT) in the benchmark's process.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/memprof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The revisions the door serves: the current one without sessions, and
// the one before it with sessions.
const (
	mcpStateless = "2026-07-28"
	mcpSession   = "2025-11-25"
)

// startMCPHub starts the built hub bin with the registry unbounded, no
// write rate limit and the given mcp.* settings (YAML lines, indented).
func startMCPHub(b *testing.B, bin, mcpYAML string) hubProcess {
	b.Helper()
	dir := b.TempDir()
	cfg := filepath.Join(dir, "hub.yaml")
	yaml := "registry:\n  maxThings: 0\n  maxBytes: 0\n  maxThingsPerSource: 0\nhttp:\n  writeRate: 0\nmcp:\n" + mcpYAML
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	return startHubBinary(b, bin, b.TempDir(), "--config", cfg)
}

// byteCounter counts the bytes of the response bodies read through it.
type byteCounter struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (c byteCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		resp.Body = &countedBody{ReadCloser: resp.Body, n: c.n}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// mcpClient opens a Go SDK client session with base's /mcp at version
// over rt; onChange, if not nil, hears notifications/tools/list_changed
// (and so makes the client open its notification stream at 2026-07-28:
// subscriptions/listen; at 2025-11-25 it opens the session's GET stream
// unless noGET).
func mcpClient(b *testing.B, base, version string, rt http.RoundTripper, noGET bool, onChange func()) *mcp.ClientSession {
	b.Helper()
	opts := &mcp.ClientOptions{}
	if onChange != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { onChange() }
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "lmos-bench", Version: "0"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1, DisableStandaloneSSE: noGET,
		HTTPClient: &http.Client{Transport: rt}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		b.Fatalf("MCP connect at %s: %v", version, err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		b.Fatalf("negotiated %s, want %s", got, version)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}

// putTDs registers tds at base over HTTP (admin token), 8 writers.
func putTDs(b *testing.B, base string, tds []tdgen.TD) { putTDsWith(b, base, tds, 8) }

// putTDsWith registers tds with the given number of writers (32: as the
// registry's benchmarks do).
func putTDsWith(b *testing.B, base string, tds []tdgen.TD, writers int) {
	b.Helper()
	c := benchClient(b)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < len(tds); i += writers {
				if err := fetch(c, http.MethodPut, base+"/things/"+url.PathEscape(tds[i].ID), tds[i].Raw, http.StatusCreated); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkMCPToolsList1000: tools/list of a hub with 1,000 registered
// Things (test/kit/tdgen, one action each), by the Go SDK client at both
// revisions, one call at a time. "all": mcp.maxTools 1000, so every
// Thing's tool is listed (1,002 tools with find_tools and call_tool);
// "default": mcp.maxTools as shipped (38), so the list holds only
// find_tools and call_tool. Reports p50/p99 per call (the client's
// decoding and checking of the tools included), the hub process's CPU
// time (user + system) per call, the answer's HTTP body in bytes as read
// from the wire (the SDK's framing included) and the tools listed.
func BenchmarkMCPToolsList1000(b *testing.B) {
	if testing.Short() {
		b.Skip("starts hub processes")
	}
	bin := buildTool(b, lmosHubPkg, "lmos-hub")
	tds := tdgen.Generate(1000)
	for _, c := range []struct{ name, yaml string }{
		{"all", "  maxTools: 1000\n"},
		{"default", "  enabled: true\n"},
	} {
		h := startMCPHub(b, bin, c.yaml)
		putTDs(b, h.httpBase, tds)
		for _, v := range []string{mcpStateless, mcpSession} {
			b.Run(c.name+"/"+v, func(b *testing.B) { benchToolsList(b, h, v, c.name == "all") })
		}
		h.stop()
	}
}

// benchToolsList times tools/list at version on h; all: every Thing's
// tool must be listed (the door follows the directory asynchronously, so
// it waits for them first).
func benchToolsList(b *testing.B, h hubProcess, version string, all bool) {
	var n atomic.Int64
	cs := mcpClient(b, h.httpBase, version, byteCounter{base: benchTransport(b), n: &n}, false, nil)
	ctx := context.Background()
	want := 2
	if all {
		want = 1002
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Tools) == want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("tools/list lists %d tools, want %d", len(res.Tools), want)
		}
	}
	var lat []time.Duration
	n.Store(0)
	calls := 0
	cpu0 := procCPU(b, h.pid)
	for b.Loop() {
		t0 := time.Now()
		res, err := cs.ListTools(ctx, nil)
		lat = append(lat, time.Since(t0))
		if err != nil || len(res.Tools) != want {
			b.Fatalf("tools/list: %v (%d tools)", err, len(res.Tools))
		}
		calls++
	}
	b.ReportMetric(float64((procCPU(b, h.pid)-cpu0).Microseconds())/1e3/float64(calls), "hub-cpu-ms/call")
	percentile.Report(b, lat, time.Millisecond, "ms")
	b.ReportMetric(float64(n.Load())/float64(calls), "answer-bytes")
	b.ReportMetric(float64(want), "tools")
}

// benchTransport is a keep-alive transport of its own.
func benchTransport(b *testing.B) *http.Transport {
	tr := &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 64, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return tr
}

// mcpAdderID is the agent BenchmarkMCPToolCall calls; its tool is
// mcpAdderTool ("<title slug>__<action>").
const (
	mcpAdderID   = "urn:bench:mcp:adder"
	mcpAdderTool = "bench_adder__add"
)

// startAdder connects an agent over MQTT to the hub at mqttAddr serving
// add ({a, b} → {sum}) and waits until the hub's proxy reaches it.
func startAdder(b *testing.B, mqttAddr, base string) {
	b.Helper()
	num := map[string]any{"type": "number"}
	td := map[string]any{
		"@context": []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":    "lmos:Agent", "id": mcpAdderID, "title": "Bench adder",
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}}, "security": "nosec_sc",
		"actions": map[string]any{"add": map[string]any{
			"input":  map[string]any{"type": "object", "properties": map[string]any{"a": num, "b": num}, "required": []any{"a", "b"}},
			"output": map[string]any{"type": "object", "properties": map[string]any{"sum": num}},
		}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + mqttAddr, TD: td, StateDir: b.TempDir(), Timeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatalf("agent: %v", err)
	}
	b.Cleanup(func() { _ = a.Close() })
	a.HandleAction("add", func(_ context.Context, in agent.Input) (any, error) {
		var s struct{ A, B float64 }
		if err := in.Decode(&s); err != nil {
			return nil, err
		}
		return map[string]any{"sum": s.A + s.B}, nil
	})
	c := benchClient(b)
	for deadline := time.Now().Add(30 * time.Second); proxyAdd(c, base) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the agent does not answer through the proxy: %v", proxyAdd(c, base))
		}
	}
}

// proxyAdd invokes the adder's add through the HTTP proxy.
func proxyAdd(c *http.Client, base string) error {
	resp, err := c.Post(base+"/proxy/"+url.PathEscape(mcpAdderID)+"/actions/add", "application/json", strings.NewReader(`{"a":1,"b":2}`))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct{ Sum float64 }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.Sum != 3 {
		return fmt.Errorf("proxy: status %d, sum %v, %v", resp.StatusCode, out.Sum, err)
	}
	return nil
}

// mcpAdd calls the adder's tool through the MCP door.
func mcpAdd(cs *mcp.ClientSession) error {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpAdderTool, Arguments: map[string]any{"a": 1, "b": 2}})
	if err != nil {
		return err
	}
	if out, _ := json.Marshal(res.StructuredContent); res.IsError || string(out) != `{"sum":3}` {
		return fmt.Errorf("tools/call: error %v, structured %s", res.IsError, out)
	}
	return nil
}

// BenchmarkMCPToolCall: the same invocation of an MQTT agent (the agent
// library in the benchmark's process, joined over MQTT) through the hub
// binary's HTTP proxy (POST /proxy/{id}/actions/add, one keep-alive
// connection) and through its MCP door (tools/call by the Go SDK client)
// at 2026-07-28 (stateless: one POST per call) and at 2025-11-25 (a
// session, its GET stream open), one call at a time, in interleaved
// rounds (proxy, 2026, 2025, proxy, …; LMOS_BENCH_MCP_ROUNDS, default 3)
// of 100 warm-up and LMOS_BENCH_MCP_CALLS (default 1,000) timed calls.
// Reports p50/p99 per path, the MCP/proxy ratios of both, and the hub
// process's CPU time (user + system) per call. LMOS_BENCH_MCP_PERF=dir
// runs the hub with its symbols and records, with perf, its CPU profile
// during each path's timed calls of the first round into
// dir/<path>.perf.data (`perf report -i …`).
func BenchmarkMCPToolCall(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a hub process")
	}
	perfDir := os.Getenv("LMOS_BENCH_MCP_PERF")
	var bin string
	if perfDir == "" {
		bin = buildTool(b, lmosHubPkg, "lmos-hub")
	} else {
		bin = buildWithSymbols(b, lmosHubPkg, "lmos-hub")
		if err := os.MkdirAll(perfDir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	h := startMCPHub(b, bin, "  enabled: true\n")
	startAdder(b, h.mqttAddr, h.httpBase)
	proxy := benchClient(b)
	type path struct {
		name string
		call func() error
		lat  []time.Duration
		cpu  time.Duration
	}
	cs26 := mcpClient(b, h.httpBase, mcpStateless, benchTransport(b), false, nil)
	cs25 := mcpClient(b, h.httpBase, mcpSession, benchTransport(b), false, nil)
	paths := []*path{
		{name: "proxy", call: func() error { return proxyAdd(proxy, h.httpBase) }},
		{name: "mcp2026", call: func() error { return mcpAdd(cs26) }},
		{name: "mcp2025", call: func() error { return mcpAdd(cs25) }},
	}
	timed := envInt("LMOS_BENCH_MCP_CALLS", 1000)
	for b.Loop() {
		for round := range envInt("LMOS_BENCH_MCP_ROUNDS", 3) {
			for _, p := range paths {
				for range 100 {
					if err := p.call(); err != nil {
						b.Fatalf("%s: %v", p.name, err)
					}
				}
				stopPerf := func() {}
				if perfDir != "" && round == 0 {
					stopPerf = perfRecord(b, h.pid, filepath.Join(perfDir, p.name+".perf.data"))
				}
				cpu0 := procCPU(b, h.pid)
				for range timed {
					t0 := time.Now()
					if err := p.call(); err != nil {
						b.Fatalf("%s: %v", p.name, err)
					}
					p.lat = append(p.lat, time.Since(t0))
				}
				p.cpu += procCPU(b, h.pid) - cpu0
				stopPerf()
			}
		}
	}
	for _, p := range paths {
		percentile.Report(b, p.lat, time.Microsecond, "µs-"+p.name)
		b.ReportMetric(float64(p.cpu.Microseconds())/float64(len(p.lat)), "cpu-µs/call-"+p.name)
	}
	for _, p := range paths[1:] {
		b.ReportMetric(ratioAt(p.lat, paths[0].lat, 50), "p50-x-"+p.name+"/proxy")
		b.ReportMetric(ratioAt(p.lat, paths[0].lat, 99), "p99-x-"+p.name+"/proxy")
	}
}

// buildWithSymbols builds the main package pkg as buildTool does but
// keeps its symbols, for a profiler to name the functions.
func buildWithSymbols(b *testing.B, pkg, name string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), name)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("cannot build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// perfRecord starts `perf record -g` on process pid into file; the
// function it returns stops it and waits until the file is written.
func perfRecord(b *testing.B, pid int, file string) func() {
	b.Helper()
	cmd := exec.Command("perf", "record", "-q", "-F", "2999", "-g", "-p", strconv.Itoa(pid), "-o", file)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatalf("perf: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // perf attaches
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait() // perf exits non-zero on SIGINT, its profile written
		if st, serr := os.Stat(file); serr != nil || st.Size() == 0 {
			b.Fatalf("perf record wrote no profile (%v):\n%s", err, out.String())
		}
	}
}

// ratioAt is the ratio of two sorted latency lists' q-th percentiles.
func ratioAt(a, b []time.Duration, q int) float64 {
	return float64(a[len(a)*q/100]) / float64(b[len(b)*q/100])
}

// envInt is the positive integer in the environment variable name, or def.
func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkMCPListenerMemory: the hub process's memory per open
// notification stream. N clients (LMOS_BENCH_MCP_LISTENERS, default 200)
// of the Go SDK open, each, at 2026-07-28 a subscriptions/listen stream
// ("listen"); at 2025-11-25 a session with its GET stream ("session+GET")
// or a session alone ("session"). Reports the growth of RssAnon, PSS and
// VmRSS (/proc) from before the clients connected to 2 s after, per
// client, in KB, and of the hub's goroutines, heap in use and stacks (its
// /metrics; the heap's garbage not yet collected counts too). Each stream is checked live afterwards: a Thing joins and
// every listening client must hear notifications/tools/list_changed.
func BenchmarkMCPListenerMemory(b *testing.B) {
	if testing.Short() {
		b.Skip("starts hub processes")
	}
	bin := buildTool(b, lmosHubPkg, "lmos-hub")
	n := envInt("LMOS_BENCH_MCP_LISTENERS", 200)
	for _, c := range []struct {
		name, version string
		noGET         bool
	}{{"listen", mcpStateless, false}, {"session+GET", mcpSession, false}, {"session", mcpSession, true}} {
		b.Run(c.name, func(b *testing.B) {
			h := startMCPHub(b, bin, fmt.Sprintf("  maxListeners: %d\n  maxSessions: %d\n", n+10, n+10))
			for b.Loop() {
				listenerMemory(b, h, n, c.version, c.noGET)
			}
		})
	}
}

// listenerMemory opens n clients at version on h and reports the hub's
// memory growth per client; the clients stay open until b ends.
func listenerMemory(b *testing.B, h hubProcess, n int, version string, noGET bool) {
	time.Sleep(2 * time.Second)
	before, goBefore := procMB(b, h.pid), goMetrics(b, h.httpBase)
	var heard atomic.Int64
	rt := benchTransport(b)
	for range n {
		var once sync.Once
		onChange := func() { once.Do(func() { heard.Add(1) }) }
		if noGET {
			onChange = nil
		}
		mcpClient(b, h.httpBase, version, rt, noGET, onChange)
	}
	time.Sleep(2 * time.Second)
	after, goAfter := procMB(b, h.pid), goMetrics(b, h.httpBase)
	for _, f := range []string{"RssAnon", "Pss", "VmRSS"} {
		b.ReportMetric((after[f]-before[f])*1024/float64(n), f+"-KB/client")
	}
	b.ReportMetric((goAfter["go_goroutines"]-goBefore["go_goroutines"])/float64(n), "goroutines/client")
	for _, f := range []string{"heap_inuse", "stack_inuse"} {
		m := "go_memstats_" + f + "_bytes"
		b.ReportMetric((goAfter[m]-goBefore[m])/1024/float64(n), f+"-KB/client")
	}
	b.ReportMetric(after["RssAnon"], "RssAnon-MB")
	if noGET {
		return
	}
	putTDs(b, h.httpBase, tdgen.Generate(1))
	for deadline := time.Now().Add(60 * time.Second); heard.Load() < int64(n); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d clients heard tools/list_changed", heard.Load(), n)
		}
	}
}

// goMetrics reads the Go runtime's gauges (go_*) of the hub's /metrics.
func goMetrics(b *testing.B, base string) map[string]float64 {
	b.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "go_") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// procMB reads process pid's memory (test/kit/memprof).
func procMB(b *testing.B, pid int) map[string]float64 {
	b.Helper()
	mb, err := memprof.ProcMB(pid)
	if err != nil {
		b.Fatal(err)
	}
	return mb
}

// BenchmarkMCPFollow10k: what following the directory costs the hub.
// 10,000 Things (test/kit/tdgen) are registered over HTTP by 32 writers at
// a hub binary with the MCP door off ("off") and on ("on"). Reports the
// PUTs' wall time, the hub process's CPU time (user + system) from the
// first PUT until the last answered ("off") or until the door has the last
// Thing's tool ("on": a tools/call of it is answered as a tool, not as an
// unknown tool), and for "on" how long after the last PUT that was.
func BenchmarkMCPFollow10k(b *testing.B) {
	if testing.Short() {
		b.Skip("starts hub processes")
	}
	bin := buildTool(b, lmosHubPkg, "lmos-hub")
	tds := tdgen.Generate(10000)
	last := toolOf(b, tds[len(tds)-1])
	for _, c := range []struct{ name, yaml string }{{"off", "  enabled: false\n"}, {"on", "  enabled: true\n"}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				h := startMCPHub(b, bin, c.yaml)
				var cs *mcp.ClientSession
				if c.name == "on" {
					cs = mcpClient(b, h.httpBase, mcpStateless, benchTransport(b), false, nil)
				}
				cpu0, t0 := procCPU(b, h.pid), time.Now()
				putTDsWith(b, h.httpBase, tds, 32)
				put := time.Since(t0)
				if cs != nil {
					for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
						_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: last, Arguments: map[string]any{}})
						if err == nil {
							break
						}
						if time.Now().After(deadline) {
							b.Fatalf("the door has no tool %s 5 min after the last PUT: %v", last, err)
						}
					}
					b.ReportMetric(time.Since(t0).Seconds()-put.Seconds(), "lag-s")
				}
				b.ReportMetric((procCPU(b, h.pid) - cpu0).Seconds(), "hub-cpu-s")
				b.ReportMetric(put.Seconds(), "put-s")
				h.stop()
			}
		})
	}
}

// toolOf is the tool name of a tdgen TD's one action: its title's words in
// lower case joined by "_", "__", the action.
func toolOf(b *testing.B, td tdgen.TD) string {
	var doc struct {
		Title   string
		Actions map[string]any
	}
	if err := json.Unmarshal(td.Raw, &doc); err != nil || len(doc.Actions) != 1 {
		b.Fatalf("generated TD: %v, %d actions", err, len(doc.Actions))
	}
	for action := range doc.Actions {
		return strings.Join(strings.Fields(strings.ToLower(doc.Title)), "_") + "__" + action
	}
	return ""
}
