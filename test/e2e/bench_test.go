package e2e

// Full-stack benchmarks: the hub started in-process as main starts it (the
// configuration of startHubIn) and driven over HTTP on loopback, plus the
// startup time and the RSS of the real binary. Figures and commands are in
// docs/PERFORMANCE.md.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

type benchTD = tdgen.TD

const benchThings = 10_000

var benchTDs = sync.OnceValue(func() []benchTD { return tdgen.Generate(benchThings) })

// benchEdit turns the test configuration (WriteRate 0: no rate limit)
// into the benchmarks': no registry quotas, for benchmarks register 10k
// Things, and 100 agents from one address.
func benchEdit(cfg *Config) {
	cfg.Registry.MaxThings, cfg.Registry.MaxBytes, cfg.Registry.MaxThingsPerSource = 0, 0, 0
}

// startBenchHub starts a hub in-process on dir as every test does
// (hubtest.NewMain and Run), after benchEdit and then edit (nil: none).
// stop ends it, for a benchmark that starts hubs in its loop; the end of
// the benchmark ends it too.
func startBenchHub(b *testing.B, dir string, edit func(*Config)) (m *Main, baseURL string, stop func()) {
	b.Helper()
	h := hubtest.Run(b, hubtest.NewMain(b, dir, func(cfg *Config) {
		benchEdit(cfg)
		if edit != nil {
			edit(cfg)
		}
	}))
	return h.Main, h.URL, h.Close
}

