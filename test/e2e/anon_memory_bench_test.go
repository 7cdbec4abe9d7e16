package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Issue 24, point 6: the memory of the anonymous patterns that took a 1 GB
// board down, each against the real binary in its own process with its
// default settings (docs/PERFORMANCE.md "Issue 24 — anonymous memory
// patterns"). Each reports the hub's peak RSS while the pattern ran
// (pattern-peak-RSS-MB: VmHWM, reset through /proc/{pid}/clear_refs once
// the set-up is done) and over its whole life (peak-RSS-MB), and whether
// /healthz answered throughout (a probe every 200 ms, 5 s each:
// healthz-fails, healthz-max-ms). LMOS_BENCH_HUB_BIN runs another build
// of lmos-hub instead of this tree's (to measure the code before).

// anonBenchBin is the lmos-hub binary the benchmarks run.
func anonBenchBin(b *testing.B) string {
	if bin := os.Getenv("LMOS_BENCH_HUB_BIN"); bin != "" {
		return bin
	}
	return buildTool(b, lmosHubPkg, "lmos-hub")
}

// resetPeak reports the RSS of pid now (before-RSS-MB, of it heap and
// stacks before-anon-MB: the set-up done)
// and resets its VmHWM (Linux ≥ 4.0: clear_refs 5).
func resetPeak(b *testing.B, pid int) {
	b.Helper()
	before := procMemMB(b, pid)
	b.ReportMetric(before["VmRSS"], "before-RSS-MB")
	b.ReportMetric(before["RssAnon"], "before-anon-MB")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		b.Logf("cannot reset the peak RSS: %v (pattern-peak is the peak since start)", err)
	}
}

// healthWatch probes /healthz every 200 ms until stopped.
type healthWatch struct {
	fails, probes atomic.Int64
	maxNs         atomic.Int64
	stop          func()
}

func watchHealthz(base string) *healthWatch {
	hw := &healthWatch{}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			start := time.Now()
			resp, err := c.Get(base + "/healthz")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != http.StatusOK {
				hw.fails.Add(1)
			}
			hw.probes.Add(1)
			if d := int64(time.Since(start)); d > hw.maxNs.Load() {
				hw.maxNs.Store(d)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	hw.stop = sync.OnceFunc(func() { close(done); <-ended })
	return hw
}

// report stops hw and reports the hub's memory and the probes.
func (hw *healthWatch) report(b *testing.B, pid int) {
	hw.stop()
	mem := procMemMB(b, pid)
	b.ReportMetric(mem["VmHWM"], "pattern-peak-RSS-MB")
	b.ReportMetric(mem["RssAnon"], "anon-after-MB")
	b.ReportMetric(float64(hw.fails.Load()), "healthz-fails")
	b.ReportMetric(float64(hw.maxNs.Load())/float64(time.Millisecond), "healthz-max-ms")
	if hw.fails.Load() > 0 {
		b.Logf("/healthz failed %d of %d times (5 s each)", hw.fails.Load(), hw.probes.Load())
	}
}

// benchClientFrom is an HTTP client whose connections come from the loopback
// address ip: each such address is a client of its own to the hub.
func benchClientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64, DisableCompression: true}
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// adminDo sends a request with the admin token and checks the status.
func adminDo(c *http.Client, method, u string, body []byte, want int) error {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %.300s", method, u, resp.StatusCode, got)
	}
	return nil
}

// BenchmarkAnonGroupActionsRSS: 64 concurrent anonymous POST
// /api/groups/{g}/actions/{a} (JSON answers, read whole) against 32 MQTT
// agents (the agent library, in this process) each answering 1 MB, and
// 128 KB (issue 24: 947–1,256 MB and 558 MB before).
func BenchmarkAnonGroupActionsRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	bin := anonBenchBin(b)
	for _, size := range []int{1_000_000, 128 << 10} {
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			for b.Loop() {
				anonGroupActions(b, bin, size)
			}
		})
	}
}

