package main

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hubProcess is the real binary serving, with its output.
type hubProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *cliSyncBuffer
	exited         chan error
}

// startBinary starts `lmos-hub serve args…` and waits (bounded) until it
// logs "hub ready"; it fails the test if the hub exits first.
func startBinary(t *testing.T, dir string, args ...string) *hubProcess {
	t.Helper()
	return startBinaryEnv(t, dir, nil, args...)
}

// startBinaryEnv is startBinary with env (KEY=VALUE) in the environment.
func startBinaryEnv(t *testing.T, dir string, env []string, args ...string) *hubProcess {
	t.Helper()
	p := &hubProcess{cmd: exec.Command(hubBinary(t), append([]string{"serve"}, args...)...), stdout: &cliSyncBuffer{}, stderr: &cliSyncBuffer{},
		exited: make(chan error, 1)}
	p.cmd.Dir, p.cmd.Env = dir, append([]string{"HOME=" + dir}, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.stderr.String(), `msg="hub ready"`) {
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("the hub exited before it was ready (%v):\n%s", err, p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub was not ready within 60s:\n%s", p.stderr.String())
		}
	}
	return p
}

// stop sends SIGTERM and waits (bounded) for the exit; it returns the
// exit status.
func (p *hubProcess) stop(t *testing.T) int {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return p.cmd.ProcessState.ExitCode()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 0
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("the hub did not stop within 60s of SIGTERM")
		return -1
	}
}

// tokenLines are the lines of out that hold a token secret.
func tokenLines(out string) []string {
	var secrets []string
	for _, l := range strings.Split(out, "\n") {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, "lmos_") {
			secrets = append(secrets, s)
		}
	}
	return secrets
}

// TestFirstTokenOnceTheHubServes: a first start that fails on a busy port
// neither creates nor prints the first admin token; the next start, which
// serves, prints it; the one after says tokens exist and how to make one.
func TestFirstTokenOnceTheHubServes(t *testing.T) {
	work, data := t.TempDir(), t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	// 1: the HTTP port is taken.
	r := runBinary(t, work, nil, "serve", "--data-dir", data, "--http-addr", busy.Addr().String(), "--mqtt-addr", "127.0.0.1:0", "--mdns=false")
	if r.code != exitFailure || len(tokenLines(r.stdout+r.stderr)) != 0 || strings.Contains(r.stdout+r.stderr, "first admin token") {
		t.Fatalf("first start on a busy port: exit %d; want %d and no token\nstdout: %s\nstderr: %s", r.code, exitFailure, r.stdout, r.stderr)
	}
	list := runBinary(t, work, nil, "token", "list", "--data-dir", data)
	if list.code != 0 || len(strings.Split(strings.TrimSpace(list.stdout), "\n")) != 1 {
		t.Fatalf("token list after the failed start: exit %d; want 0 and only the header\nstdout: %s\nstderr: %s", list.code, list.stdout, list.stderr)
	}

	// 2: it serves, and prints the token once.
	free := []string{"--data-dir", data, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false"}
	p := startBinary(t, work, free...)
	secrets := tokenLines(p.stdout.String())
	if len(secrets) != 1 {
		t.Fatalf("second start: %d token lines on stdout, want 1:\n%s", len(secrets), p.stdout.String())
	}
	if code := p.stop(t); code != exitOK {
		t.Fatalf("second start: exit %d after SIGTERM:\n%s", code, p.stderr.String())
	}
	list = runBinary(t, work, nil, "token", "list", "--data-dir", data)
	if rows := strings.Split(strings.TrimSpace(list.stdout), "\n"); len(rows) != 2 || !strings.Contains(rows[1], "initial") {
		t.Fatalf("token list after the second start: want one token \"initial\":\n%s", list.stdout)
	}

	// 3: no new token; the log says tokens exist and how to make one.
	p = startBinary(t, work, free...)
	if code := p.stop(t); code != exitOK {
		t.Fatalf("third start: exit %d after SIGTERM:\n%s", code, p.stderr.String())
	}
	if len(tokenLines(p.stdout.String())) != 0 {
		t.Errorf("third start printed a token:\n%s", p.stdout.String())
	}
	if log := p.stderr.String(); !strings.Contains(log, "admin tokens exist") || !strings.Contains(log, "lmos-hub token create") {
		t.Errorf("third start does not say that tokens exist and how to make one:\n%s", log)
	}
	list2 := runBinary(t, work, nil, "token", "list", "--data-dir", data)
	if list2.stdout != list.stdout {
		t.Errorf("the third start changed the tokens:\n%s\nwant\n%s", list2.stdout, list.stdout)
	}
}
