//go:build race

package tdindex

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts differ under it.
const raceEnabled = true
