// Package packaging tests what `make dist` and `make deb` produce and the
// systemd unit: static binaries of the right architecture, the .deb's files,
// conffiles and scripts, an install, upgrade and purge in a scratch root,
// the unit under systemd-analyze, and the arm64 binary under qemu.
package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// version is stamped into the test builds; the .debs carry it without "v".
const version = "v9.8.7-test"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  string
	buildDebs bool
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	if hubBin != "" {
		os.RemoveAll(filepath.Dir(hubBin))
	}
	os.Exit(code)
}

// repoRoot is the repository's top directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// need returns the path of a command the test needs; without it the test
// skips, unless CI or LMOS_INTEROP=1 demands it.
func need(t testing.TB, cmd, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(cmd)
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("%s not found (Debian %s; run scripts/test-deps.sh as root): %v", cmd, pkg, err)
		}
		t.Skipf("skipping: needs %s (Debian %s), which `make test` installs; set CI or LMOS_INTEROP=1 to make this a failure", cmd, pkg)
	}
	return p
}

// nfpmPath is the nfpm scripts/test-deps.sh installs into .cache/bin.
func nfpmPath(t testing.TB) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), ".cache", "bin", "nfpm")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("nfpm not installed (scripts/test-deps.sh installs it): %v", err)
		}
		return ""
	}
	return p
}

// built runs `make deb` (or `make dist` without nfpm) once into a temp
// directory of this test binary, so two runs side by side never share one.
func built(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("skipping: make dist and .debs are built on Linux")
	}
	need(t, "make", "make")
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lmos-dist-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		buildDir = dir
		target := "dist"
		if nfpm := nfpmPath(t); nfpm != "" {
			target, buildDebs = "deb", true
		}
		cmd := exec.Command("make", "-C", repoRoot(t), target, "DIST="+dir, "VERSION="+version)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = "make " + target + ": " + err.Error() + "\n" + string(out)
		}
	})
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	return buildDir
}

// debs returns the directory holding the .debs; without nfpm the test skips.
func debs(t testing.TB) string {
	t.Helper()
	dir := built(t)
	if !buildDebs {
		t.Skip("skipping: nfpm is not installed (scripts/test-deps.sh installs it into .cache/bin); set CI or LMOS_INTEROP=1 to make this a failure")
	}
	return dir
}

// run runs a command and returns its combined output; a failure is fatal.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
