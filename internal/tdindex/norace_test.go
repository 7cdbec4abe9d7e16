//go:build !race

package tdindex

const raceEnabled = false
