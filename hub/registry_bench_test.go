package hub_test

// Registry benchmarks over a real bbolt store in b.TempDir(). The figures
// and the commands that produce them are in docs/PERFORMANCE.md.

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/memprof"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

type benchTD = tdgen.TD

const benchThings = 10_000

var benchTDs = sync.OnceValue(func() []benchTD { return tdgen.Generate(benchThings) })

// openBenchRegistry opens a registry over a fresh bbolt store in dir.
func openBenchRegistry(b *testing.B, dir string) (*hub.Registry, func()) {
	b.Helper()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := hub.NewRegistry(db, hub.RegistryOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return reg, func() { reg.Close(); db.Close() }
}

// putAll puts tds through reg from writers concurrent goroutines.
func putAll(b *testing.B, reg *hub.Registry, tds []benchTD, writers int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(tds) {
					return
				}
				if _, err := reg.Put(context.Background(), tds[i].ID, tds[i].Raw, hub.Origin{Source: hub.SourceHTTP}); err != nil {
					errs <- fmt.Errorf("put %s: %w", tds[i].ID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// loadedRegistry returns a registry holding the 10k benchmark TDs.
func loadedRegistry(b *testing.B) *hub.Registry {
	b.Helper()
	reg, closeReg := openBenchRegistry(b, b.TempDir())
	b.Cleanup(closeReg)
	putAll(b, reg, benchTDs(), 32)
	if n := reg.Count(); n != benchThings {
		b.Fatalf("registry holds %d things, want %d", n, benchThings)
	}
	return reg
}

// benchPut loads all benchmark TDs into a fresh store per iteration with
// the given number of writers and reports puts per second.
func benchPut(b *testing.B, writers, count int) {
	tds := benchTDs()[:count]
	var puts int
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		reg, closeReg := openBenchRegistry(b, b.TempDir())
		b.StartTimer()
		start := time.Now()
		putAll(b, reg, tds, writers)
		elapsed += time.Since(start)
		puts += len(tds)
		b.StopTimer()
		closeReg()
		b.StartTimer()
	}
	b.ReportMetric(float64(puts)/elapsed.Seconds(), "puts/s")
}

// BenchmarkRegistryPut10k: 32 concurrent writers register 10k distinct TDs
// with durable (fsynced) commits; one op is the whole 10k load.
func BenchmarkRegistryPut10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	benchPut(b, 32, benchThings)
}

// BenchmarkRegistryPutSequential: one writer, so one fsync per put; 1,000
// puts per op keep the run short at a few ms per fsync.
func BenchmarkRegistryPutSequential(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	benchPut(b, 1, 1000)
}

// liveHeap returns the bytes of live heap objects after a full GC.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkRegistryGet is GET /things/{id} in-process: Get + Enriched +
// json.Marshal of a random one of 10k Things. heap-MB is the live heap the
// 10k loaded Things hold.
func BenchmarkRegistryGet(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	tds := benchTDs()
	heap0 := liveHeap()
	reg := loadedRegistry(b)
	heap := liveHeap() - heap0 // reported after the loop, which resets metrics
	var lat []time.Duration
	i := 0
	for b.Loop() {
		id := tds[(i*7919)%len(tds)].ID // a fixed pseudo-random walk over all ids
		i++
		start := time.Now()
		t, err := reg.Get(id)
		if err != nil {
			b.Fatal(err)
		}
		// What GET /things/{id} serves: the enriched TD spliced from the
		// stored bytes.
		var doc []byte
		if err := reg.EachEnrichedJSON([]*hub.Thing{&t}, func(d []byte) error { doc = append(doc[:0], d...); return nil }); err != nil || doc == nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	percentile.Report(b, lat, time.Microsecond, "µs")
	b.ReportMetric(float64(heap)/1e6, "heap-MB")
}

// BenchmarkRegistryLoad10k is what start-up builds from a store holding the
// 10k benchmark TDs: NewRegistry over it, as the hub opens its data dir.
// index-MB is the live heap the loaded index holds and inuse-MB the heap
// spans it keeps in use (their difference is fragmentation), both after a
// collection. LMOS_MEMPROFILE=path writes
// the heap profile of the loaded index, every allocation sampled.
func BenchmarkRegistryLoad10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	dir := b.TempDir()
	reg, closeReg := openBenchRegistry(b, dir)
	putAll(b, reg, benchTDs(), 32)
	closeReg()
	memprof.SampleAll(b)
	for b.Loop() {
		db, err := store.Open(dir, store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var m0, m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		reg, err := hub.NewRegistry(db, hub.RegistryOptions{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&m)
		memprof.Write(b)
		if n := reg.Count(); n != benchThings {
			b.Fatalf("loaded %d things, want %d", n, benchThings)
		}
		b.ReportMetric(float64(m.HeapAlloc-m0.HeapAlloc)/1e6, "index-MB")
		b.ReportMetric(float64(m.HeapInuse-m0.HeapInuse)/1e6, "inuse-MB")
		reg.Close()
		db.Close()
	}
}

// BenchmarkSearchJSONPath10k runs discovery queries over 10k Things: a
// title lookup, a capability lookup, and (worst case) a descendant query.
func BenchmarkSearchJSONPath10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	reg := loadedRegistry(b)
	queries := []struct{ name, q string }{
		{"title", fmt.Sprintf("$[?@.title==%q].id", benchTDs()[4242].Title)},
		{"capability", "$[?@['lmos:capabilities'][?@.name=='set temperature']].id"},
		{"descendant", "$..forms[?@.op=='invokeaction'].href"},
	}
	for _, q := range queries {
		b.Run(q.name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				nodes, err := reg.SearchJSONPath(q.q)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				if len(nodes) == 0 {
					b.Fatalf("%s selected nothing", q.q)
				}
			}
			percentile.Report(b, lat, time.Millisecond, "ms")
		})
	}
}

// BenchmarkSearchText10k is the capability text search over 10k Things.
func BenchmarkSearchText10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	reg := loadedRegistry(b)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		hits, err := reg.SearchText("temperature set", "", 20)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if len(hits) == 0 {
			b.Fatal("no hits")
		}
	}
	percentile.Report(b, lat, time.Millisecond, "ms")
}

// BenchmarkList100 is GET /things?offset=5000&limit=100 in-process: List +
// Enriched of each + json.Marshal.
func BenchmarkList100(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	reg := loadedRegistry(b)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		things, _ := reg.List(benchThings/2, 100)
		page := []byte{'['}
		if err := reg.EachEnrichedJSON(things, func(d []byte) error { page = append(append(page, d...), ','); return nil }); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if len(things) != 100 {
			b.Fatalf("page has %d things", len(things))
		}
	}
	percentile.Report(b, lat, time.Microsecond, "µs")
}

// BenchmarkValidate: hub.Validate (the hub's rules plus the W3C TD 1.1 JSON
// Schema) of one parsed benchmark TD per op; the share of a durable PUT that
// validation costs (docs/PERFORMANCE.md).
func BenchmarkValidate(b *testing.B) {
	tds := benchTDs()
	docs := make([]map[string]any, 0, 1000)
	for _, td := range tds[:1000] {
		doc, err := hub.ParseDocument(td.Raw)
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, doc)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := hub.Validate(docs[i%len(docs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
