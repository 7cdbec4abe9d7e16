package ratelimit

import (
	"testing"
	"time"
)

// One line per key and period; the first after the period counts those
// held back; keys are apart; memory stays bounded under many keys.
func TestThrottle(t *testing.T) {
	now := time.Unix(1000, 0)
	th := NewThrottle(10*time.Second, func() time.Time { return now })
	if ok, n := th.Allow("a"); !ok || n != 0 {
		t.Fatalf("first: %v %d", ok, n)
	}
	for range 4 {
		if ok, _ := th.Allow("a"); ok {
			t.Fatal("a line within the period")
		}
	}
	if ok, _ := th.Allow("b"); !ok {
		t.Fatal("another key held back")
	}
	now = now.Add(10 * time.Second)
	if ok, n := th.Allow("a"); !ok || n != 4 {
		t.Fatalf("after the period: %v %d, want true 4", ok, n)
	}
	if ok, n := th.Allow("a"); ok || n != 0 {
		t.Fatalf("right after: %v %d", ok, n)
	}
	for i := range 3 * maxThrottleKeys {
		th.Allow(string(rune(i)))
	}
	if len(th.keys) > maxThrottleKeys {
		t.Fatalf("%d keys kept, at most %d", len(th.keys), maxThrottleKeys)
	}
}