func anonGroupActions(b *testing.B, bin string, size int) {
	p := startHubBinary(b, bin, b.TempDir())
	defer p.stop()
	const members, calls = 32, 64
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := strings.Repeat("x", size-2)
	var ids []string
	for i := range members {
		id := fmt.Sprintf("urn:bench:big-%02d", i)
		a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + p.mqttAddr, Logger: slog.New(slog.DiscardHandler),
			TD: map[string]any{"id": id, "title": id, "@type": "lmos:Agent", "actions": map[string]any{"report": map[string]any{}}}})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		a.HandleAction("report", func(context.Context, agent.Input) (any, error) { return out, nil })
		ids = append(ids, id)
	}
	c := benchClientFrom("127.0.0.1")
	defer c.CloseIdleConnections()
	group, _ := json.Marshal(map[string]any{"id": "big", "title": "big", "members": ids})
	if err := adminDo(c, http.MethodPost, p.httpBase+"/api/groups", group, http.StatusCreated); err != nil {
		b.Fatal(err)
	}
	resetPeak(b, p.pid)
	hw := watchHealthz(p.httpBase)
	var kept, dropped, other, failed atomic.Int64
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			resp, err := c.Post(p.httpBase+"/api/groups/big/actions/report", "application/json", nil)
			if err != nil {
				failed.Add(1)
				return
			}
			defer resp.Body.Close()
			var ans lmos.GroupActionAnswer
			if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&ans) != nil {
				failed.Add(1)
				return
			}
			for _, r := range ans.Results {
				switch {
				case len(r.Output) > 0:
					kept.Add(1)
				case r.Error != nil && r.Error.Status == http.StatusServiceUnavailable:
					dropped.Add(1)
				default:
					other.Add(1) // over the call's 4 MiB (413), timed out …
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Second)
	hw.report(b, p.pid)
	b.ReportMetric(procMemMB(b, p.pid)["VmHWM"], "peak-RSS-MB")
	b.ReportMetric(float64(kept.Load()), "outputs-passed")
	b.ReportMetric(float64(dropped.Load()), "outputs-dropped-503")
	b.ReportMetric(float64(other.Load()), "outputs-other")
	b.ReportMetric(float64(failed.Load()), "calls-failed")
}

// BenchmarkAnonEventStreamsRSS: 1,024 anonymous GET /api/events?diff=true
// streams (64 from each of 16 loopback addresses, the per-address limit),
// then 8 anonymous updates of a 250 KB TD each; the streams never read
// (unread: small receive buffers, never read after the head) or read
// everything (read). Issue 24: 625 MB and 1 s of CPU per update unread,
// 629 MB read, before. cpu-ms-per-update is the hub's CPU time from the
// first update until the streams were served (read) or 5 s after the
// last update (unread), over 8.
func BenchmarkAnonEventStreamsRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	raiseNoFile(b, 4096)
	bin := anonBenchBin(b)
	for _, read := range []bool{false, true} {
		name := "unread"
		if read {
			name = "read"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				anonEventStreams(b, bin, read)
			}
		})
	}
}

func anonEventStreams(b *testing.B, bin string, read bool) {
	p := startHubBinary(b, bin, b.TempDir())
	defer p.stop()
	const streams, addrs, updates = 1024, 16, 8
	c := benchClientFrom("127.0.0.1")
	defer c.CloseIdleConnections()
	td := func(id string, fill byte, n int) []byte {
		return fmt.Appendf(nil, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":"big","description":%q,"securityDefinitions":{"n":{"scheme":"nosec"}},"security":"n"}`,
			id, strings.Repeat(string(fill), n))
	}
	ids := make([]string, updates)
	for i := range ids {
		ids[i] = fmt.Sprintf("urn:bench:feed-%d", i)
		if err := fetch(c, http.MethodPut, p.httpBase+"/things/"+ids[i], td(ids[i], 'a', 10), http.StatusCreated); err != nil {
			b.Fatal(err)
		}
	}
	host := strings.TrimPrefix(p.httpBase, "http://")
	var seen atomic.Int64 // thing_updated events the readers got
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	for i := range streams {
		ip := fmt.Sprintf("127.0.0.%d", 10+i%addrs)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		if !read {
			d.Control = func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
				return errors.Join(err, serr)
			}
		}
		conn, err := d.Dial("tcp", host)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, conn)
		fmt.Fprintf(conn, "GET /api/events?diff=true HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", host)
		br := bufio.NewReaderSize(conn, 16)
		status, err := br.ReadString('\n')
		if err != nil || !strings.Contains(status, " 200 ") {
			b.Fatalf("stream %d: %q %v", i, status, err)
		}
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if line == "\r\n" {
				break
			}
		}
		if read {
			go func() {
				sc := bufio.NewScanner(br)
				sc.Buffer(make([]byte, 1<<20), 1<<20)
				for sc.Scan() {
					if sc.Text() == "event: thing_updated" {
						seen.Add(1)
					}
				}
			}()
		}
	}
	resetPeak(b, p.pid)
	hw := watchHealthz(p.httpBase)
	cpu0 := procCPU(b, p.pid)
	for i, id := range ids {
		if err := fetch(c, http.MethodPut, p.httpBase+"/things/"+id, td(id, byte('b'+i), 240_000), http.StatusNoContent); err != nil {
			b.Fatal(err)
		}
	}
	if read {
		deadline := time.Now().Add(3 * time.Minute)
		for seen.Load() < streams*updates && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		b.ReportMetric(float64(seen.Load())/float64(streams*updates), "delivered-fraction")
	} else {
		time.Sleep(5 * time.Second)
	}
	cpu := procCPU(b, p.pid) - cpu0
	hw.report(b, p.pid)
	b.ReportMetric(procMemMB(b, p.pid)["VmHWM"], "peak-RSS-MB")
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/updates, "cpu-ms-per-update")
	b.ReportMetric(metricOf(c, p.httpBase, "lmos_sse_dropped_total"), "streams-cut")
}

