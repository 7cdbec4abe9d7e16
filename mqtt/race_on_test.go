//go:build race

package mqtt

// raceOn: the race detector's instrumentation makes every frame larger,
// so stack sizes are not the runtime's usual ones.
const raceOn = true
