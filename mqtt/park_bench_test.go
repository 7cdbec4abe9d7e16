package mqtt

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/percentile"
)

// BenchmarkParkedRoundTrip: what waking a parked connection costs. One
// idle client sends PINGREQ and reads PINGRESP, timed from the write to
// the read: "parked" waits until its connection is parked before each
// (not timed: the wake-up by the parker, a new goroutine, the epoll
// registration removed, the loop resumed), "waiting" leaves it waiting in
// its goroutine for as long.
func BenchmarkParkedRoundTrip(b *testing.B) {
	for _, park := range []bool{true, false} {
		name := map[bool]string{true: "parked", false: "waiting"}[park]
		b.Run(name, func(b *testing.B) {
			idle := NoIdlePark
			if park {
				idle = time.Millisecond
			}
			e := newEnv(b, func(c *Config) { c.IdlePark = idle })
			id := "rt-" + name
			conn, err := idleClient(e.addr, id)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			lat := make([]time.Duration, 0, b.N)
			var resp [2]byte
			for b.Loop() {
				b.StopTimer()
				for deadline := time.Now().Add(5 * time.Second); park && !isParked(e, id); {
					if time.Now().After(deadline) {
						b.Fatal("not parked")
					}
					time.Sleep(100 * time.Microsecond)
				}
				if !park {
					time.Sleep(2 * time.Millisecond)
				}
				b.StartTimer()
				t0 := time.Now()
				if _, err := conn.Write([]byte{0xc0, 0}); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(conn, resp[:]); err != nil || resp != [2]byte{0xd0, 0} {
					b.Fatal(fmt.Errorf("want PINGRESP, got % x: %v", resp, err))
				}
				lat = append(lat, time.Since(t0))
			}
			percentile.Report(b, lat, time.Microsecond, "µs")
		})
	}
}
