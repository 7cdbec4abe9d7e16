package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
)

// BenchmarkFailover: the agent's hub unplugged → the agent served through
// the other hub (a proxy invocation there answered), over 20 runs, each
// with two fresh hub processes and an agent with the default failover
// grace (2 s). "killed": the hub process gets SIGKILL (the kernel resets
// its connections, so the agent notices at once). "frozen": it gets
// SIGSTOP, as a hub whose network went away (nothing answers, nothing is
// reset): the agent notices by its MQTT keep alive, 2 s here.
func BenchmarkFailover(b *testing.B) {
	for _, v := range []struct {
		name      string
		sig       syscall.Signal
		keepAlive time.Duration
	}{{"killed", syscall.SIGKILL, 0}, {"frozen", syscall.SIGSTOP, 2 * time.Second}} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				var lat []time.Duration
				for run := range benchRuns() {
					lat = append(lat, failoverOnce(b, run, v.sig, v.keepAlive))
				}
				percentile.Report(b, lat, time.Millisecond, "ms")
				b.ReportMetric(float64(lat[len(lat)*95/100])/float64(time.Millisecond), "p95-ms")
				b.ReportMetric(float64(slices.Max(lat))/float64(time.Millisecond), "max-ms")
			}
		})
	}
}

// failoverOnce measures one failover: hub A's process gets sig while its
// agent serves, until hub B's proxy reaches the agent.
func failoverOnce(b *testing.B, run int, sig syscall.Signal, keepAlive time.Duration) time.Duration {
	a := startHubProc(b, b.TempDir(), "127.0.0.1:0", "127.0.0.1:0")
	hb := startHubProc(b, b.TempDir(), "127.0.0.1:0", "127.0.0.1:0")
	id := fmt.Sprintf("urn:bench:failover:%d", run)
	mover := failoverAgentWith(b, id, a.mqtt, keepAlive, "", "mqtt://"+hb.mqtt)
	for deadline := time.Now().Add(10 * time.Second); !proxyInvoke("http://"+a.http, id); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the agent does not answer through hub A")
		}
	}
	start := time.Now()
	_ = a.cmd.Process.Signal(sig)
	for deadline := start.Add(60 * time.Second); !proxyInvoke("http://"+hb.http, id); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the agent is not served through hub B within 60 s")
		}
	}
	d := time.Since(start)
	_ = mover.Close()
	a.kill()
	hb.kill()
	return d
}

// benchRuns is the runs of BenchmarkFailover: 20, or LMOS_FAILOVER_RUNS.
func benchRuns() int {
	if n, err := strconv.Atoi(os.Getenv("LMOS_FAILOVER_RUNS")); err == nil && n > 0 {
		return n
	}
	return 20
}
