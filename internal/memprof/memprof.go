// Package memprof lets a memory benchmark write a heap profile on request:
// LMOS_MEMPROFILE=path samples every allocation while the benchmark runs
// and writes the heap profile where the benchmark takes it.
package memprof

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
)

// Env names the file the heap profile goes to; unset, nothing is written.
const Env = "LMOS_MEMPROFILE"

// SampleAll makes every allocation sampled when a profile is asked for,
// until tb ends.
func SampleAll(tb testing.TB) {
	if os.Getenv(Env) == "" {
		return
	}
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	tb.Cleanup(func() { runtime.MemProfileRate = rate })
}

// Write writes the heap profile as it stands now, when one is asked for.
func Write(tb testing.TB) {
	tb.Helper()
	path := os.Getenv(Env)
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
}
