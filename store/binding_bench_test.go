package store

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/google/uuid"
)

// benchRegister commits perCommit new Things of ~2.5 KB each per op, with
// random ids (as the 10k benchmark TDs have), each with a key binding of
// its own when signed: what a signed PUT of a new id costs the store
// against an unsigned one. It reports the pages bbolt wrote and the
// process's CPU time per Thing (fsync waits are not CPU).
func benchRegister(b *testing.B, perCommit int, signed bool) {
	db, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	r := rec("x")
	created := time.Date(2026, 11, 24, 5, 0, 0, 0, time.UTC)
	seq, n := uint64(0), 0
	writes0 := pagesWritten(db)
	cpu0 := benchCPU(b)
	for b.Loop() {
		batch := &hub.Batch{Puts: make([]hub.ThingRecord, 0, perCommit), Events: make([]hub.Event, 0, perCommit)}
		for range perCommit {
			seq++
			n++
			r.ID = "urn:uuid:" + uuid.NewString()
			r.Raw = benchDoc(r.ID)
			r.Summary = []byte(fmt.Sprintf("\x01summary of %s with its title and a few affordances", r.ID))
			batch.Puts = append(batch.Puts, r)
			batch.Events = append(batch.Events, hub.Event{Seq: seq, Type: hub.EventCreated, ID: r.ID, Time: t0})
			if signed {
				batch.Bindings = append(batch.Bindings, hub.Binding{ID: r.ID, DID: "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
					Created: created, ProofValue: "z58DAdFfa9SkqZMVPxAQpic7ndSayn1PzZs6ZjWp1CktyGesjuTSwRdoWhAfGFCF5bppETSTojQCrfFPP2oumHKtz",
					Since: created.Add(time.Duration(n) * time.Millisecond)})
			}
		}
		if err := db.Commit(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(pagesWritten(db)-writes0)/float64(n), "pages/put")
	b.ReportMetric(float64((benchCPU(b)-cpu0).Microseconds())/float64(n), "cpu-µs/put")
}

func benchCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCommitRegister8: 8 new Things per durable commit, unsigned and
// signed (a new binding each).
func BenchmarkCommitRegister8(b *testing.B) {
	b.Run("unsigned", func(b *testing.B) { benchRegister(b, 8, false) })
	b.Run("signed", func(b *testing.B) { benchRegister(b, 8, true) })
}

// pagesWritten is how many page writes bbolt's commits have made.
func pagesWritten(db *DB) int64 {
	st := db.db.Stats()
	return st.TxStats.GetWrite()
}
