package netnstest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a process running in a node, typically the test binary itself
// re-executed as a helper. Its stdout lines are collected.
type Proc struct {
	t     testing.TB
	Cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
}

// Helper starts the test binary in node running only the test named run,
// with env added (helpers check an environment variable to act).
func (l *LAN) Helper(node, run string, env ...string) *Proc {
	l.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := l.Command(node, exe, "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	return l.Start(cmd)
}

// Start starts cmd (built with Command) and collects its stdout and stderr
// lines; it is killed at cleanup if still running. Stderr also goes to the
// test log.
func (l *LAN) Start(cmd *exec.Cmd) *Proc {
	l.t.Helper()
	p := &Proc{t: l.t, Cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	p.stdin, err = cmd.StdinPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("start %v: %v", cmd.Args, err)
	}
	var readers sync.WaitGroup
	scan := func(r io.Reader, log bool) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if log {
				l.t.Log(sc.Text())
			}
			select {
			case p.lines <- sc.Text():
			default: // nobody reads: drop rather than block the child
			}
		}
	}
	readers.Add(2)
	go scan(out, false)
	go scan(errPipe, true)
	go func() {
		readers.Wait()
		close(p.lines)
		_ = cmd.Wait()
		close(p.done)
	}()
	l.t.Cleanup(func() { p.Kill() })
	return p
}

// Send writes a line to the process's stdin.
func (p *Proc) Send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("send %q: %v", line, err)
	}
}

// WaitLine returns the first line for which match is true, within timeout.
func (p *Proc) WaitLine(timeout time.Duration, match func(string) bool) (string, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return "", false
			}
			if match(line) {
				return line, true
			}
		case <-deadline.C:
			return "", false
		}
	}
}

// WaitContains waits for a line containing all of parts or fails the test.
// It waits at least minWait whatever timeout says: the timeouts the tests
// give are what a quiet machine needs, and a loaded one is slow, never
// wrong (a goodbye took over 3 s beside another make test).
func (p *Proc) WaitContains(timeout time.Duration, parts ...string) string {
	p.t.Helper()
	timeout = max(timeout, minWait)
	line, ok := p.WaitLine(timeout, func(s string) bool {
		for _, x := range parts {
			if !strings.Contains(s, x) {
				return false
			}
		}
		return true
	})
	if !ok {
		p.t.Fatalf("no line containing %q within %s", parts, timeout)
	}
	p.t.Logf("got %s", line)
	return line
}

// Signal sends sig to the process (ip netns exec execs it, so the pid is
// the process itself).
func (p *Proc) Signal(sig syscall.Signal) { _ = p.Cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to 10 s, then kills.
func (p *Proc) Stop() {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Kill kills the process (SIGKILL) and waits for it.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// minWait is the shortest wait of WaitContains.
const minWait = 30 * time.Second
