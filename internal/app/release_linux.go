package app

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseExecutablePages drops this process's page-table entries for the
// executable's read-only mappings (code, rodata, pclntab) and returns how
// many resident bytes they held.
//
// Why: start-up runs code the idle hub never runs again (every package's
// init, config parsing, schema compilation, the store walk), and the kernel
// maps a file 64 KB around each fault (fault-around), so the binary's
// touched pages are most of the idle hub's RSS. They are clean file pages:
// MADV_DONTNEED on a private mapping nobody wrote removes only this
// process's view of them; the page cache keeps them (reclaimable), and a
// later use maps them again with a minor fault, without I/O.
func releaseExecutablePages() (int64, error) {
	// The mapping that holds this function's code is the executable's. Its
	// device and inode as /proc/self/maps shows them identify the others: a
	// path would read "… (deleted)" after an upgrade replaced the file, and
	// on overlayfs (containers) older kernels show the backing file's device
	// and inode in the maps, not those os.Stat("/proc/self/exe") reports
	// (the kernel's selftest overlayfs/dev_in_maps.c checks the later fix).
	return releaseReadOnlyMappings(reflect.ValueOf(releaseExecutablePages).Pointer())
}

// releaseReadOnlyMappings releases every mapping of the file mapped at addr
// that is neither writable nor holds a private copy of a page: a writable
// private mapping holds the program's modified globals, and a read-only one
// with anonymous pages was written before it was made read-only (a PIE's
// relocated RELRO segment); dropping either would bring back the file's
// contents. It reads /proc/self/smaps, which counts both.
func releaseReadOnlyMappings(addr uintptr) (int64, error) {
	maps, err := readMappings()
	if err != nil {
		return 0, err
	}
	var file *mapping
	for i := range maps {
		if maps[i].start <= addr && addr < maps[i].end {
			file = &maps[i]
			break
		}
	}
	if file == nil || file.inode == 0 {
		return 0, fmt.Errorf("cannot release mapped pages: no file mapping holds %#x", addr)
	}
	var released int64
	var errs []error
	for _, mp := range maps {
		if mp.dev != file.dev || mp.inode != file.inode || !mp.releasable() {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, mp.start, mp.end-mp.start, unix.MADV_DONTNEED); errno != 0 {
			errs = append(errs, fmt.Errorf("madvise %x-%x: %w", mp.start, mp.end, errno))
			continue
		}
		released += mp.rss
	}
	if err := errors.Join(errs...); err != nil {
		return released, fmt.Errorf("cannot release mapped pages: %w", err)
	}
	return released, nil
}

// mapping is one entry of /proc/self/smaps.
type mapping struct {
	start, end uintptr
	perms      string
	dev        string // "major:minor" in hex, as the kernel prints it
	inode      uint64
	rss        int64 // resident bytes
	anon       int64 // bytes of private copies (written pages)
	anonSeen   bool  // the kernel reported Anonymous
	locked     bool  // VM_LOCKED: madvise refuses it
}

// releasable tells whether dropping the mapping's pages loses nothing and
// frees something. Anonymous is a snapshot: a writable mapping may be
// written between the read of smaps and madvise, so it is never released.
func (m *mapping) releasable() bool {
	return !strings.Contains(m.perms, "w") && m.anonSeen && m.anon == 0 && !m.locked && m.rss > 0
}

// readMappings parses /proc/self/smaps: a header line per mapping
// ("start-end perms offset dev inode [path]") followed by "Key: value" lines.
func readMappings() ([]mapping, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("cannot read mappings: %w", err)
	}
	defer f.Close()
	var maps []mapping
	sc := bufio.NewScanner(f)
	// A header's path can be long; 64 KB bounds a line.
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if key, ok := strings.CutSuffix(fields[0], ":"); ok {
			if len(maps) == 0 {
				return nil, fmt.Errorf("cannot read mappings: %q before the first mapping", key)
			}
			cur := &maps[len(maps)-1]
			switch key {
			case "Rss", "Anonymous":
				if len(fields) < 3 || fields[2] != "kB" {
					return nil, fmt.Errorf("cannot read mappings: %q", sc.Text())
				}
				kb, err := strconv.ParseInt(fields[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("cannot read mappings: %w", err)
				}
				if key == "Rss" {
					cur.rss = kb << 10
				} else {
					cur.anon, cur.anonSeen = kb<<10, true
				}
			case "VmFlags":
				for _, fl := range fields[1:] {
					cur.locked = cur.locked || fl == "lo"
				}
			}
			continue
		}
		if len(fields) < 5 {
			return nil, fmt.Errorf("cannot read mappings: %q", sc.Text())
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		inode, err3 := strconv.ParseUint(fields[4], 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || end < start {
			return nil, fmt.Errorf("cannot read mappings: %q", sc.Text())
		}
		maps = append(maps, mapping{start: uintptr(start), end: uintptr(end), perms: fields[1], dev: fields[3], inode: inode})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read mappings: %w", err)
	}
	return maps, nil
}
