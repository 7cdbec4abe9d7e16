package hub

import (
	"crypto/ed25519"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// BenchmarkVerifyConcurrent is the cost of verifying signed TDs (the
// benchmark TDs, a key each) from 32 goroutines at once, the signature
// checked alone by each (alone) or through the hub's batcher (batched):
// cpu-µs/verify is the process's CPU time (getrusage) per verification,
// which other load on the machine distorts less than ns/op.
func BenchmarkVerifyConcurrent(b *testing.B) {
	tds := tdgen.Generate(256)
	type signed struct {
		raw []byte
		doc map[string]any
	}
	docs := make([]signed, len(tds))
	for i, td := range tds {
		_, priv, _ := ed25519.GenerateKey(nil)
		raw, err := proof.Sign(td.Raw, priv, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		doc, err := ParseDocument(raw)
		if err != nil {
			b.Fatal(err)
		}
		docs[i] = signed{raw, doc}
	}
	for _, mode := range []string{"alone", "batched"} {
		b.Run(mode, func(b *testing.B) {
			r := &Registry{opts: RegistryOptions{Now: time.Now, Security: SecurityOptions{}.withDefaults()}}
			check := proof.Checker(proof.CheckSignature)
			if mode == "batched" {
				check = r.sigs.check
			}
			b.SetParallelism(16) // 32 writers on 2 cores, as the PUT benchmark
			cpu0 := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					d := docs[i%len(docs)]
					i++
					if _, err := r.verifyDocWith(d.raw, d.doc, "", check); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/verify")
			if st := r.VerifyStats(); st.Checks > 0 {
				b.ReportMetric(100*float64(st.Batched)/float64(st.Checks), "%-batched")
				b.ReportMetric(float64(st.Checks)/float64(st.Sizes[0]+st.Batches), "sigs/batch")
			}
		})
	}
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
