//go:build !race

package mqtt

const raceOn = false
