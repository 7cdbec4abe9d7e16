package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
)

// unitPath is the unit the .deb installs.
func unitPath(t *testing.T) string {
	return filepath.Join(repoRoot(t), "systemd", "lmos-hub.service")
}

// TestUnitVerify: systemd-analyze verify finds nothing to say about the
// unit. verify also checks that ExecStart's binary exists, and this system
// has no /usr/bin/lmos-hub (the tests never install into it), so the copy
// verified points ExecStart at a freshly built binary; all else is as
// shipped.
func TestUnitVerify(t *testing.T) {
	sa := need(t, "systemd-analyze", "systemd")
	unit := string(mustRead(t, unitPath(t)))
	if strings.Count(unit, "ExecStart=/usr/bin/lmos-hub ") != 1 {
		t.Fatalf("the unit does not start /usr/bin/lmos-hub once:\n%s", unit)
	}
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "lmos-hub.service")
	if err := os.WriteFile(copyPath, []byte(strings.Replace(unit, "ExecStart=/usr/bin/lmos-hub ", "ExecStart="+hubBinary(t)+" ", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", copyPath).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The unit as shipped: without /usr/bin/lmos-hub its absence is the
	// one complaint.
	if _, err := os.Stat("/usr/bin/lmos-hub"); err == nil {
		return
	}
	out, _ = exec.Command(sa, "verify", unitPath(t)).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.Contains(line, "/usr/bin/lmos-hub is not executable") {
			t.Errorf("systemd-analyze verify of the shipped unit says more than the missing binary:\n%s", out)
			break
		}
	}
}

// TestUnitSecurity: systemd-analyze security rates the unit's exposure at
// 2.0 or less.
func TestUnitSecurity(t *testing.T) {
	sa := need(t, "systemd-analyze", "systemd")
	out, err := exec.Command(sa, "security", "--offline=true", unitPath(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for lmos-hub\.service: ([0-9.]+) `).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure in:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil || score > 2.0 {
		t.Errorf("exposure %s, want ≤ 2.0:\n%s", m[1], out)
	}
	t.Logf("systemd-analyze security: exposure %s", m[1])
}

// TestUnitSettings: the settings the hub relies on, which the security
// score does not see: readiness, the watchdog, no restart on exit 2, a stop
// timeout above the hub's own, the address families mDNS and interface
// tracking need, and GOMEMLIMIT at about 90 % of MemoryMax.
func TestUnitSettings(t *testing.T) {
	unit := map[string][]string{}
	for _, line := range strings.Split(string(mustRead(t, unitPath(t))), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = append(unit[k], v)
		}
	}
	one := func(k string) string {
		if len(unit[k]) != 1 {
			t.Errorf("%s= set %d times, want once", k, len(unit[k]))
			return ""
		}
		return unit[k][0]
	}
	for k, want := range map[string]string{
		"Type": "notify", "NotifyAccess": "main", "Restart": "on-failure", "RestartPreventExitStatus": "2",
		"User": "lmos-hub", "StateDirectory": "lmos-hub", "ConfigurationDirectory": "lmos-hub", "LogsDirectory": "lmos-hub",
		"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
	} {
		if got := one(k); got != want {
			t.Errorf("%s=%s, want %s", k, got, want)
		}
	}
	if d, err := time.ParseDuration(one("WatchdogSec")); err != nil || d < 10*time.Second {
		t.Errorf("WatchdogSec=%s: want at least 10s (%v)", one("WatchdogSec"), err)
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if shutdown := time.Duration(app.DefaultConfig().ShutdownTimeout); err != nil || stop <= shutdown {
		t.Errorf("TimeoutStopSec=%s: want more than the hub's shutdownTimeout %s (%v)", one("TimeoutStopSec"), shutdown, err)
	}
	env := map[string]string{}
	for _, e := range unit["Environment"] {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	if env["LMOS_HUB_DATA_DIR"] != "/var/lib/lmos-hub" {
		t.Errorf("LMOS_HUB_DATA_DIR=%q, want the StateDirectory /var/lib/lmos-hub", env["LMOS_HUB_DATA_DIR"])
	}
	max, err1 := strconv.ParseInt(strings.TrimSuffix(one("MemoryMax"), "M"), 10, 64)
	lim, err2 := strconv.ParseInt(strings.TrimSuffix(env["GOMEMLIMIT"], "MiB"), 10, 64)
	if err1 != nil || err2 != nil || lim*100 < max*88 || lim*100 > max*92 {
		t.Errorf("MemoryMax=%s GOMEMLIMIT=%s: want MiB figures with GOMEMLIMIT ~90 %% of MemoryMax", one("MemoryMax"), env["GOMEMLIMIT"])
	}
}

// TestDefaultConfigLoads: the /etc/lmos-hub/config.yaml the package ships
// is a valid configuration for the hub (a bad one would stop the service
// with exit 2 and no restart), with the unit's data directory.
func TestDefaultConfigLoads(t *testing.T) {
	env := map[string]string{"LMOS_HUB_DATA_DIR": "/var/lib/lmos-hub"}
	cfg, err := app.LoadConfig([]string{"--config", filepath.Join(repoRoot(t), "packaging", "config.yaml")}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("packaging/config.yaml: %v", err)
	}
	if cfg.DataDir != "/var/lib/lmos-hub" || cfg.Log.Format != "text" || cfg.HTTP.Addr != ":8080" {
		t.Errorf("config: dataDir %q, log format %q, http %q", cfg.DataDir, cfg.Log.Format, cfg.HTTP.Addr)
	}
}
