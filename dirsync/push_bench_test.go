package dirsync_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/faultproxy"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

const benchThings = 10_000

// unbounded lifts the registry quotas a 10k load exceeds.
func unbounded(c *app.Config) { c.Registry.MaxThings, c.Registry.MaxBytes = 0, 0 }

// fill registers n generated TDs (~2.4 KB each) on h, 32 writers at once
// so the registry commits them in batches.
func fill(b *testing.B, h *hubtest.Hub, n int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < n; i += 32 {
				id := fmt.Sprintf("urn:uuid:00000000-0000-4000-8000-%012d", i)
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

// waitFor polls cond every 10 ms for up to 10 minutes.
func waitFor(b *testing.B, what string, cond func() bool) {
	b.Helper()
	for deadline := time.Now().Add(10 * time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within 10 minutes", what)
		}
	}
}

// BenchmarkPushDrain10k: 10k changes queued while the remote (a second
// hub, in-process, no write rate limit) is down; the figure is how fast
// the outbox drains once it is back (from the listener reopening, one
// backoff of at most 200 ms included).
func BenchmarkPushDrain10k(b *testing.B) {
	for range b.N {
		b.StopTimer()
		local := hubtest.Start(b, unbounded)
		remote := hubtest.Start(b, unbounded)
		proxy := faultproxy.New(b, remote.URL)
		proxy.Down()
		p := startPusher(b, local, dirsync.PushConfig{URL: proxy.URL(), MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
		fill(b, local, benchThings)
		waitFor(b, "10k changes queued", func() bool { return p.State().Outbox == benchThings })
		b.StartTimer()
		start := time.Now()
		proxy.Up()
		waitFor(b, "the outbox drained", func() bool { return p.State().Outbox == 0 })
		took := time.Since(start)
		b.StopTimer()
		if n := remote.Main.Registry.Count(); n != benchThings {
			b.Fatalf("remote holds %d Things, want %d", n, benchThings)
		}
		b.ReportMetric(benchThings/took.Seconds(), "changes/s")
		b.ReportMetric(took.Seconds(), "s-drain")
		stopPusher(b, p)
	}
}

// BenchmarkPushAppear10k: a hub holding 10k Things starts pushing to an
// empty remote directory (a second hub, no write rate limit); the figure is
// the time until all 10k are listed there.
func BenchmarkPushAppear10k(b *testing.B) {
	for range b.N {
		b.StopTimer()
		local := hubtest.Start(b, unbounded)
		remote := hubtest.Start(b, unbounded)
		fill(b, local, benchThings)
		b.StartTimer()
		start := time.Now()
		p := startPusher(b, local, dirsync.PushConfig{URL: remote.URL})
		waitFor(b, "10k Things on the remote", func() bool { return remote.Main.Registry.Count() == benchThings })
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(took.Seconds(), "s-appear")
		b.ReportMetric(benchThings/took.Seconds(), "things/s")
		stopPusher(b, p)
	}
}
