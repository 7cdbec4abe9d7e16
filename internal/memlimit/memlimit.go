// Package memlimit derives the hub's default Go memory limit (what
// GOMEMLIMIT sets) from the machine's memory and the cgroup v2 memory.max
// of the process, so a hub on a small gateway collects garbage harder
// before the kernel or systemd's MemoryMax= kills it.
package memlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"strconv"
	"strings"
)

// Percent is the share of the smaller of the machine's memory and the
// cgroup limit the default leaves to the Go runtime; the rest is for the
// binary, thread stacks and the kernel's page cache of the store.
const Percent = 85

// Source names the files the limit is read from; tests point it at files
// of their own.
type Source struct {
	Meminfo    string // /proc/meminfo
	Cgroup     string // /proc/self/cgroup
	CgroupRoot string // where cgroup v2 is mounted, /sys/fs/cgroup
}

// System reads this machine's and this process's files.
var System = Source{Meminfo: "/proc/meminfo", Cgroup: "/proc/self/cgroup", CgroupRoot: "/sys/fs/cgroup"}

// Limit returns Percent of the smaller of MemTotal and the lowest
// memory.max of the process's cgroup v2 and its ancestors, and what bounded
// it ("MemTotal" or the memory.max file). Without a cgroup v2 limit
// (cgroup v1, "max" all the way up) MemTotal alone counts; without
// /proc/meminfo the cgroup limit alone.
func (s Source) Limit() (limit int64, from string, err error) {
	max, file, err := s.cgroupMax()
	if err != nil {
		return 0, "", err
	}
	total, err := memTotal(s.Meminfo)
	switch {
	case err != nil && max == 0:
		return 0, "", err
	case err != nil || (max > 0 && max < total):
		// Under systemd's ProcSubset=pid /proc/meminfo is hidden; the
		// cgroup's limit is then what counts.
		return share(max), file, nil
	}
	return share(total), "MemTotal", nil
}

// share is Percent of n, without overflowing near math.MaxInt64.
func share(n int64) int64 {
	return n/100*Percent + n%100*Percent/100
}

// memTotal reads MemTotal (in bytes) from a /proc/meminfo file.
func memTotal(name string) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, fmt.Errorf("cannot read the machine's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil || kb <= 0 || kb > math.MaxInt64/1024 {
				return 0, fmt.Errorf("cannot read the machine's memory: MemTotal %q in %s", fields[1], name)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("cannot read the machine's memory: %w", err)
	}
	return 0, fmt.Errorf("cannot read the machine's memory: no MemTotal in %s", name)
}

// cgroupMax is the lowest memory.max on the path of the process's cgroup
// v2 (0: none), and the file that holds it.
func (s Source) cgroupMax() (int64, string, error) {
	b, err := os.ReadFile(s.Cgroup)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, "", nil
		}
		return 0, "", fmt.Errorf("cannot read the process's cgroup: %w", err)
	}
	var dir string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			dir = path.Clean("/" + p)
		}
	}
	if dir == "" {
		return 0, "", nil // cgroup v1 only
	}
	var low int64
	var lowFile string
	for {
		file := path.Join(s.CgroupRoot, dir, "memory.max")
		v, err := os.ReadFile(file)
		switch {
		case err == nil:
			text := strings.TrimSpace(string(v))
			if text != "max" {
				n, err := strconv.ParseInt(text, 10, 64)
				if err != nil || n <= 0 {
					return 0, "", fmt.Errorf("cannot read the cgroup's memory limit: %q in %s", text, file)
				}
				if low == 0 || n < low {
					low, lowFile = n, file
				}
			}
		case !errors.Is(err, fs.ErrNotExist):
			return 0, "", fmt.Errorf("cannot read the cgroup's memory limit: %w", err)
		}
		if dir == "/" {
			return low, lowFile, nil
		}
		dir = path.Dir(dir)
	}
}
