package federation_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

const benchThings = 10_000

// benchHub lifts the registry quotas a 10k load exceeds.
func benchHub(c *app.Config) { c.Registry.MaxThings, c.Registry.MaxBytes = 0, 0 }

// register writes n generated TDs (~2.4 KB each) at h with ids from
// prefix, 32 writers at once as a busy LAN would.
func register(b *testing.B, h *hubtest.Hub, prefix string, n int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				id := fmt.Sprintf("urn:lmos:bench:%s-%05d", prefix, i)
				if _, err := h.Main.Registry.Put(context.Background(), id, tdgen.MakeTD(id, "bench"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
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

// benchWait polls cond every 10 ms for up to 10 minutes.
func benchWait(b *testing.B, what string, cond func() bool) {
	b.Helper()
	for deadline := time.Now().Add(10 * time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within 10 minutes", what)
		}
	}
}

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
			register(b, hubs[0], "paired", benchThings)
			b.StartTimer()
			start := time.Now()
			pairBench(b, hubs[1], hubs[0])
			pairBench(b, hubs[0], hubs[1])
			benchWait(b, "10k Things at the peer", func() bool { return hubs[1].Main.Registry.Count() == benchThings })
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
			register(b, hubs[0], "live", benchThings)
			written := time.Since(start)
			benchWait(b, "10k Things at the peer", func() bool { return hubs[1].Main.Registry.Count() == benchThings })
			took := time.Since(start)
			b.StopTimer()
			b.ReportMetric(took.Seconds(), "s-appear")
			b.ReportMetric((took - written).Seconds(), "s-after-last-write")
			b.ReportMetric(benchThings/took.Seconds(), "things/s")
		}
	})
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
