package hub

import (
	"testing"
	"time"
)

func TestExpiryQueueKeepsOneEntryPerThing(t *testing.T) {
	var q expiryQueue
	base := time.Unix(1000, 0)
	for i := range 10_000 { // refreshes move the entry, never add one
		q.set("a", base.Add(time.Duration(i)*time.Second))
		q.set("b", base.Add(time.Duration(5000-i)*time.Second))
	}
	q.set("c", base.Add(3*time.Second))
	if q.Len() != 3 {
		t.Fatalf("len = %d, want 3", q.Len())
	}
	q.remove("c")
	q.remove("nope")
	var order []string
	for q.Len() > 0 {
		order = append(order, q.pop().id)
	}
	if len(order) != 2 || order[0] != "b" || order[1] != "a" {
		t.Errorf("order = %v", order)
	}
	if _, ok := q.next(); ok || len(q.index) != 0 {
		t.Errorf("queue not empty: %v", q.index)
	}
}
