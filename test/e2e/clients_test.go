package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// scriptProc is a test/interop script speaking the JSON-lines protocol of
// mqttjs.mjs: commands on stdin, reports on stdout. An {"error"} line, a
// line that is not JSON or an exit other than 0 fails the test: the script
// speaks for a client nobody here wrote, and that client's complaints are
// failures even when every result arrived.
type scriptProc struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// lines carries every report but the {"ok"} ones, which go to oks.
	lines  chan map[string]any
	oks    chan string
	exited chan struct{}
	stderr strings.Builder
	mu     sync.Mutex
	errs   []string
}

// startScript runs `node script args…`, or a .py script with Debian's
// python3 and its paho-mqtt (skipping as interopScript does when they are
// missing), and waits for its {"ready"} line.
func startScript(t *testing.T, ctx context.Context, name, script string, args ...string) *scriptProc {
	t.Helper()
	interp := "node"
	path := ""
	if strings.HasSuffix(script, ".py") {
		interp = pahoPython(t)
		path, _ = filepath.Abs(filepath.Join("../interop", script))
	} else {
		path = hubtest.InteropScript(t, script, "mqtt")
	}
	p := &scriptProc{t: t, name: name, lines: make(chan map[string]any, 4096), oks: make(chan string, 16), exited: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, interp, append([]string{path}, args...)...)
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	p.stdin, _ = p.cmd.StdinPipe()
	stdout, _ := p.cmd.StdoutPipe()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				p.complain(fmt.Sprintf("not JSON: %q", sc.Text()))
				continue
			}
			if e, ok := m["error"]; ok {
				p.complain(fmt.Sprint(e))
				continue
			}
			if ok, isOK := m["ok"].(string); isOK {
				p.oks <- ok
				continue
			}
			select {
			case p.lines <- m:
			default:
				p.complain("test harness: more than 4096 unread reports")
			}
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState != nil {
			return // exit() waited for it
		}
		_ = p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
		}
		err := p.cmd.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil && !t.Failed() {
			t.Errorf("%s exited: %v\n%s", p.name, err, p.stderr.String())
		}
	})
	m := p.next(20*time.Second, func(m map[string]any) bool { return m["ready"] != nil })
	t.Logf("%s ready: %v", name, m)
	return p
}

// pahoPython is Debian's python3 with python3-paho-mqtt (the python3 first
// on PATH may be another one); the test skips without it unless
// LMOS_INTEROP=1 demands it.
func pahoPython(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import paho.mqtt.client").Run(); err != nil {
		if os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("%s with paho-mqtt not installed (run scripts/test-deps.sh): %v", py, err)
		}
		t.Skipf("%s with paho-mqtt not installed; `make test` installs it", py)
	}
	return py
}

// runPaho runs a Python Paho script against h's broker (argv: host port
// args...), failing the test on a non-zero exit, and returns its stdout
// and stderr.
func runPaho(t *testing.T, h *testHub, timeout time.Duration, script string, args ...string) (stdout []byte, stderr string) {
	t.Helper()
	py := pahoPython(t)
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", script, host, port}, args...)...)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("paho: %v\n%s%s", err, out, errBuf.String())
	}
	return out, errBuf.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// complain records a protocol error the client reported; check fails the
// test with every one of them.
func (p *scriptProc) complain(s string) {
	p.mu.Lock()
	p.errs = append(p.errs, s)
	p.mu.Unlock()
}

// check fails the test if the client reported anything.
func (p *scriptProc) check() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errs {
		p.t.Errorf("%s reported: %s", p.name, e)
	}
	p.errs = nil
}

// send writes one command without waiting.
func (p *scriptProc) send(c map[string]any) {
	p.t.Helper()
	b, _ := json.Marshal(c)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("%s: write command: %v", p.name, err)
	}
}

// do sends a command and waits up to d for its {"ok"}; reports arriving
// meanwhile stay on lines.
func (p *scriptProc) do(d time.Duration, c map[string]any) {
	p.t.Helper()
	if err := p.doErr(d, c); err != nil {
		p.check()
		p.t.Fatal(err)
	}
	p.check()
}

// doErr is do for other goroutines than the test's: it returns what went
// wrong (check reports what the client said).
func (p *scriptProc) doErr(d time.Duration, c map[string]any) error {
	b, _ := json.Marshal(c)
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: write command: %w", p.name, err)
	}
	select {
	case ok := <-p.oks:
		if ok != c["cmd"] {
			return fmt.Errorf("%s: ok %q for command %v", p.name, ok, c["cmd"])
		}
		return nil
	case <-p.exited:
		// The reader queues an {"ok"} before it sees the end of the
		// output, so a script that answers and then exits (exit) leaves
		// both ready: the queued answer counts.
		select {
		case ok := <-p.oks:
			if ok != c["cmd"] {
				return fmt.Errorf("%s: ok %q for command %v", p.name, ok, c["cmd"])
			}
			return nil
		default:
		}
		return fmt.Errorf("%s exited during %v\n%s", p.name, c["cmd"], p.stderrText())
	case <-time.After(d):
		return fmt.Errorf("%s: no answer to %v within %v\n%s", p.name, c["cmd"], d, p.stderrText())
	}
}

// next returns the next report matching keep (others are dropped) within d.
func (p *scriptProc) next(d time.Duration, keep func(map[string]any) bool) map[string]any {
	p.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m := <-p.lines:
			if keep(m) {
				return m
			}
		case <-p.exited:
			p.check()
			p.t.Fatalf("%s exited\n%s", p.name, p.stderrText())
		case <-timeout:
			p.check()
			p.t.Fatalf("%s: no expected report within %v\n%s", p.name, d, p.stderrText())
		}
	}
}

// drain returns the reports waiting now.
func (p *scriptProc) drain() []map[string]any {
	var out []map[string]any
	for {
		select {
		case m := <-p.lines:
			out = append(out, m)
		default:
			return out
		}
	}
}

func (p *scriptProc) stderrText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// exit asks the script to end and checks it ended cleanly.
func (p *scriptProc) exit() {
	p.t.Helper()
	p.do(10*time.Second, map[string]any{"cmd": "exit"})
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s did not exit", p.name)
	}
	if err := p.cmd.Wait(); err != nil {
		p.t.Errorf("%s exited: %v\n%s", p.name, err, p.stderrText())
	}
	p.check()
}
