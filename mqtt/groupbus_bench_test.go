package mqtt

import (
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// BenchmarkGroupBusSubscribe20k measures 20,000 subscriptions to one group
// through the bus (what 313 WebSocket connections of one member at 64 each
// hold), then cancelling them all: the whole op, per subscription.
func BenchmarkGroupBusSubscribe20k(b *testing.B) {
	const n = 20000
	e := newEnv(b, nil)
	ctx := b.Context()
	if _, err := e.reg.Put(ctx, "urn:a", tdgen.MakeTD("urn:a", "a"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.reg.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a"}}); err != nil {
		b.Fatal(err)
	}
	bus, err := NewGroupBus(e.b)
	if err != nil {
		b.Fatal(err)
	}
	var in groupInbox
	cancels := make([]func(), n)
	b.ResetTimer()
	for range b.N {
		for i := range cancels {
			if cancels[i], err = bus.SubscribeGroup(in.sub("g", "#", "urn:a")); err != nil {
				b.Fatal(err)
			}
		}
		for _, c := range cancels {
			c()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sub")
}
