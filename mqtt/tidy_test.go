package mqtt

import (
	"fmt"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
	"github.com/eclipse/paho.golang/paho"
)

// TestTidyAfterConnectionBurst: a few connections do not make the broker
// collect; once a burst of tidyAfter connections is over, it does, once.
func TestTidyAfterConnectionBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the quiet period")
	}
	// Not parked: parkings make collections of their own
	// (TestTidyAfterParkingBurst).
	e := newEnv(t, func(c *Config) { c.IdlePark = NoIdlePark })
	connect := func(from, n int) {
		for i := from; i < from+n; i++ {
			c := mustDial(t, e.addr, &paho.Connect{ClientID: fmt.Sprintf("tidy-%d", i), CleanStart: true, KeepAlive: 30})
			t.Cleanup(c.close)
		}
	}
	connect(0, 10)
	time.Sleep(3 * tidyQuiet)
	if n := e.b.tidies.Load(); n != 0 {
		t.Fatalf("collected after 10 connections (%d times)", n)
	}
	connect(10, tidyAfter)
	testwait.Eventually(t, 10*tidyQuiet, "a collection after the burst", func() bool { return e.b.tidies.Load() == 1 })
	time.Sleep(3 * tidyQuiet)
	if n := e.b.tidies.Load(); n != 1 {
		t.Fatalf("collected %d times after one burst", n)
	}
}

// TestTidyDuringLongBurst: while connections keep coming, the broker
// collects every tidyDuring of them (two wake-ups may fold into one),
// without waiting for the burst to end.
func TestTidyDuringLongBurst(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 2*tidyDuring + 10 {
		c, err := idleClient(e.addr, fmt.Sprintf("burst-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	testwait.Eventually(t, 5*time.Second, "a collection during the burst", func() bool { return e.b.burstTidies.Load() >= 1 })
	if n := e.b.burstTidies.Load(); n > 2 {
		t.Fatalf("%d collections for %d connections", n, 2*tidyDuring+10)
	}
}

// TestTidyAfterParkingBurst: the stacks a burst of clients grew are handed
// back again once they are parked (park.go): the parking of tidyAfter
// clients makes a collection of its own, after the one for their
// connections (which comes within two quiet periods of the last of them,
// before the first is parked).
func TestTidyAfterParkingBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the quiet period")
	}
	e := newEnv(t, func(c *Config) { c.IdlePark = 3 * tidyQuiet })
	for i := range tidyAfter {
		c, err := idleClient(e.addr, fmt.Sprintf("tidy-park-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	testwait.Eventually(t, 10*tidyQuiet, "every client parked", func() bool { return e.b.ParkedClients() == tidyAfter })
	parked := e.b.tidies.Load()
	testwait.Eventually(t, 10*tidyQuiet, "a collection after the parking", func() bool { return e.b.tidies.Load() > parked })
}
