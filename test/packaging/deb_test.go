package packaging

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// debVersion is the Debian version of the test builds (no "v").
var debVersion = strings.TrimPrefix(version, "v")

// packages are make deb's outputs: file name suffix, Debian architecture,
// the ELF machine of the binary inside and the dist binary it carries.
var packages = []struct {
	suffix, arch string
	machine      elf.Machine
	dist         string
}{
	{"amd64", "amd64", elf.EM_X86_64, "lmos-hub-linux-amd64"},
	{"arm64", "arm64", elf.EM_AARCH64, "lmos-hub-linux-arm64"},
	{"armhf", "armhf", elf.EM_ARM, "lmos-hub-linux-armv6"},
	{"armhf-armv7", "armhf", elf.EM_ARM, "lmos-hub-linux-armv7"},
}

func debFile(dir, suffix string) string {
	return filepath.Join(dir, "lmos-hub_"+debVersion+"_"+suffix+".deb")
}

// TestDebContents: each .deb is lmos-hub for its Debian architecture with
// the binary of that architecture in /usr/bin, the unit, the default
// configuration as its one conffile, and the maintainer scripts.
func TestDebContents(t *testing.T) {
	dir := debs(t)
	need(t, "dpkg-deb", "dpkg")
	for _, p := range packages {
		t.Run(p.suffix, func(t *testing.T) {
			deb := debFile(dir, p.suffix)
			info := run(t, "dpkg-deb", "--info", deb)
			for _, want := range []string{"Package: lmos-hub\n", "Architecture: " + p.arch + "\n", "Version: " + debVersion + "\n",
				" conffiles", " postinst", " prerm", " postrm"} {
				if !strings.Contains(info, want) {
					t.Errorf("dpkg-deb --info lacks %q:\n%s", want, info)
				}
			}
			contents := run(t, "dpkg-deb", "--contents", deb)
			for _, want := range []string{
				"-rwxr-xr-x root/root", "./usr/bin/lmos-hub\n",
				"./lib/systemd/system/lmos-hub.service\n",
				"./etc/lmos-hub/config.yaml\n",
			} {
				if !strings.Contains(contents, want) {
					t.Errorf("dpkg-deb --contents lacks %q:\n%s", want, contents)
				}
			}
			ctrl := t.TempDir()
			run(t, "dpkg-deb", "--control", deb, ctrl)
			if b, err := os.ReadFile(filepath.Join(ctrl, "conffiles")); err != nil || strings.TrimSpace(string(b)) != "/etc/lmos-hub/config.yaml" {
				t.Errorf("conffiles = %q (%v), want /etc/lmos-hub/config.yaml alone", b, err)
			}
			for _, s := range []string{"postinst", "prerm", "postrm"} {
				want, _ := os.ReadFile(filepath.Join(repoRoot(t), "packaging", "scripts", s))
				got, err := os.ReadFile(filepath.Join(ctrl, s))
				if err != nil || string(got) != string(want) || len(want) == 0 {
					t.Errorf("control script %s is not packaging/scripts/%s (%v)", s, s, err)
				}
			}
			root := t.TempDir()
			run(t, "dpkg-deb", "-x", deb, root)
			f, err := elf.Open(filepath.Join(root, "usr", "bin", "lmos-hub"))
			if err != nil {
				t.Fatalf("the packaged binary: %v", err)
			}
			defer f.Close()
			if f.Machine != p.machine {
				t.Errorf("packaged binary is for %v, want %v", f.Machine, p.machine)
			}
			packaged, _ := os.ReadFile(filepath.Join(root, "usr", "bin", "lmos-hub"))
			built, _ := os.ReadFile(filepath.Join(dir, p.dist))
			if len(built) == 0 || string(packaged) != string(built) {
				t.Errorf("packaged binary is not %s", p.dist)
			}
			if st, err := os.Stat(deb); err == nil {
				t.Logf("%s: %.1f MB", filepath.Base(deb), float64(st.Size())/1e6)
			}
		})
	}
}

// scratchRoot makes a root directory dpkg can install into: an empty dpkg
// database and the account files the maintainer scripts edit.
func scratchRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"var/lib/dpkg/status": "", "var/lib/dpkg/available": "",
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\n",
		"etc/shadow": "root:*:19000:0:99999:7:::\n", "etc/gshadow": "root:*::\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// dpkgIn runs dpkg on the scratch root; the maintainer scripts run outside
// a chroot with DPKG_ROOT=root (they prefix every path with it).
func dpkgIn(t *testing.T, root string, args ...string) string {
	t.Helper()
	return run(t, "dpkg", append([]string{"--root=" + root, "--force-script-chrootless", "--force-not-root", "--log=/dev/null"}, args...)...)
}
