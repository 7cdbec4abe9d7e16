package e2e

import (
	"crypto/ed25519"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// signedBenchTDs are the 10k benchmark TDs, each signed by a key of its
// own (every PUT then binds a new id to a new DID).
var signedBenchTDs = sync.OnceValues(func() ([][]byte, error) {
	tds := benchTDs()
	out := make([][]byte, len(tds))
	created := time.Now().Add(-time.Minute)
	for i, td := range tds {
		_, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			return nil, err
		}
		if out[i], err = proof.Sign(td.Raw, priv, created); err != nil {
			return nil, err
		}
	}
	return out, nil
})

// processCPU is the CPU time (user + system) this process has used: the
// hub runs in it, with its clients, so the CPU a load costs is measured
// even while other processes share the machine.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// putAll PUTs docs (ids[i] ← docs[i]) into a fresh hub configured by edit,
// from 32 keep-alive clients, and returns the time it took and the CPU
// time the process used meanwhile, and the hub's signature checks.
func putAll(b *testing.B, c *http.Client, ids []string, docs [][]byte, edit func(*Config)) (wall, cpu time.Duration, vs hub.VerifyStats) {
	b.Helper()
	m, base, stop := startBenchHub(b, b.TempDir(), edit)
	defer stop()
	cpu0 := processCPU(b)
	start := time.Now()
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(docs); i = int(next.Add(1)) - 1 {
				if err := fetch(c, http.MethodPut, base+"/things/"+url.PathEscape(ids[i]), docs[i], http.StatusCreated); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	wall, cpu = time.Since(start), processCPU(b)-cpu0
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	return wall, cpu, m.Registry.VerifyStats()
}

// BenchmarkHTTPPutSigned10k: durable PUT throughput of the 10k TDs signed
// (eddsa-jcs-2022, one key each: every PUT verifies a proof and binds an
// id) with security.requireSigned on, against the same 10k unsigned with it
// off, in the same run, alternating which goes first; 32 keep-alive
// clients with the admin token, a fresh hub for each load. The target is
// signed ≥ 80 % of unsigned (issue 14).
func BenchmarkHTTPPutSigned10k(b *testing.B) {
	if testing.Short() {
		b.Skip("heavy benchmark")
	}
	tds := benchTDs()
	signed, err := signedBenchTDs()
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, len(tds))
	unsigned := make([][]byte, len(tds))
	for i, td := range tds {
		ids[i], unsigned[i] = td.ID, td.Raw
	}
	c := benchClient(b)
	requireSigned := func(cfg *Config) { cfg.Security.RequireSigned = true }
	var plain, sig, plainCPU, sigCPU time.Duration
	var vs hub.VerifyStats // the signed loads' signature checks, summed
	add := func(wall, cpu *time.Duration, docs [][]byte, edit func(*Config)) {
		w, c, v := putAll(b, c, ids, docs, edit)
		*wall += w
		*cpu += c
		vs.Checks += v.Checks
		vs.Batches += v.Batches
		vs.Batched += v.Batched
		vs.Failed += v.Failed
		vs.Overflow += v.Overflow
		for i := range v.Sizes {
			vs.Sizes[i] += v.Sizes[i]
		}
	}
	round := 0
	for b.Loop() {
		if round%2 == 0 {
			add(&plain, &plainCPU, unsigned, nil)
			add(&sig, &sigCPU, signed, requireSigned)
		} else {
			add(&sig, &sigCPU, signed, requireSigned)
			add(&plain, &plainCPU, unsigned, nil)
		}
		round++
	}
	n := float64(round * len(tds))
	b.ReportMetric(n/plain.Seconds(), "unsigned-puts/s")
	b.ReportMetric(n/sig.Seconds(), "signed-puts/s")
	b.ReportMetric(100*plain.Seconds()/sig.Seconds(), "signed-%-of-unsigned")
	// CPU per PUT (hub and clients): what a quiet machine's throughput
	// follows, measurable on a busy one.
	b.ReportMetric(float64(plainCPU.Microseconds())/n, "unsigned-cpu-µs/put")
	b.ReportMetric(float64(sigCPU.Microseconds())/n, "signed-cpu-µs/put")
	b.ReportMetric(100*plainCPU.Seconds()/sigCPU.Seconds(), "signed-%-of-unsigned-by-cpu")
	// How the concurrent PUTs' signatures were checked (the hub batches
	// those that meet): the share checked in batches, and batches by size.
	if vs.Checks > 0 {
		b.ReportMetric(100*float64(vs.Batched)/float64(vs.Checks), "%-sigs-batched")
		b.Logf("signature checks %d: %d in %d batches (%d failed, %d overflow); batches by size 1/2-3/4-7/8-15/16-31/32-63/64: %v",
			vs.Checks, vs.Batched, vs.Batches, vs.Failed, vs.Overflow, vs.Sizes)
	}
}
