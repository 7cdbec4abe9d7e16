package hub_test

import (
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
)

// BenchmarkCredentialIssuerIssue is the hub issuer's cost per new member,
// as the write loop pays it; p50/p99 in µs.
func BenchmarkCredentialIssuerIssue(b *testing.B) {
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	g := &hub.Group{ID: "living-room", Title: "Living room"}
	m := &hub.Member{Thing: "urn:uuid:0d9a6a53-5f43-4c4e-9a55-8f2f6c1b7a01", Since: time.Now(), StatusIndex: 4711}
	lat := make([]time.Duration, 0, 1024)
	for b.Loop() {
		start := time.Now()
		if _, err := iss.Issue(g, m, time.Now()); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	percentile.Report(b, lat, time.Microsecond, "µs")
}

// BenchmarkStatusListResign is the cost of the first GET of the status
// list after a revocation (gzip and sign 16 KiB); a GET without a change
// is the cached bytes. p50/p99 in µs.
func BenchmarkStatusListResign(b *testing.B) {
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	s := hub.StatusList{Bits: make([]byte, hub.MaxStatusListEntries/8)}
	lat := make([]time.Duration, 0, 1024)
	i := 0
	for b.Loop() {
		s.Bits[(i/8)%len(s.Bits)] |= 0x80 >> (i % 8) // one more revocation
		i++
		start := time.Now()
		if _, err := iss.StatusListCredential(s, time.Now()); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	percentile.Report(b, lat, time.Microsecond, "µs")
}
