package app

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"golang.org/x/sys/unix"
)

// probe is an initialised global: it lives in the executable's writable data
// mapping, whose file holds {1, 2, 3, 4}.
var probe = [4]int{1, 2, 3, 4}

// rssFile is RssFile of /proc/self/status, in bytes.
func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// work runs code from many packages and the collector (which reads the
// stack maps in pclntab), so its result depends on the executable's text
// and read-only data being intact.
func work(t *testing.T) string {
	t.Helper()
	runtime.GC()
	var tables int
	for name, tab := range unicode.Categories {
		for r := rune(0); r < 0x3000; r += 7 {
			if unicode.Is(tab, r) {
				tables += len(name)
			}
		}
	}
	js, err := json.Marshal(map[string]any{"tables": tables, "probe": probe[:], "pi": 3.14159})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(js)
	return string(js) + " " + hex.EncodeToString(sum[:])
}

// The test binary's start-up touched its executable's pages as the hub's
// does; releasing them lowers RssFile, and the program runs on as before.
func TestReleaseExecutablePages(t *testing.T) {
	want := work(t) // touches the pages it needs afterwards too
	before := rssFile(t)
	released, err := releaseExecutablePages()
	after := rssFile(t)
	if err != nil {
		t.Fatal(err)
	}
	if released <= 0 {
		t.Fatalf("released %d bytes, want > 0", released)
	}
	if after >= before {
		t.Fatalf("RssFile %d bytes after releasing %d, %d before", after, released, before)
	}
	t.Logf("released %d bytes; RssFile %d -> %d", released, before, after)
	if got := work(t); got != want {
		t.Fatalf("after the release the same work gives %q, before %q", got, want)
	}
}

// A global the program changed keeps its value: the writable data mapping,
// whose file still holds the initial value, is not dropped.
func TestReleaseExecutablePagesKeepsGlobals(t *testing.T) {
	probe = [4]int{5, 6, 7, 8}
	if _, err := releaseExecutablePages(); err != nil {
		t.Fatal(err)
	}
	if probe != [4]int{5, 6, 7, 8} {
		t.Fatalf("probe is %v after the release, want [5 6 7 8]", probe)
	}
}

// Of the mappings of one file only a read-only one that nobody wrote is
// released: a writable private mapping and a read-only one written before
// mprotect (as a PIE's relocated RELRO segment is) keep what was written.
func TestReleaseReadOnlyMappingsSkipsWrittenOnes(t *testing.T) {
	const size = 64 << 10
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, bytes.Repeat([]byte{'f'}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mmap := func(prot int) []byte {
		b, err := unix.Mmap(int(f.Fd()), 0, size, prot, unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return b
	}
	clean := mmap(unix.PROT_READ)
	writable := mmap(unix.PROT_READ | unix.PROT_WRITE)
	relro := mmap(unix.PROT_READ | unix.PROT_WRITE)
	var sum int
	for i := 0; i < size; i += 4096 {
		sum += int(clean[i]) // resident now
		writable[i], relro[i] = 'w', 'r'
	}
	if err := unix.Mprotect(relro, unix.PROT_READ); err != nil {
		t.Fatal(err)
	}

	released, err := releaseReadOnlyMappings(reflect.ValueOf(clean).Pointer())
	if err != nil {
		t.Fatal(err)
	}
	if released != size {
		t.Fatalf("released %d bytes, want the clean mapping's %d", released, size)
	}
	if rss := mappingRss(t, clean); rss != 0 {
		t.Fatalf("the clean mapping still has %d resident bytes", rss)
	}
	for i := 0; i < size; i += 4096 {
		if clean[i] != 'f' || writable[i] != 'w' || relro[i] != 'r' {
			t.Fatalf("at %d: clean %q writable %q relro %q, want 'f' 'w' 'r'", i, clean[i], writable[i], relro[i])
		}
	}
	if sum != size/4096*'f' {
		t.Fatal("the clean mapping did not hold the file")
	}
}

// mappingRss is the resident size of the mapping that starts at b.
func mappingRss(t *testing.T, b []byte) int64 {
	t.Helper()
	maps, err := readMappings()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.start == reflect.ValueOf(b).Pointer() {
			return m.rss
		}
	}
	t.Fatal("no mapping starts at the slice")
	return 0
}