// metricOf reads one series of the hub's /metrics (-1 if absent).
func metricOf(c *http.Client, base, series string) float64 {
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

// BenchmarkAnonGroupListRSS: 64 groups of 1,024 members each (5.4 MB as
// one list), then 16 anonymous clients (one loopback address each) GET
// /api/groups over and over for 15 s, reading every answer (issue 24:
// 23.6 s of CPU in 15 s, 689 MB before). cpu-s is the hub's CPU time
// in those 15 s; lists-served the whole answers, refused-429 the
// requests beyond a client's request rate.
func BenchmarkAnonGroupListRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	bin := anonBenchBin(b)
	for b.Loop() {
		anonGroupList(b, bin)
	}
}

func anonGroupList(b *testing.B, bin string) {
	p := startHubBinary(b, bin, b.TempDir())
	defer p.stop()
	const things, groups, workers = 1024, 64, 16
	ids := make([]string, things)
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range 4 { // 256 each: within one address's write burst
		c := benchClientFrom(fmt.Sprintf("127.0.0.%d", 60+w))
		wg.Go(func() {
			defer c.CloseIdleConnections()
			for i := w; i < things; i += 4 {
				ids[i] = fmt.Sprintf("urn:uuid:7e3a1c52-0000-4000-8000-%012d", i)
				if err := adminDo(c, http.MethodPut, p.httpBase+"/things/"+ids[i], agentTD(ids[i]), http.StatusCreated); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	c := benchClientFrom("127.0.0.1")
	defer c.CloseIdleConnections()
	for g := range groups {
		body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("g%02d", g), "title": "many", "members": ids})
		if err := adminDo(c, http.MethodPost, p.httpBase+"/api/groups", body, http.StatusCreated); err != nil {
			b.Fatal(err)
		}
	}
	size := 0
	if resp, err := c.Get(p.httpBase + "/api/groups"); err == nil {
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		size = int(n)
	}
	time.Sleep(2 * time.Second)
	resetPeak(b, p.pid)
	hw := watchHealthz(p.httpBase)
	cpu0 := procCPU(b, p.pid)
	var served, refused, errs atomic.Int64
	end := time.Now().Add(15 * time.Second)
	for w := range workers {
		wc := benchClientFrom(fmt.Sprintf("127.0.0.%d", 100+w))
		wg.Go(func() {
			defer wc.CloseIdleConnections()
			for time.Now().Before(end) {
				resp, err := wc.Get(p.httpBase + "/api/groups")
				if err != nil {
					errs.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					served.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
					time.Sleep(50 * time.Millisecond)
				default:
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cpu := procCPU(b, p.pid) - cpu0
	hw.report(b, p.pid)
	b.ReportMetric(procMemMB(b, p.pid)["VmHWM"], "peak-RSS-MB")
	b.ReportMetric(float64(size)/1e6, "list-MB")
	b.ReportMetric(cpu.Seconds(), "cpu-s")
	b.ReportMetric(float64(served.Load()), "lists-served")
	b.ReportMetric(float64(refused.Load()), "refused-429")
	b.ReportMetric(float64(errs.Load()), "errors")
}
