package packaging

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// account is the passwd line of name in root, split ("" when absent).
func account(t *testing.T, root, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) == 7 && f[0] == name {
			return f
		}
	}
	return nil
}

// tokenList runs the packaged binary's `token list` on the installed data
// directory.
func tokenList(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "usr", "bin", "lmos-hub"), "token", "list", "--data-dir", filepath.Join(root, "var", "lib", "lmos-hub")).Output()
	if err != nil {
		t.Fatalf("token list: %v", err)
	}
	return string(out)
}

// TestDebInstallUpgradePurge installs the amd64 .deb into a scratch root
// with dpkg (never into this system), upgrades it, then purges it.
func TestDebInstallUpgradePurge(t *testing.T) {
	dir := debs(t)
	need(t, "dpkg", "dpkg")
	need(t, "useradd", "passwd")
	need(t, "systemctl", "systemd")
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" || os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatal("the install test needs root (the scripts chown the state directory)")
		}
		t.Skip("skipping: needs root to chown the state directory in the scratch root")
	}
	root := scratchRoot(t)
	out := dpkgIn(t, root, "--install", debFile(dir, "amd64"))
	for _, want := range []string{":8080/", "sudo cat /etc/lmos-hub/initial-admin-token", "journalctl -u lmos-hub"} {
		if !strings.Contains(out, want) {
			t.Errorf("the install did not print %q:\n%s", want, out)
		}
	}
	checkInstalled(t, root)
	token, _ := os.ReadFile(filepath.Join(root, "etc", "lmos-hub", "initial-admin-token"))
	before := tokenList(t, root)

	// Upgrade: a newer package over an edited configuration and a used store.
	conf := filepath.Join(root, "etc", "lmos-hub", "config.yaml")
	edited := append(mustRead(t, conf), "\nhub:\n  name: kitchen\n"...)
	if err := os.WriteFile(conf, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	newer := t.TempDir()
	data, _ := os.ReadFile(filepath.Join(dir, "lmos-hub-linux-amd64"))
	if err := os.WriteFile(filepath.Join(newer, "lmos-hub-linux-amd64"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "packaging", "deb.sh"), nfpmPath(t), "amd64")
	cmd.Env = append(os.Environ(), "DIST="+newer, "VERSION=v9.8.8-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deb.sh: %v\n%s", err, b)
	}
	out = dpkgIn(t, root, "--install", filepath.Join(newer, "lmos-hub_9.8.8-test_amd64.deb"))
	if strings.Contains(out, "initial-admin-token") {
		t.Errorf("the upgrade printed the first-install message:\n%s", out)
	}
	if got := mustRead(t, conf); !bytes.Equal(got, edited) {
		t.Errorf("the upgrade changed the edited config.yaml:\n%s", got)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "etc", "lmos-hub", "initial-admin-token")); !bytes.Equal(got, token) {
		t.Error("the upgrade changed the initial admin token file")
	}
	if after := tokenList(t, root); after != before {
		t.Errorf("the upgrade changed the tokens:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	status := run(t, "dpkg-query", "--admindir="+filepath.Join(root, "var", "lib", "dpkg"), "-W", "-f=${Version} ${db:Status-Abbrev}", "lmos-hub")
	if strings.TrimSpace(status) != "9.8.8-test ii" {
		t.Errorf("after the upgrade dpkg-query says %q", status)
	}

	dpkgIn(t, root, "--purge", "lmos-hub")
	for _, gone := range []string{"usr/bin/lmos-hub", "lib/systemd/system/lmos-hub.service", "etc/lmos-hub", "var/lib/lmos-hub",
		"etc/systemd/system/multi-user.target.wants/lmos-hub.service"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("after the purge /%s is still there (%v)", gone, err)
		}
	}
	if a := account(t, root, "lmos-hub"); a != nil {
		t.Errorf("after the purge the user is still there: %v", a)
	}
	if g := mustRead(t, filepath.Join(root, "etc", "group")); bytes.Contains(g, []byte("lmos-hub")) {
		t.Errorf("after the purge the group is still there:\n%s", g)
	}
}

