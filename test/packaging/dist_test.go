package packaging

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// distBinaries are make dist's outputs with the ELF machine and Go build
// settings each must have.
var distBinaries = []struct {
	name    string
	machine elf.Machine
	class   elf.Class
	goarch  string
	goarm   string
}{
	{"lmos-hub-linux-amd64", elf.EM_X86_64, elf.ELFCLASS64, "amd64", ""},
	{"lmos-hub-linux-arm64", elf.EM_AARCH64, elf.ELFCLASS64, "arm64", ""},
	{"lmos-hub-linux-armv6", elf.EM_ARM, elf.ELFCLASS32, "arm", "6"},
	{"lmos-hub-linux-armv7", elf.EM_ARM, elf.ELFCLASS32, "arm", "7"},
}

// TestDistBinariesStatic: each binary of make dist is a static, stripped
// ELF executable for its machine, built with CGO_ENABLED=0, -trimpath and
// the GOARCH/GOARM its name says.
func TestDistBinariesStatic(t *testing.T) {
	dir := built(t)
	for _, b := range distBinaries {
		t.Run(b.name, func(t *testing.T) {
			path := filepath.Join(dir, b.name)
			f, err := elf.Open(path)
			if err != nil {
				t.Fatalf("cannot open %s as ELF: %v", path, err)
			}
			defer f.Close()
			if f.Machine != b.machine || f.Class != b.class || f.Type != elf.ET_EXEC {
				t.Errorf("ELF machine %v class %v type %v, want %v %v ET_EXEC", f.Machine, f.Class, f.Type, b.machine, b.class)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
					t.Errorf("has a %v program header: dynamically linked", p.Type)
				}
			}
			for _, name := range []string{".interp", ".dynamic", ".symtab"} {
				if f.Section(name) != nil {
					t.Errorf("has a %s section (want static and stripped)", name)
				}
			}
			if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
				t.Errorf("imports shared libraries %v", libs)
			}
			info, err := buildinfo.ReadFile(path)
			if err != nil {
				t.Fatalf("no Go build info: %v", err)
			}
			want := map[string]string{"CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": b.goarch, "-trimpath": "true"}
			if b.goarm != "" {
				want["GOARM"] = b.goarm
			}
			got := map[string]string{}
			for _, s := range info.Settings {
				got[s.Key] = s.Value
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("build setting %s = %q, want %q", k, got[k], v)
				}
			}
			// -trimpath keeps -ldflags out of the build info: look for the
			// stamped version itself.
			if data, err := os.ReadFile(path); err != nil || !bytes.Contains(data, []byte(version)) {
				t.Errorf("the binary does not hold the version %s (%v)", version, err)
			}
			if st, err := os.Stat(path); err == nil {
				t.Logf("%s: %.1f MB", b.name, float64(st.Size())/1e6)
			}
		})
	}
}

// TestDistVersionStamped: the native binary reports the version make dist
// stamped into it.
func TestDistVersionStamped(t *testing.T) {
	dir := built(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("skipping: runs the amd64 binary natively")
	}
	out, err := exec.Command(filepath.Join(dir, "lmos-hub-linux-amd64"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), version) {
		t.Errorf("version printed %q, want it to contain %q", out, version)
	}
}

// TestMakeHelp: make help lists every target of the Makefile with its line.
func TestMakeHelp(t *testing.T) {
	need(t, "make", "make")
	root := repoRoot(t)
	out := run(t, "make", "-s", "-C", root, "help")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, line := range strings.Split(string(mk), "\n") {
		name, _, ok := strings.Cut(line, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t$%.=#") || strings.HasPrefix(line, "\t") {
			continue
		}
		targets = append(targets, name)
	}
	if len(targets) < 10 {
		t.Fatalf("found only %d targets in the Makefile: %v", len(targets), targets)
	}
	for _, name := range targets {
		if name == "FORCE" {
			continue
		}
		if !strings.Contains(out, "  "+name+": ") {
			t.Errorf("make help does not list %q:\n%s", name, out)
		}
	}
}
