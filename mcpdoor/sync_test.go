package mcpdoor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/mcpdoor"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// TestBurstOfThingsIsReadOncePerInterval: 300 Things registered one after
// the other (as after a power cut) are read by the door SyncBurst times at
// once and then at most once per SyncInterval, not once each: every
// reading goes over all Things, so one per change made registering n
// Things cost the door n² (10k Things: 16 s of CPU). All 300 Things'
// tools are there afterwards. The bound holds however slow the machine:
// past the burst, readings are an interval apart, so a slower run only
// allows more.
func TestBurstOfThingsIsReadOncePerInterval(t *testing.T) {
	h := startHub(t, func(c *app.Config) { c.Registry.MaxThingsPerSource = 0 })
	const interval = time.Second
	d := mcpdoor.New(mcpdoor.Config{Registry: h.Main.Registry, Router: h.Main.Router, SyncInterval: interval, Logger: hubtest.Logger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-d.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the door did not read the directory within 30 s")
	}

	before, start := d.Syncs(), time.Now()
	const n = 300
	for i := range n {
		id := fmt.Sprintf("urn:test:burst:%d", i)
		if _, err := h.Main.Registry.Put(context.Background(), id, tdgen.MakeTD(id, fmt.Sprintf("Burst %d", i)), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
			t.Fatal(err)
		}
	}
	rev := h.Main.Registry.Revision()
	testwait.Eventually(t, 60*time.Second, "the door read the last change", func() bool { return d.Synced() >= rev })
	syncs, elapsed := d.Syncs()-before, time.Since(start)
	if bound := uint64(mcpdoor.SyncBurst) + uint64(elapsed/interval) + 1; syncs > bound {
		t.Errorf("the door read the directory %d times for %d changes in %v; at most %d (%d, then one per %v)", syncs, n, elapsed.Round(time.Millisecond), bound, mcpdoor.SyncBurst, interval)
	}
	if got := len(d.ToolNames()); got != 2*n { // run and chat of each
		t.Errorf("the door holds %d tools, want %d", got, 2*n)
	}
}