// checkInstalled checks the layout a first install leaves in root.
func checkInstalled(t *testing.T, root string) {
	t.Helper()
	for name, mode := range map[string]os.FileMode{
		"usr/bin/lmos-hub": 0o755, "lib/systemd/system/lmos-hub.service": 0o644, "etc/lmos-hub/config.yaml": 0o644,
		"etc/lmos-hub/initial-admin-token": 0o600, "var/lib/lmos-hub": os.ModeDir | 0o750,
	} {
		st, err := os.Stat(filepath.Join(root, name))
		if err != nil {
			t.Errorf("/%s: %v", name, err)
			continue
		}
		if st.Mode()&(os.ModeDir|os.ModePerm) != mode {
			t.Errorf("/%s has mode %v, want %v", name, st.Mode(), mode)
		}
	}
	a := account(t, root, "lmos-hub")
	if a == nil {
		t.Fatal("no lmos-hub user in the root's /etc/passwd")
	}
	uid, _ := strconv.Atoi(a[2])
	if uid == 0 || uid >= 1000 || a[5] != "/var/lib/lmos-hub" || a[6] != "/usr/sbin/nologin" {
		t.Errorf("lmos-hub user %v: want a system uid (1-999), home /var/lib/lmos-hub, shell /usr/sbin/nologin", a)
	}
	err := filepath.Walk(filepath.Join(root, "var", "lib", "lmos-hub"), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if owner := fileUID(fi); owner != uid {
			t.Errorf("%s is owned by uid %d, want lmos-hub's %d", p, owner, uid)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	token := strings.TrimSpace(string(mustRead(t, filepath.Join(root, "etc", "lmos-hub", "initial-admin-token"))))
	if len(token) < 20 || strings.ContainsAny(token, " \n") {
		t.Errorf("initial-admin-token holds %q, want one token", token)
	}
	if list := tokenList(t, root); !strings.Contains(list, "initial") || !strings.Contains(list, "admin") {
		t.Errorf("token list on the installed data dir:\n%s", list)
	}
	link, err := os.Readlink(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/lmos-hub.service"))
	if err != nil || !strings.HasSuffix(link, "/lib/systemd/system/lmos-hub.service") {
		t.Errorf("the unit is not enabled in the root: %q %v", link, err)
	}
	status := mustRead(t, filepath.Join(root, "var", "lib", "dpkg", "status"))
	if !bytes.Contains(status, []byte("Conffiles:\n /etc/lmos-hub/config.yaml ")) {
		t.Errorf("dpkg's status lists no conffile /etc/lmos-hub/config.yaml:\n%s", status)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDebRefusesBinaryThatDoesNotRun: a package whose binary cannot run on
// the machine (the armhf-armv7 one on a Pi Zero) stops in postinst with a
// message naming the package to take, before it creates a user, a state
// directory or a token.
func TestDebRefusesBinaryThatDoesNotRun(t *testing.T) {
	dir := debs(t)
	need(t, "dpkg", "dpkg")
	// A binary that runs nowhere: the first 4 KiB of the real one.
	broken := t.TempDir()
	data := mustRead(t, filepath.Join(dir, "lmos-hub-linux-amd64"))
	if err := os.WriteFile(filepath.Join(broken, "lmos-hub-linux-amd64"), data[:4096], 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "packaging", "deb.sh"), nfpmPath(t), "amd64")
	cmd.Env = append(os.Environ(), "DIST="+broken, "VERSION="+version)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deb.sh: %v\n%s", err, b)
	}
	root := scratchRoot(t)
	args := []string{"--root=" + root, "--force-script-chrootless", "--force-not-root", "--log=/dev/null", "--install", debFile(broken, "amd64")}
	out, err := exec.Command("dpkg", args...).CombinedOutput()
	if err == nil {
		t.Fatalf("dpkg --install succeeded with a binary that does not run:\n%s", out)
	}
	if !strings.Contains(string(out), "does not run on this machine") || !strings.Contains(string(out), "install lmos-hub_VERSION_armhf.deb") {
		t.Errorf("the failure does not say which package to take:\n%s", out)
	}
	if a := account(t, root, "lmos-hub"); a != nil {
		t.Errorf("a user was created: %v", a)
	}
	for _, p := range []string{"var/lib/lmos-hub", "etc/lmos-hub/initial-admin-token", "etc/systemd"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("/%s was created (%v)", p, err)
		}
	}
}
