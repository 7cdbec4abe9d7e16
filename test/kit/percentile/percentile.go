// Package percentile is the one latency reporter of the benchmarks: every
// benchmark that measures latencies reports them the same way, so figures
// from different packages compare.
package percentile

import (
	"slices"
	"testing"
	"time"
)

// Report sorts lat and reports its p50 and p99 in unit as the metrics
// "p50-"+name and "p99-"+name (name says the unit, e.g. "ms" or
// "ms-goodbye-to-offline"). No latencies, no metrics.
func Report(b *testing.B, lat []time.Duration, unit time.Duration, name string) {
	b.Helper()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/float64(unit), "p50-"+name)
	b.ReportMetric(float64(lat[len(lat)*99/100])/float64(unit), "p99-"+name)
}
