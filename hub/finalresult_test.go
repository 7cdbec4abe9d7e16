package hub_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The queued intermediate results come before the final one, in order;
// a result that ends the delivery (or a failed emit) stops it there.
func TestPassFinalDrainsQueuedResultsFirst(t *testing.T) {
	ch := make(chan int, 4)
	ch <- 1
	ch <- 2
	var got []int
	pass := func(n int) (bool, error) { got = append(got, n); return n == 9, nil }
	if err := hub.PassFinal(ch, 9, pass); err != nil || !slices.Equal(got, []int{1, 2, 9}) {
		t.Fatalf("passed %v, %v; want [1 2 9]", got, err)
	}

	ch <- 1
	ch <- 2
	got = nil
	stop := errors.New("consumer gone")
	fail := func(n int) (bool, error) { got = append(got, n); return false, stop }
	if err := hub.PassFinal(ch, 9, fail); err != stop || !slices.Equal(got, []int{1}) {
		t.Fatalf("passed %v, %v; want [1] and the emit error", got, err)
	}
}
