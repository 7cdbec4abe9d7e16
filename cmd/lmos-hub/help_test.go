package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// testVersion is the version stamped into the binary the tests build.
const testVersion = "v0.0.0-clitest"

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// hubBinary builds lmos-hub once per test binary, as `make build` does,
// and returns its path.
func hubBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "lmos-hub-bin-")
		if built.err != nil {
			return
		}
		// Readable by every user: a test runs it as nobody.
		if built.err = os.Chmod(built.dir, 0o755); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "lmos-hub")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+testVersion, "-o", built.bin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// binResult is what one run of the real binary produced.
type binResult struct {
	code           int
	stdout, stderr string
}

// runBinary runs the built lmos-hub with args in dir, with only env
// (KEY=VALUE) as its environment besides HOME.
func runBinary(t *testing.T, dir string, env []string, args ...string) binResult {
	t.Helper()
	cmd := exec.Command(hubBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + dir}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("lmos-hub %q: %v", args, err)
	}
	return binResult{code, stdout.String(), stderr.String()}
}

// errorLines are the lines of stderr that report an error.
func errorLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "error:") {
			out = append(out, l)
		}
	}
	return out
}

// commandPaths is every command and subcommand of the command table, as
// typed after "lmos-hub".
func commandPaths() [][]string {
	var paths [][]string
	for _, c := range commands {
		paths = append(paths, []string{c.name})
		for _, sub := range c.subs {
			paths = append(paths, []string{c.name, sub})
		}
	}
	return paths
}

// TestEveryCommandAnswersHelp runs the real binary: every command and
// subcommand in the command table answers --help, -h and `help …` with
// its usage on stdout and exit 0.
func TestEveryCommandAnswersHelp(t *testing.T) {
	dir := t.TempDir()
	for _, top := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := runBinary(t, dir, nil, top...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "lmos-hub — ") || len(errorLines(r.stderr)) > 0 {
			t.Errorf("lmos-hub %s: exit %d, stdout %q, stderr %q; want 0 and the commands", top[0], r.code, r.stdout, r.stderr)
		}
		for _, c := range commands {
			if !strings.Contains(r.stdout, "lmos-hub "+c.name) && !strings.Contains(r.stdout, "lmos-hub ["+c.name+"]") {
				t.Errorf("lmos-hub %s does not list the command %s:\n%s", top[0], c.name, r.stdout)
			}
		}
	}
	for _, path := range commandPaths() {
		forms := [][]string{
			append(append([]string{}, path...), "--help"),
			append(append([]string{}, path...), "-h"),
			append([]string{"help"}, path...),
		}
		for _, args := range forms {
			r := runBinary(t, dir, nil, args...)
			name := strings.Join(args, " ")
			if r.code != 0 || len(errorLines(r.stderr)) > 0 {
				t.Errorf("lmos-hub %s: exit %d, stderr %q; want 0", name, r.code, r.stderr)
				continue
			}
			if !strings.Contains(r.stdout, "usage:") || !strings.Contains(r.stdout, "lmos-hub") {
				t.Errorf("lmos-hub %s: no usage on stdout: %q", name, r.stdout)
			}
			for _, word := range path {
				if !strings.Contains(r.stdout, word) {
					t.Errorf("lmos-hub %s: the usage does not name %q:\n%s", name, word, r.stdout)
				}
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("asking for help created %v in the working directory", entries)
	}
}

// TestUnknownFlagPointsToHelp: an unknown flag of any command, or an
// unknown command, is exit 2 with one error line naming where --help is,
// and nothing on stdout.
func TestUnknownFlagPointsToHelp(t *testing.T) {
	dir := t.TempDir()
	check := func(args []string, helpOf string) {
		t.Helper()
		r := runBinary(t, dir, nil, args...)
		lines := errorLines(r.stderr)
		if r.code != exitUsage || r.stdout != "" || len(lines) != 1 || !strings.Contains(lines[0], "lmos-hub "+helpOf+"--help") {
			t.Errorf("lmos-hub %s: exit %d, stdout %q, stderr %q; want %d and one error line pointing to `lmos-hub %s--help`",
				strings.Join(args, " "), r.code, r.stdout, r.stderr, exitUsage, helpOf)
		}
	}
	for _, path := range commandPaths() {
		check(append(append([]string{}, path...), "--no-such-flag"), strings.Join(path, " ")+" ")
	}
	check([]string{"--no-such-flag"}, "serve ")
	check([]string{"frobnicate"}, "")
	check([]string{"help", "frobnicate"}, "")
	for _, c := range commands {
		if len(c.subs) > 0 {
			check([]string{c.name, "frobnicate"}, c.name+" ")
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("a usage error created %v in the working directory", entries)
	}
}

// TestVersionFlag: --version prints what `version` prints.
func TestVersionFlag(t *testing.T) {
	dir := t.TempDir()
	want := "lmos-hub " + testVersion + "\n"
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		r := runBinary(t, dir, nil, args...)
		if r.code != 0 || r.stdout != want {
			t.Errorf("lmos-hub %s: exit %d, stdout %q, stderr %q; want 0 and %q", args[0], r.code, r.stdout, r.stderr, want)
		}
	}
}
