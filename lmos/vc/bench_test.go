package vc

import (
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
)

// BenchmarkIssueMembership is the cost of one membership credential: build
// and sign (JCS, SHA-256, Ed25519); p50/p99 in µs.
func BenchmarkIssueMembership(b *testing.B) {
	priv := key(b, 1)
	m := member(12345)
	lat := make([]time.Duration, 0, 1024)
	for b.Loop() {
		start := time.Now()
		if _, err := IssueMembership(m, priv); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	percentile.Report(b, lat, time.Microsecond, "µs")
}

// BenchmarkVerifyMembership is a verifier's whole offline check: the
// credential's proof, the status list's proof, its gunzip and the bit
// (the status list fetched once, as a verifier caches it); p50/p99 in µs.
func BenchmarkVerifyMembership(b *testing.B) {
	priv := key(b, 1)
	cred := issue(b, priv, member(12345))
	sl := list(b, priv, listURL, 1, 99, 4000)
	now := t0.Add(time.Hour)
	lat := make([]time.Duration, 0, 1024)
	for b.Loop() {
		start := time.Now()
		if _, err := VerifyMembership(cred, sl, now); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	percentile.Report(b, lat, time.Microsecond, "µs")
}

// BenchmarkIssueStatusList is re-signing the status list after a bit
// changed (gzip of 16 KiB, then the proof); p50/p99 in µs.
func BenchmarkIssueStatusList(b *testing.B) {
	priv := key(b, 1)
	bits := make([]byte, StatusListBytes)
	bits[100] = 0x81
	lat := make([]time.Duration, 0, 1024)
	for b.Loop() {
		start := time.Now()
		if _, err := IssueStatusList(listURL, bits, t0, t0.Add(time.Hour), 30*time.Second, priv); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	percentile.Report(b, lat, time.Microsecond, "µs")
}
