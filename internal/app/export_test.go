package app

import (
	"testing"
	"time"
)

// SetReleaseAfter makes Run release the executable's pages d after
// start-up, until tb ends.
func SetReleaseAfter(tb testing.TB, d time.Duration) {
	old := releaseAfter
	releaseAfter = d
	tb.Cleanup(func() { releaseAfter = old })
}
