package hubtest

import (
	"context"
	"sync"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// Fill registers n generated TDs (tdgen.MakeTD, ~2.4 KB each) at h with
// the ids id(0) … id(n-1), through the hub's registry as an admin's HTTP
// writes would be stored, 32 writers at once so that the registry commits
// them in batches as it does for a busy LAN. Benchmarks use it to fill a
// hub before the figure's clock starts.
func (h *Hub) Fill(tb testing.TB, n int, id func(i int) string) {
	tb.Helper()
	const writers = 32
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				if _, err := h.Main.Registry.Put(context.Background(), id(i), tdgen.MakeTD(id(i), "bench"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}
