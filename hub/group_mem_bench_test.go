package hub_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/memprof"
)

// BenchmarkGroupsHeapHeld is the heap the registry keeps for the most
// memberships the default limits allow in practice: 1,024 Things, each a
// member of 64 groups (65,536 memberships, each with its credential), the
// state BenchmarkAnonGroupListRSS (test/e2e) starts from. heap-MB is the
// live heap after a collection, with the registry open, groups-heap-MB
// what the groups added to it. LMOS_MEMPROFILE=file writes the heap
// profile there (test/kit/memprof).
func BenchmarkGroupsHeapHeld(b *testing.B) {
	memprof.SampleAll(b)
	for b.Loop() {
		groupsHeapHeld(b)
	}
}

func groupsHeapHeld(b *testing.B) {
	const things, groups = 1024, 64
	ctx := context.Background()
	db, err := store.Open(b.TempDir(), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	iss := hub.NewCredentialIssuer(hubKey(), 0)
	iss.SetStatusListURL(testListURL)
	r, err := hub.NewRegistry(db, hub.RegistryOptions{Issuer: iss, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ids := make([]string, things)
	for i := range ids {
		ids[i] = fmt.Sprintf("urn:uuid:7e3a1c52-0000-4000-8000-%012d", i)
		if _, err := r.Put(ctx, ids[i], testTD(ids[i], "T"), hub.Origin{}); err != nil {
			b.Fatal(err)
		}
	}
	var ms0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for g := range groups {
		if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: fmt.Sprintf("g%02d", g), Title: "many", Members: ids}); err != nil {
			b.Fatal(err)
		}
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	memprof.Write(b)
	if _, err := r.MemberCredential("g63", ids[1023]); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(ms.HeapAlloc)/1e6, "heap-MB")
	b.ReportMetric(float64(int64(ms.HeapAlloc)-int64(ms0.HeapAlloc))/1e6, "groups-heap-MB")
	b.ReportMetric(float64(ms.HeapSys-ms.HeapReleased)/1e6, "heap-held-MB")
}
