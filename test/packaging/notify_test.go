package packaging

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	hubOnce sync.Once
	hubBin  string
	hubErr  string
)

// hubBinary builds cmd/lmos-hub for this machine once, as make build does.
func hubBinary(t *testing.T) string {
	t.Helper()
	hubOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lmos-hub-bin-")
		if err != nil {
			hubErr = err.Error()
			return
		}
		hubBin = filepath.Join(dir, "lmos-hub")
		cmd := exec.Command("go", "build", "-trimpath", "-o", hubBin, "./cmd/lmos-hub")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			hubErr = "go build: " + err.Error() + "\n" + string(out)
		}
	})
	if hubErr != "" {
		t.Fatal(hubErr)
	}
	return hubBin
}

// notifySocket listens where the hub is told NOTIFY_SOCKET is and hands
// over each datagram.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	msgs := make(chan string, 100)
	go func() {
		defer close(msgs)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return path, msgs
}

// next is the next notification, or a failure after a generous deadline.
func next(t *testing.T, msgs <-chan string, what string) string {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatalf("the notify socket closed before %s", what)
		}
		return m
	case <-time.After(60 * time.Second):
		t.Fatalf("no %s on NOTIFY_SOCKET within 60s", what)
	}
	return ""
}

// TestServiceNotify runs the hub binary as systemd would with Type=notify:
// it sends READY=1 once it serves (its /healthz answers at once), with
// WATCHDOG_USEC it pings WATCHDOG=1, and on SIGTERM it sends STOPPING=1 and
// exits 0. Without GOMEMLIMIT it logs the limit it derived.
func TestServiceNotify(t *testing.T) {
	for _, wd := range []bool{true, false} {
		name := map[bool]string{true: "watchdog", false: "no watchdog"}[wd]
		t.Run(name, func(t *testing.T) {
			bin := hubBinary(t)
			sock, msgs := notifySocket(t)
			cmd := exec.Command(bin, "serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false")
			env := []string{"NOTIFY_SOCKET=" + sock}
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "WATCHDOG_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") && !strings.HasPrefix(kv, "LMOS_HUB_") {
					env = append(env, kv)
				}
			}
			if wd {
				env = append(env, "WATCHDOG_USEC=400000")
			}
			cmd.Env = env
			stderr, exited := startProc(t, cmd)

			ready := next(t, msgs, "READY=1")
			lines := strings.Split(ready, "\n")
			if lines[0] != "READY=1" || len(lines) != 2 || !strings.HasPrefix(lines[1], "STATUS=serving on 127.0.0.1:") {
				t.Fatalf("first notification %q, want READY=1 and STATUS=serving on the HTTP address", ready)
			}
			addr := strings.TrimPrefix(lines[1], "STATUS=serving on ")
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Fatalf("READY=1 sent but /healthz does not answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("/healthz: %s", resp.Status)
			}
			if wd {
				for i := 0; i < 2; i++ {
					if m := next(t, msgs, "WATCHDOG=1"); m != "WATCHDOG=1" {
						t.Fatalf("notification %q, want WATCHDOG=1", m)
					}
				}
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			for {
				m := next(t, msgs, "STOPPING=1")
				if m == "STOPPING=1" {
					break
				}
				if !wd || m != "WATCHDOG=1" {
					t.Fatalf("notification %q, want STOPPING=1", m)
				}
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("the hub exited with %v after SIGTERM\n%s", err, stderr.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the hub did not exit within 60s of SIGTERM")
			}
			if !memoryLimitLogged(stderr.String()) {
				t.Errorf("no derived memory limit in the log:\n%s", stderr.String())
			}
		})
	}
}

// memoryLimitLogged: the log has the memory limit line with a source other
// than GOMEMLIMIT and a size in MiB.
func memoryLimitLogged(log string) bool {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, `msg="memory limit"`) && strings.Contains(l, "limit_mib=") && !strings.Contains(l, "from=GOMEMLIMIT") {
			return true
		}
	}
	return false
}

// startProc starts cmd keeping its stderr; exited gets its end. A process
// still running when the test ends is killed.
func startProc(t *testing.T, cmd *exec.Cmd) (stderr *bytes.Buffer, exited <-chan error) {
	t.Helper()
	stderr = new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return stderr, done
}