// fillDir stores the 10k benchmark TDs in a hub data directory, through the
// registry (32 writers), and closes it again.
func fillDir(b *testing.B, dir string) {
	b.Helper()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	reg, err := hub.NewRegistry(db, hub.RegistryOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	tds := benchTDs()
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(tds); i = int(next.Add(1)) - 1 {
				if _, err := reg.Put(context.Background(), tds[i].ID, tds[i].Raw, hub.Origin{Source: hub.SourceHTTP}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatalf("fill data dir: %v", err)
	}
}

// loadedBenchHub starts a hub over a data dir holding the 10k TDs.
func loadedBenchHub(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	fillDir(b, dir)
	_, base, stop := startBenchHub(b, dir, nil)
	b.Cleanup(stop)
	return base
}

// benchClient is a keep-alive client for up to 64 connections to the hub.
func benchClient(b *testing.B) *http.Client {
	tr := &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 64, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// fetch sends a request, reads the whole response and checks its status.
func fetch(c *http.Client, method, u string, body []byte, want int) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/td+json")
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d: %.300s", method, u, resp.StatusCode, want, b)
	}
	return nil
}

// timeGets GETs the URL from next() once per iteration, sequentially over
// one keep-alive connection, and reports the p50/p99 latency in unit.
func timeGets(b *testing.B, c *http.Client, next func() string, unit time.Duration, name string) {
	b.Helper()
	var lat []time.Duration
	for b.Loop() {
		u := next()
		start := time.Now()
		if err := fetch(c, http.MethodGet, u, nil, http.StatusOK); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	percentile.Report(b, lat, unit, name)
}

// BenchmarkHTTPPut10k: 32 keep-alive clients PUT 10k distinct TDs into a
// fresh hub; one op is the whole 10k load.
func BenchmarkHTTPPut10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	tds := benchTDs()
	c := benchClient(b)
	var puts int
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		_, base, stop := startBenchHub(b, b.TempDir(), nil)
		b.StartTimer()
		start := time.Now()
		var next atomic.Int64
		var failed atomic.Value
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < len(tds); i = int(next.Add(1)) - 1 {
					if err := fetch(c, http.MethodPut, base+"/things/"+url.PathEscape(tds[i].ID), tds[i].Raw, http.StatusCreated); err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		puts += len(tds)
		b.StopTimer()
		stop()
		b.StartTimer()
		if err := failed.Load(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(puts)/elapsed.Seconds(), "puts/s")
}

// BenchmarkHTTPGetByID: GET /things/{id} of random ones of 10k Things.
func BenchmarkHTTPGetByID(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	base := loadedBenchHub(b)
	c := benchClient(b)
	tds := benchTDs()
	i := 0
	timeGets(b, c, func() string {
		i++
		return base + "/things/" + url.PathEscape(tds[(i*7919)%len(tds)].ID)
	}, time.Microsecond, "µs")
}

// BenchmarkHTTPSearchJSONPath10k: GET /search/jsonpath over 10k Things.
func BenchmarkHTTPSearchJSONPath10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	base := loadedBenchHub(b)
	c := benchClient(b)
	for _, q := range []struct{ name, q string }{
		{"title", fmt.Sprintf("$[?@.title==%q].id", benchTDs()[4242].Title)},
		{"capability", "$[?@['lmos:capabilities'][?@.name=='set temperature']].id"},
	} {
		b.Run(q.name, func(b *testing.B) {
			u := base + "/search/jsonpath?" + url.Values{"query": {q.q}}.Encode()
			timeGets(b, c, func() string { return u }, time.Millisecond, "ms")
		})
	}
}

// BenchmarkHTTPListPage100: GET /things?offset=5000&limit=100 of 10k.
func BenchmarkHTTPListPage100(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	base := loadedBenchHub(b)
	c := benchClient(b)
	u := base + "/things?offset=5000&limit=100"
	timeGets(b, c, func() string { return u }, time.Millisecond, "ms")
}

// BenchmarkStartup10k: from NewMain to the first successful GET /healthz,
// over a data dir holding 10k TDs (page cache warm).
func BenchmarkStartup10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	dir := b.TempDir()
	fillDir(b, dir)
	c := benchClient(b)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		h := hubtest.Run(b, hubtest.NewMain(b, dir, benchEdit))
		m := h.Main
		for fetch(c, http.MethodGet, "http://"+m.HTTPAddr.String()+"/healthz", nil, http.StatusOK) != nil {
			if time.Since(start) > 30*time.Second {
				b.Fatal("hub not serving /healthz after 30 s")
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if n := m.Registry.Count(); n != benchThings {
			b.Fatalf("hub holds %d things, want %d", n, benchThings)
		}
		h.Close()
		c.CloseIdleConnections()
		b.StartTimer()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "p50-ms-to-serving")
}

// BenchmarkIdleRSS builds the real binary and reads its VmRSS: idle with an
// empty store, and with 10k TDs stored after one JSONPath query and a full
// GET /things.
func BenchmarkIdleRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	bin := buildTool(b, lmosHubPkg, "lmos-hub")
	b.Run("empty", func(b *testing.B) {
		for b.Loop() {
			rss := binaryRSS(b, bin, b.TempDir(), nil)
			b.ReportMetric(rss["VmRSS"], "idle-RSS-MB")
		}
	})
	b.Run("10kTDs", func(b *testing.B) {
		dir := b.TempDir()
		fillDir(b, dir)
		for b.Loop() {
			rss := binaryRSS(b, bin, dir, func(c *http.Client, base string) error {
				q := url.Values{"query": {"$[?@['lmos:capabilities'][?@.name=='set temperature']].id"}}
				if err := fetch(c, http.MethodGet, base+"/search/jsonpath?"+q.Encode(), nil, http.StatusOK); err != nil {
					return err
				}
				return fetch(c, http.MethodGet, base+"/things", nil, http.StatusOK)
			})
			b.ReportMetric(rss["VmRSS"], "10kTDs-RSS-MB")
			b.ReportMetric(rss["RssAnon"], "10kTDs-anon-MB")
			b.ReportMetric(rss["VmHWM"], "10kTDs-peak-RSS-MB")
		}
	})
}

// binaryRSS runs bin on dir (startHubBinary), runs work, waits 2 s and
// returns its VmRSS, VmHWM (peak), RssAnon (heap, stacks) and RssFile
// (mapped files: the binary, bbolt's mmap) in MB. The child is stopped
// before it returns.
func binaryRSS(b *testing.B, bin, dir string, work func(c *http.Client, base string) error) map[string]float64 {
	b.Helper()
	p := startHubBinary(b, bin, dir)
	defer p.stop()
	c := benchClient(b)
	if work != nil {
		if err := work(c, p.httpBase); err != nil {
			b.Fatal(err)
		}
	}
	c.CloseIdleConnections()
	time.Sleep(2 * time.Second)
	return procMemMB(b, p.pid)
}

// BenchmarkHTTPHealthz is the floor under every HTTP figure: the loopback
// round trip of the same client to the same hub for the smallest answer.
func BenchmarkHTTPHealthz(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	base := loadedBenchHub(b)
	c := benchClient(b)
	timeGets(b, c, func() string { return base + "/healthz" }, time.Microsecond, "µs")
}
