package federation_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

const benchThings = 10_000

// benchHub lifts the registry quotas a 10k load exceeds.
func benchHub(c *app.Config) { c.Registry.MaxThings, c.Registry.MaxBytes = 0, 0 }

// BenchmarkFederationAppear10k: time for 10k Things to be listed by a
// federated peer. "paired" is a hub holding 10k Things paired with an
// empty one (pairing to the last Thing listed there); "live" is 10k
// Things registered at a hub already paired (first write to the last
// Thing listed at the peer), which the change feed carries one by one.
func BenchmarkFederationAppear10k(b *testing.B) {
	b.Run("paired", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			hubs := [2]*hubtest.Hub{hubtest.Start(b, benchHub), hubtest.Start(b, benchHub)}
			hubs[0].Fill(b, benchThings, benchID("paired"))
			b.StartTimer()
			start := time.Now()
			pairBench(b, hubs[1], hubs[0])
			pairBench(b, hubs[0], hubs[1])
			testwait.Eventually(b, 10*time.Minute, "10k Things at the peer", func() bool { return hubs[1].Main.Registry.Count() == benchThings })
			took := time.Since(start)
			b.StopTimer()
			b.ReportMetric(took.Seconds(), "s-appear")
			b.ReportMetric(benchThings/took.Seconds(), "things/s")
		}
	})
	b.Run("live", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			hubs := [2]*hubtest.Hub{hubtest.Start(b, benchHub), hubtest.Start(b, benchHub)}
			pairBench(b, hubs[1], hubs[0])
			pairBench(b, hubs[0], hubs[1])
			b.StartTimer()
			start := time.Now()
			hubs[0].Fill(b, benchThings, benchID("live"))
			written := time.Since(start)
			testwait.Eventually(b, 10*time.Minute, "10k Things at the peer", func() bool { return hubs[1].Main.Registry.Count() == benchThings })
			took := time.Since(start)
			b.StopTimer()
			b.ReportMetric(took.Seconds(), "s-appear")
			b.ReportMetric((took - written).Seconds(), "s-after-last-write")
			b.ReportMetric(benchThings/took.Seconds(), "things/s")
		}
	})
}

// benchID names the i-th Thing of a benchmark's run.
func benchID(run string) func(int) string {
	return func(i int) string { return fmt.Sprintf("urn:lmos:bench:%s-%05d", run, i) }
}

// pairBench pairs at with peer (admin token).
func pairBench(b *testing.B, at, peer *hubtest.Hub) {
	b.Helper()
	body := fmt.Appendf(nil, `{"url":%q,"did":%q}`, peer.URL, peer.Main.DID())
	resp, out := at.Do(http.MethodPost, "/api/peers", "application/json", body, hubtest.Token)
	if resp.StatusCode != http.StatusCreated {
		b.Fatalf("pair: %d %s", resp.StatusCode, out)
	}
}

// BenchmarkFederationOneThing: three hubs paired with each other; one
// Thing at a time is registered at the first over HTTP (admin token), and
// the time runs until both others list it (polled every millisecond). The
// design's target: every Thing registered at any hub listed by all of
// them within 1 s.
func BenchmarkFederationOneThing(b *testing.B) {
	const samples = 200
	hubs := []*hubtest.Hub{hubtest.Start(b, nil), hubtest.Start(b, nil), hubtest.Start(b, nil)}
	for _, x := range hubs {
		for _, y := range hubs {
			if x != y {
				pairBench(b, x, y)
			}
		}
	}
	var lat []time.Duration
	b.ResetTimer()
	for n := range b.N {
		for i := range samples {
			id := fmt.Sprintf("urn:lmos:bench:one-%d-%03d", n, i)
			start := time.Now()
			hubs[0].Put(id, tdgen.MakeTD(id, "one"))
			testwait.Eventually(b, time.Minute, "listed at both peers", func() bool {
				_, err1 := hubs[1].Main.Registry.Get(id)
				_, err2 := hubs[2].Main.Registry.Get(id)
				return err1 == nil && err2 == nil
			})
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	percentile.Report(b, lat, time.Millisecond, "ms-listed-by-both-peers")
}
