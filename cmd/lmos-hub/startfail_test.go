package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPortInUseNamesTheDoor: a busy port fails the start (exit 1) with a
// hint naming that door's setting and flag, no other; the failed start
// creates no admin token.
func TestPortInUseNamesTheDoor(t *testing.T) {
	for _, tc := range []struct {
		setting, flag string
		tls           bool
	}{
		{"http.addr", "--http-addr", false},
		{"mqtt.addr", "--mqtt-addr", false},
		{"tls.httpsAddr", "--https-addr", true},
		{"tls.mqttsAddr", "--mqtts-addr", true},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			work, data := t.TempDir(), t.TempDir()
			addrs := map[string]string{"--http-addr": "127.0.0.1:0", "--mqtt-addr": "127.0.0.1:0", "--https-addr": "127.0.0.1:0", "--mqtts-addr": "127.0.0.1:0"}
			addrs[tc.flag] = busy.Addr().String()
			args := []string{"serve", "--data-dir", data, "--mdns=false", "--http-addr", addrs["--http-addr"], "--mqtt-addr", addrs["--mqtt-addr"]}
			if tc.tls {
				args = append(args, "--tls=true", "--https-addr", addrs["--https-addr"], "--mqtts-addr", addrs["--mqtts-addr"])
			}
			r := runBinary(t, work, nil, args...)
			var hint string
			for _, l := range strings.Split(r.stderr, "\n") {
				if strings.HasPrefix(l, "hint:") {
					hint = l
				}
			}
			if r.code != exitFailure || !strings.Contains(hint, tc.flag+" ") || !strings.Contains(hint, busy.Addr().String()) || !strings.Contains(hint, tc.setting) {
				t.Fatalf("busy %s: exit %d, hint %q; want %d and a hint naming %s, %s and %s\nstderr: %s",
					tc.setting, r.code, hint, exitFailure, tc.setting, tc.flag, busy.Addr(), r.stderr)
			}
			for other := range addrs {
				if other != tc.flag && strings.Contains(hint, other+" ") {
					t.Errorf("busy %s: the hint suggests %s too: %q", tc.setting, other, hint)
				}
			}
			if tokenLines(r.stdout+r.stderr) != nil {
				t.Errorf("busy %s: a token was printed:\n%s", tc.setting, r.stdout)
			}
			list := runBinary(t, work, nil, "token", "list", "--data-dir", data)
			if rows := strings.Split(strings.TrimSpace(list.stdout), "\n"); list.code != 0 || len(rows) != 1 {
				t.Errorf("busy %s: token list after the failed start: exit %d, want only the header:\n%s%s", tc.setting, list.code, list.stdout, list.stderr)
			}
		})
	}
}

// TestPortInUseHintInJSON: with --log-format json the hint is a log
// record too; no line of stderr is anything but JSON.
func TestPortInUseHintInJSON(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	r := runBinary(t, t.TempDir(), nil, "serve", "--data-dir", t.TempDir(), "--mdns=false", "--log-format", "json",
		"--http-addr", busy.Addr().String(), "--mqtt-addr", "127.0.0.1:0")
	hinted := false
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var rec struct{ Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("a stderr line is not JSON: %q", l)
			continue
		}
		hinted = hinted || strings.HasPrefix(rec.Msg, "hint:") && strings.Contains(rec.Msg, "--http-addr")
	}
	if r.code != exitFailure || !hinted {
		t.Fatalf("exit %d, hint in the JSON log %v; want %d and a hint naming --http-addr:\n%s", r.code, hinted, exitFailure, r.stderr)
	}
}

// TestConfigErrorInJSON: a configuration refused with --log-format json
// asked is told as JSON records too (exit 2), naming the setting.
func TestConfigErrorInJSON(t *testing.T) {
	r := runBinary(t, t.TempDir(), nil, "serve", "--log-format", "json", "--join-mode", "maybe")
	named := false
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var rec struct{ Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("a stderr line is not JSON: %q", l)
			continue
		}
		named = named || strings.Contains(rec.Msg, "join-mode")
	}
	if r.code != exitUsage || !named {
		t.Fatalf("exit %d, join-mode named %v; want %d:\n%s", r.code, named, exitUsage, r.stderr)
	}
}

// dataDirRefused checks a start on an unusable data directory: exit 2, a
// hint naming --data-dir and the systemd StateDirectory, no token.
func dataDirRefused(t *testing.T, r binResult) {
	t.Helper()
	if r.code != exitUsage || !strings.Contains(r.stderr, "unusable data directory") ||
		!strings.Contains(r.stderr, "--data-dir") || !strings.Contains(r.stderr, "StateDirectory") {
		t.Errorf("exit %d; want %d, \"unusable data directory\" and a hint naming --data-dir and StateDirectory\nstderr: %s", r.code, exitUsage, r.stderr)
	}
	if tokenLines(r.stdout) != nil {
		t.Errorf("a token was printed:\n%s", r.stdout)
	}
}

// TestDataDirNotADirectory: a data directory that is a file is a
// configuration error (exit 2); the file is left as it was.
func TestDataDirNotADirectory(t *testing.T) {
	work := t.TempDir()
	file := filepath.Join(work, "data")
	if err := os.WriteFile(file, []byte("not a directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, work, nil, "serve", "--data-dir", file, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false")
	dataDirRefused(t, r)
	if b, err := os.ReadFile(file); err != nil || string(b) != "not a directory\n" {
		t.Errorf("the file given as data directory changed: %q, %v", b, err)
	}
	if entries, _ := os.ReadDir(work); len(entries) != 1 {
		t.Errorf("the failed start created files: %v", entries)
	}
}

// TestDataDirNotWritable: a data directory the hub's user cannot create
// is a configuration error (exit 2) and nothing is created. As root the
// hub runs as nobody, as a service's own user would.
func TestDataDirNotWritable(t *testing.T) {
	// Under os.TempDir so that nobody can reach it (t.TempDir's parents
	// are private).
	work, err := os.MkdirTemp("", "lmos-hub-datadir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(work, 0o755); os.RemoveAll(work) })
	parent := filepath.Join(work, "readonly")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o555); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(hubBinary(t), "serve", "--data-dir", filepath.Join(parent, "data"), "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false")
	cmd.Dir, cmd.Env = work, []string{"HOME=" + work}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var stdout, stderr cliSyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := 0
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	dataDirRefused(t, binResult{code, stdout.String(), stderr.String()})
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("the failed start created %v", entries)
	}
}
