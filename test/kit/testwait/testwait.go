// Package testwait is the one polling wait of the tests. It imports
// nothing of the hub, so every package's tests can use it, in-package
// tests of mqtt and hub included (test/kit/hubtest imports those through
// the app).
package testwait

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms for up to d and fails the test with
// what when it does not hold by then. 10 ms is what the hubtest and mqtt
// copies polled at; mqtt's TestRetainedAllStatusesBeforeLive fails about
// every other run at 5 ms (its "subscribed" check then returns before the
// retained messages are queued), so the interval stays.
func Eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
