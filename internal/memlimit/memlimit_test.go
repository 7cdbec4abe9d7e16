package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSystem writes a meminfo, a /proc/self/cgroup and a cgroup tree with
// the given memory.max files (path below the root → content).
func fakeSystem(t *testing.T, meminfo, cgroup string, max map[string]string) Source {
	t.Helper()
	dir := t.TempDir()
	s := Source{Meminfo: filepath.Join(dir, "meminfo"), Cgroup: filepath.Join(dir, "cgroup"), CgroupRoot: filepath.Join(dir, "sys")}
	if err := os.WriteFile(s.Meminfo, []byte(meminfo), 0o644); err != nil {
		t.Fatal(err)
	}
	if cgroup != "" {
		if err := os.WriteFile(s.Cgroup, []byte(cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for p, v := range max {
		d := filepath.Join(s.CgroupRoot, p)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "memory.max"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

const meminfo1G = "MemTotal:        1000000 kB\nMemFree:          500000 kB\nMemAvailable:     700000 kB\n"

func TestLimit(t *testing.T) {
	const unit = "/system.slice/lmos-hub.service"
	for _, c := range []struct {
		name, cgroup string
		max          map[string]string
		want         int64
		from         string
	}{
		{"no cgroup file", "", nil, 1000000 * 1024 * 85 / 100, "MemTotal"},
		{"cgroup v1 only", "4:memory:/x\n1:cpu:/\n", nil, 1000000 * 1024 * 85 / 100, "MemTotal"},
		{"unlimited", "0::" + unit + "\n", map[string]string{unit: "max\n", "/system.slice": "max\n"}, 1000000 * 1024 * 85 / 100, "MemTotal"},
		{"the unit's MemoryMax", "0::" + unit + "\n", map[string]string{unit: "402653184\n", "/system.slice": "max\n"}, 402653184 * 85 / 100, unit},
		{"a parent's lower limit", "0::" + unit + "\n", map[string]string{unit: "402653184\n", "/system.slice": "268435456\n"}, 268435456 * 85 / 100, "/system.slice/memory.max"},
		{"above the machine's memory", "0::" + unit + "\n", map[string]string{unit: "8589934592\n"}, 1000000 * 1024 * 85 / 100, "MemTotal"},
		{"a namespace's root", "0::/\n", map[string]string{"/": "104857600\n"}, 104857600 * 85 / 100, "sys/memory.max"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fakeSystem(t, meminfo1G, c.cgroup, c.max)
			got, from, err := s.Limit()
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want || !strings.Contains(from, c.from) {
				t.Errorf("Limit() = %d from %q, want %d from …%s", got, from, c.want, c.from)
			}
		})
	}
}

// TestLimitWithoutMeminfo: with /proc/meminfo hidden (ProcSubset=pid) the
// cgroup's limit alone counts; with neither there is no limit.
func TestLimitWithoutMeminfo(t *testing.T) {
	s := fakeSystem(t, meminfo1G, "0::/a\n", map[string]string{"/a": "402653184\n"})
	os.Remove(s.Meminfo)
	got, from, err := s.Limit()
	if err != nil || got != 402653184*85/100 || !strings.HasSuffix(from, "/a/memory.max") {
		t.Errorf("Limit() = %d from %q, %v; want 85 %% of the cgroup's memory.max", got, from, err)
	}
	s = fakeSystem(t, meminfo1G, "0::/a\n", map[string]string{"/a": "max\n"})
	os.Remove(s.Meminfo)
	if got, _, err := s.Limit(); err == nil || !strings.Contains(err.Error(), "cannot read the machine's memory") || got != 0 {
		t.Errorf("Limit() = %d, %v; want an error", got, err)
	}
}

// TestShareOfHugeLimit: a memory.max near the largest int64 does not wrap.
func TestShareOfHugeLimit(t *testing.T) {
	if got := share(math.MaxInt64); got <= 0 || got > math.MaxInt64/100*Percent+100 {
		t.Errorf("share(MaxInt64) = %d", got)
	}
	if got := share(402653184); got != 402653184*85/100 {
		t.Errorf("share(402653184) = %d", got)
	}
}

// TestLimitRefusesGarbage: an unreadable figure is an error, not a guess.
func TestLimitRefusesGarbage(t *testing.T) {
	for _, c := range []struct {
		name, meminfo, max, want string
	}{
		{"no MemTotal", "MemFree: 5 kB\n", "max", "no MemTotal"},
		{"MemTotal not a number", "MemTotal: lots kB\n", "max", `MemTotal "lots"`},
		{"memory.max not a number", meminfo1G, "lots", `"lots"`},
		{"memory.max zero", meminfo1G, "0", `"0"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fakeSystem(t, c.meminfo, "0::/a\n", map[string]string{"/a": c.max})
			got, _, err := s.Limit()
			if err == nil || !strings.Contains(err.Error(), c.want) || got != 0 {
				t.Errorf("Limit() = %d, %v; want an error saying %s", got, err, c.want)
			}
		})
	}
}

// TestSystem: this machine's figures give a positive limit no larger than
// its memory.
func TestSystem(t *testing.T) {
	if _, err := os.Stat(System.Meminfo); err != nil {
		t.Skip("no /proc/meminfo")
	}
	got, from, err := System.Limit()
	if err != nil {
		t.Fatal(err)
	}
	total, _ := memTotal(System.Meminfo)
	if got <= 0 || got > total {
		t.Errorf("Limit() = %d from %s; MemTotal %d", got, from, total)
	}
}
