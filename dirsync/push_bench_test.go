package dirsync_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/test/kit/faultproxy"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

const benchThings = 10_000

// unbounded lifts the registry quotas a 10k load exceeds.
func unbounded(c *app.Config) { c.Registry.MaxThings, c.Registry.MaxBytes = 0, 0 }

// benchID names the i-th Thing of a benchmark.
func benchID(i int) string { return fmt.Sprintf("urn:uuid:00000000-0000-4000-8000-%012d", i) }

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
		local.Fill(b, benchThings, benchID)
		testwait.Eventually(b, 10*time.Minute, "10k changes queued", func() bool { return p.State().Outbox == benchThings })
		b.StartTimer()
		start := time.Now()
		proxy.Up()
		testwait.Eventually(b, 10*time.Minute, "the outbox drained", func() bool { return p.State().Outbox == 0 })
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
		local.Fill(b, benchThings, benchID)
		b.StartTimer()
		start := time.Now()
		p := startPusher(b, local, dirsync.PushConfig{URL: remote.URL})
		testwait.Eventually(b, 10*time.Minute, "10k Things on the remote", func() bool { return remote.Main.Registry.Count() == benchThings })
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(took.Seconds(), "s-appear")
		b.ReportMetric(benchThings/took.Seconds(), "things/s")
		stopPusher(b, p)
	}
}
