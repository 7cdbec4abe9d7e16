// Package memprof lets a memory benchmark write a heap profile on request:
// LMOS_MEMPROFILE=path samples every allocation while the benchmark runs
// and writes the heap profile where the benchmark takes it. ProcMB reads a
// process's memory the way a board owner reads it.
package memprof

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
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

// ProcMB reads the memory of process pid in MB: the size fields of
// /proc/{pid}/status (VmRSS, VmHWM, RssAnon, RssFile, …) and of
// /proc/{pid}/smaps_rollup (Pss, Pss_Anon, Pss_File, …). VmRSS counts
// every page mapped, the binary's and bbolt's clean file pages too, which
// the kernel takes back under pressure; RssAnon is what the process alone
// holds (heap, stacks); Pss shares each page among the processes mapping
// it. A process without VmRSS has exited (a zombie keeps its status file).
func ProcMB(pid int) (map[string]float64, error) {
	mb := map[string]float64{}
	for _, name := range []string{"status", "smaps_rollup"} {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			return nil, fmt.Errorf("cannot read the memory of process %d: %w", pid, err)
		}
		for line := range strings.SplitSeq(string(raw), "\n") {
			field, rest, _ := strings.Cut(line, ":")
			size, ok := strings.CutSuffix(strings.TrimSpace(rest), " kB")
			if !ok {
				continue
			}
			if kb, err := strconv.ParseFloat(size, 64); err == nil {
				mb[field] = kb / 1024
			}
		}
	}
	if _, ok := mb["Pss"]; !ok {
		return nil, fmt.Errorf("process %d has no Pss in smaps_rollup (exited?)", pid)
	}
	return mb, nil
}
