package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// The MQTT bridge (PROTOCOL §9) against a real Debian mosquitto started by
// the test on a loopback port; the local and remote clients are
// mosquitto_pub and mosquitto_sub.

// upstream is a mosquitto broker process on a fixed loopback port, which
// the test may kill and start again (with its persistence file).
type upstream struct {
	t    *testing.T
	dir  string
	port string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs *hubtest.SyncBuffer
}

// mosquittoBroker returns the broker binary, skipping without it unless
// CI or LMOS_INTEROP=1 is set (then it fails).
func mosquittoBroker(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(mosquittoBin); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("%s not installed (run scripts/test-deps.sh): %v", mosquittoBin, err)
		}
		t.Skipf("%s not installed; `make test` installs it (Debian mosquitto)", mosquittoBin)
	}
	return mosquittoBin
}

// newUpstream picks a free loopback port and writes mosquitto's
// configuration (persistence in its own directory); start runs it.
func newUpstream(t *testing.T, conf ...string) *upstream {
	t.Helper()
	mosquittoBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	// Run as root, mosquitto drops to the user mosquitto, which must reach
	// its persistence directory: not below t.TempDir's private parent.
	dir, err := os.MkdirTemp("", "lmos-bridge-upstream-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("per_listener_settings false\nallow_anonymous true\npersistence true\npersistence_location %s/\nautosave_interval 1\nmax_queued_messages 0\nlistener %s 127.0.0.1\n", dir, port)
	for _, l := range conf {
		text += strings.ReplaceAll(l, "{dir}", dir) + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "mosquitto.conf"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	u := &upstream{t: t, dir: dir, port: port, logs: &hubtest.SyncBuffer{}}
	t.Cleanup(func() { u.kill() })
	return u
}

func (u *upstream) addr() string { return "127.0.0.1:" + u.port }
func (u *upstream) url() string  { return "mqtt://" + u.addr() }

// start runs mosquitto and waits until it accepts connections.
func (u *upstream) start() {
	u.t.Helper()
	cmd := exec.Command(mosquittoBin, "-c", filepath.Join(u.dir, "mosquitto.conf"))
	cmd.Stdout, cmd.Stderr = u.logs, u.logs
	if err := cmd.Start(); err != nil {
		u.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	u.mu.Lock()
	u.cmd, u.done = cmd, done
	u.mu.Unlock()
	waitFor(u.t, 10*time.Second, "mosquitto listening on "+u.addr(), func() bool {
		select {
		case <-done:
			u.t.Fatalf("mosquitto exited: %s", u.logs.String())
		default:
		}
		c, err := net.Dial("tcp", u.addr())
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// kill ends mosquitto with SIGKILL (nothing saved beyond its last autosave).
func (u *upstream) kill() {
	u.mu.Lock()
	cmd, done := u.cmd, u.done
	u.cmd = nil
	u.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop ends mosquitto with SIGTERM: it saves its persistence file first.
func (u *upstream) stop() {
	u.mu.Lock()
	cmd, done := u.cmd, u.done
	u.cmd = nil
	u.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}
}

// lineSub is a running mosquitto_sub printing "topic payload" lines.
type lineSub struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
	cmd   *exec.Cmd
	done  chan struct{}
	err   bytes.Buffer
}

// startSub runs mosquitto_sub (MQTT 5, -v) against addr with args.
func startSub(t *testing.T, addr string, args ...string) *lineSub {
	t.Helper()
	bin := mosquittoTool(t, "mosquitto_sub")
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, append([]string{"-h", host, "-p", port, "-V", "5", "-v"}, args...)...)
	s := &lineSub{t: t, cmd: cmd, done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &syncWriter{mu: &s.mu, w: &s.err}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
		}
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(s.stop)
	return s
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (s *lineSub) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// count is how many lines equal line.
func (s *lineSub) count(line string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		if l == line {
			n++
		}
	}
	return n
}

func (s *lineSub) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// ready publishes probe on topic through addr until the subscriber has
// printed it: its subscription is in place.
func (s *lineSub) ready(addr, topic string) {
	s.t.Helper()
	probe := "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	waitFor(s.t, 10*time.Second, "mosquitto_sub subscribed to "+topic, func() bool {
		mosqPub(s.t, addr, "-t", topic, "-m", probe)
		for range 20 {
			if s.count(topic+" "+probe) > 0 {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	})
}

// mosqPub runs mosquitto_pub (MQTT 5) and returns its stderr; a non-zero
// exit fails the test.
func mosqPub(t *testing.T, addr string, args ...string) string {
	t.Helper()
	out, err := mosqPubErr(t, addr, args...)
	if err != nil {
		t.Fatalf("mosquitto_pub %v: %v: %s", args, err, out)
	}
	return out
}

func mosqPubErr(t *testing.T, addr string, args ...string) (string, error) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mosquittoTool(t, "mosquitto_pub"), append([]string{"-h", host, "-p", port, "-V", "5"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

// bridgeTopics are the bridged topics of the tests: out from the hub's
// status and from a local area, in to a local area, and both ways.
func bridgeHub(up *upstream, topics string, edit func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Bridge.URL = up.url()
		c.Bridge.RetryMin = Duration(100 * time.Millisecond)
		c.Bridge.RetryMax = Duration(500 * time.Millisecond)
		if err := c.Bridge.Topics.UnmarshalText([]byte(topics)); err != nil {
			panic(err)
		}
		if edit != nil {
			edit(c)
		}
	}
}

// The three directions with prefixes, each QoS 1 message counted on the
// other side: out (from a local area and from the hub's own retained
// status), in, and both; a message bridged both ways crosses once, so
// each side's subscriber sees every message exactly once: none comes
// back (no loop), none is doubled.
func TestBridgeDirectionsAndPrefixes(t *testing.T) {
	up := newUpstream(t)
	up.start()
	const topics = "hub/status out 1 lmos/v1/ site/a/;" +
		"cmd/# in 1 up/ cloud/;" +
		"shared/# both 1 loc/ rem/;" +
		"tele/# out 1 dev/ site/a/"
	h := startHub(t, bridgeHub(up, topics, func(c *Config) {
		c.Bridge.LocalAccess.Publish = "operate" // anonymous clients operate by default
	}))
	local := h.MQTTAddr()
	waitFor(t, 10*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })

	// The hub's retained status crossed out, retained, mapped.
	status := startSub(t, up.addr(), "-q", "1", "-t", "site/a/hub/status", "-C", "1", "-W", "20")
	<-status.done
	if got := status.all(); len(got) != 1 || !strings.Contains(got[0], `"status":"online"`) {
		t.Fatalf("upstream site/a/hub/status = %q (stderr %s)", got, status.err.String())
	}

	remote := startSub(t, up.addr(), "-q", "1", "-t", "rem/#", "-t", "site/a/tele/#")
	remote.ready(up.addr(), "rem/shared/probe")
	near := startSub(t, local, "-q", "1", "-t", "loc/shared/#", "-t", "up/cmd/#")
	near.ready(local, "loc/shared/probe")
	// The probes crossed too (and are counted in the link's state).

	const n = 20
	for i := range n {
		mosqPub(t, local, "-q", "1", "-t", "loc/shared/out", "-m", fmt.Sprint("l", i))
		mosqPub(t, up.addr(), "-q", "1", "-t", "rem/shared/in", "-m", fmt.Sprint("r", i))
		mosqPub(t, up.addr(), "-q", "1", "-t", "cloud/cmd/x", "-m", fmt.Sprint("c", i))
		mosqPub(t, local, "-q", "1", "-t", "dev/tele/t1", "-m", fmt.Sprint("d", i))
	}
	// Sentinels last on each path: QoS 1 in order, so once they arrived
	// everything before them has.
	mosqPub(t, local, "-q", "1", "-t", "loc/shared/out", "-m", "end")
	mosqPub(t, up.addr(), "-q", "1", "-t", "rem/shared/in", "-m", "end")
	mosqPub(t, up.addr(), "-q", "1", "-t", "cloud/cmd/x", "-m", "end")
	mosqPub(t, local, "-q", "1", "-t", "dev/tele/t1", "-m", "end")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("upstream saw %q\nlocal saw %q\nstate %+v", remote.all(), near.all(), h.Main.Bridge.State())
		}
	})
	waitFor(t, 30*time.Second, "every sentinel across", func() bool {
		return remote.count("rem/shared/out end") == 1 && near.count("loc/shared/in end") == 1 &&
			near.count("up/cmd/x end") == 1 && remote.count("site/a/tele/t1 end") == 1
	})
	for i := range n {
		for _, c := range []struct {
			s    *lineSub
			line string
		}{
			{remote, fmt.Sprint("rem/shared/out l", i)}, // out through both
			{near, fmt.Sprint("loc/shared/out l", i)},   // its own publish, once: not echoed back
			{near, fmt.Sprint("loc/shared/in r", i)},    // in through both
			{remote, fmt.Sprint("rem/shared/in r", i)},  // the upstream's own, once
			{near, fmt.Sprint("up/cmd/x c", i)},         // in
			{remote, fmt.Sprint("site/a/tele/t1 d", i)}, // out
		} {
			if got := c.s.count(c.line); got != 1 {
				t.Errorf("%q seen %d times, want exactly once", c.line, got)
			}
		}
	}
	for _, l := range append(remote.all(), near.all()...) {
		if strings.HasPrefix(l, "rem/shared/in l") || strings.HasPrefix(l, "loc/shared/out r") ||
			strings.HasPrefix(l, "cloud/") || strings.HasPrefix(l, "dev/") {
			t.Errorf("a message looped or leaked: %q", l)
		}
	}
	states := h.Main.BridgeStates()
	if len(states) != 1 {
		t.Fatalf("BridgeStates() = %+v", states)
	}
	st := states[0]
	if st.Kind != "bridge" || st.Name != "upstream" || st.URL != up.url() || st.State != "connected" {
		t.Errorf("state %+v", st)
	}
	if st.Sent < 2*(n+1) || st.Received < 2*(n+1) || st.LastSuccess.IsZero() {
		t.Errorf("state counts %+v", st)
	}
	// The same link in /api/status and /metrics.
	var api struct {
		Links []struct {
			Kind, Name, State string
			Sent, Received    uint64
		}
	}
	h.getJSON("/api/status", http.StatusOK, &api)
	if len(api.Links) != 1 || api.Links[0].Kind != "bridge" || api.Links[0].Name != "upstream" ||
		api.Links[0].State != "connected" || api.Links[0].Sent < st.Sent || api.Links[0].Received < st.Received {
		t.Errorf("/api/status links %+v, state %+v", api.Links, st)
	}
	_, metrics := h.do(http.MethodGet, "/metrics", "", nil, "")
	if !strings.Contains(string(metrics), `lmos_link_up{kind="bridge",name="upstream"} 1`) {
		t.Errorf("/metrics has no connected bridge link")
	}
}

// dbSaved waits until mosquitto has written its persistence file after
// since (autosave_interval 1).
func (u *upstream) dbSaved(since time.Time) {
	u.t.Helper()
	waitFor(u.t, 20*time.Second, "mosquitto persisted its state", func() bool {
		fi, err := os.Stat(filepath.Join(u.dir, "mosquitto.db"))
		return err == nil && fi.ModTime().After(since)
	})
}

// stateTopic reads the bridge's retained state topic from the hub.
func stateTopic(t *testing.T, h *testHub) string {
	t.Helper()
	s := startSub(t, h.MQTTAddr(), "-t", "lmos/v1/hub/bridge/upstream/state", "-C", "1", "-W", "20")
	<-s.done
	got := s.all()
	if len(got) != 1 {
		t.Fatalf("state topic: %q (stderr %s)", got, s.err.String())
	}
	return strings.TrimPrefix(got[0], "lmos/v1/hub/bridge/upstream/state ")
}

// The upstream killed (SIGKILL) and started again on the same port with
// its persistence file: the messages published here meanwhile wait in
// the outbox and all reach the upstream subscriber's persistent session,
// each once. Then the upstream loses its state altogether: the bridge
// reconnects and subscribes again, so what comes in flows again.
func TestBridgeUpstreamRestart(t *testing.T) {
	up := newUpstream(t)
	up.start()
	h := startHub(t, bridgeHub(up, "data/# out 1 loc/ rem/;cmd/# in 1 up/ cloud/", func(c *Config) {
		c.Bridge.LocalAccess.Publish = "operate"
	}))
	local := h.MQTTAddr()
	waitFor(t, 10*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })
	if got := stateTopic(t, h); got != "1" {
		t.Fatalf("state topic %q while connected, want 1", got)
	}
	sub := startSub(t, up.addr(), "-c", "-i", "upsub", "-q", "1", "-t", "rem/data/#")
	sub.ready(up.addr(), "rem/data/probe")
	subscribed := time.Now()
	for i := range 10 {
		mosqPub(t, local, "-q", "1", "-t", "loc/data/x", "-m", fmt.Sprint("before", i))
	}
	waitFor(t, 20*time.Second, "the first messages across", func() bool { return sub.count("rem/data/x before9") == 1 })
	sub.stop() // its session, with the subscription, stays upstream
	up.dbSaved(subscribed)
	up.kill()

	waitFor(t, 20*time.Second, "bridge down", func() bool { return h.Main.Bridge.State().State != "connected" })
	if got := stateTopic(t, h); got != "0" {
		t.Fatalf("state topic %q while down, want 0", got)
	}
	const n = 30
	for i := range n {
		mosqPub(t, local, "-q", "1", "-t", "loc/data/x", "-m", fmt.Sprint("during", i))
	}
	waitFor(t, 20*time.Second, "the outbox holding every message", func() bool { return h.Main.Bridge.State().Outbox == n })
	if st := h.Main.Bridge.State(); st.LastError == "" || st.Errors == 0 {
		t.Errorf("no error reported while down: %+v", st)
	}

	up.start()
	waitFor(t, 30*time.Second, "outbox drained", func() bool {
		st := h.Main.Bridge.State()
		return st.State == "connected" && st.Outbox == 0
	})
	again := startSub(t, up.addr(), "-c", "-i", "upsub", "-q", "1", "-t", "rem/data/#")
	mosqPub(t, local, "-q", "1", "-t", "loc/data/x", "-m", "end")
	waitFor(t, 30*time.Second, "the queued messages upstream", func() bool { return again.count("rem/data/x end") == 1 })
	for i := range n {
		if got := again.count(fmt.Sprint("rem/data/x during", i)); got != 1 {
			t.Errorf("queued message %d arrived %d times, want once (upstream saw %q)", i, got, again.all())
		}
	}

	// An upstream that lost every session: the bridge subscribes again.
	up.stop()
	if err := os.Remove(filepath.Join(up.dir, "mosquitto.db")); err != nil {
		t.Fatal(err)
	}
	up.start()
	near := startSub(t, local, "-q", "1", "-t", "up/cmd/#")
	waitFor(t, 30*time.Second, "incoming messages after the upstream lost its state", func() bool {
		mosqPub(t, up.addr(), "-q", "1", "-t", "cloud/cmd/z", "-m", "after")
		time.Sleep(100 * time.Millisecond)
		return near.count("up/cmd/z after") > 0
	})
}

// sendToFrozen freezes the upstream (SIGSTOP) and publishes n QoS 1
// messages f0…f{n-1} at h on loc/data/x, waiting until the bridge has
// sent them all and holds every one unacknowledged.
func sendToFrozen(t *testing.T, up *upstream, h *testHub, n int) {
	t.Helper()
	up.mu.Lock()
	frozen := up.cmd.Process
	up.mu.Unlock()
	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		mosqPub(t, h.MQTTAddr(), "-q", "1", "-t", "loc/data/x", "-m", fmt.Sprint("f", i))
	}
	waitFor(t, 20*time.Second, "every message sent, none acknowledged", func() bool {
		st := h.Main.Bridge.State()
		return st.Sent == uint64(n) && st.Outbox == n
	})
}

// QoS 1 messages the bridge sent but the upstream never acknowledged (it
// was frozen with SIGSTOP, then killed) are sent again when the upstream
// comes back without the bridge's session (its persistence file from
// before the bridge connected): the outbox keeps each message until its
// PUBACK, so none is lost with the session, and none arrives twice.
func TestBridgeInFlightSurvivesLostSession(t *testing.T) {
	up := newUpstream(t)
	up.start()
	sub := startSub(t, up.addr(), "-c", "-i", "lostsub", "-q", "1", "-t", "rem/data/#")
	sub.ready(up.addr(), "rem/data/probe")
	sub.stop()
	up.stop() // SIGTERM: saved with the subscriber's session, none of the bridge
	db, err := os.ReadFile(filepath.Join(up.dir, "mosquitto.db"))
	if err != nil {
		t.Fatal(err)
	}
	up.start()
	h := startHub(t, bridgeHub(up, "data/# out 1 loc/ rem/", func(c *Config) { c.Bridge.LocalAccess.Publish = "operate" }))
	waitFor(t, 20*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })

	const n = 10
	sendToFrozen(t, up, h, n)
	up.kill()
	if err := os.WriteFile(filepath.Join(up.dir, "mosquitto.db"), db, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(up.dir, "mosquitto.db"), 0o666); err != nil {
		t.Fatal(err)
	}
	up.start()
	waitFor(t, 30*time.Second, "outbox drained", func() bool {
		st := h.Main.Bridge.State()
		return st.State == "connected" && st.Outbox == 0
	})
	again := startSub(t, up.addr(), "-c", "-i", "lostsub", "-q", "1", "-t", "rem/data/#")
	mosqPub(t, h.MQTTAddr(), "-q", "1", "-t", "loc/data/x", "-m", "end")
	waitFor(t, 30*time.Second, "the sentinel upstream", func() bool { return again.count("rem/data/x end") == 1 })
	for i := range n {
		if got := again.count(fmt.Sprint("rem/data/x f", i)); got != 1 {
			t.Errorf("f%d arrived %d times, want once (upstream saw %q)", i, got, again.all())
		}
	}
}

// QoS 1 messages the bridge sent to a frozen upstream (SIGSTOP) that
// never acknowledged them survive a hub restart: the MQTT session keeps
// them in memory only, the outbox on disk, and the next run sends them
// again, in order, once the upstream (killed, started again) is back.
func TestBridgeInFlightSurvivesHubRestart(t *testing.T) {
	up := newUpstream(t)
	up.start()
	sub := startSub(t, up.addr(), "-c", "-i", "flightsub", "-q", "1", "-t", "rem/data/#")
	sub.ready(up.addr(), "rem/data/probe")
	sub.stop()
	dir := t.TempDir()
	edit := bridgeHub(up, "data/# out 1 loc/ rem/", func(c *Config) { c.Bridge.LocalAccess.Publish = "operate" })
	h := startHubIn(t, dir, edit)
	waitFor(t, 20*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })
	subscribed := time.Now()
	up.dbSaved(subscribed)

	const n = 10
	sendToFrozen(t, up, h, n)
	h.Close()
	up.kill()
	up.start()
	h2 := startHubIn(t, dir, edit)
	waitFor(t, 30*time.Second, "outbox drained", func() bool {
		st := h2.Main.Bridge.State()
		return st.State == "connected" && st.Outbox == 0
	})
	again := startSub(t, up.addr(), "-c", "-i", "flightsub", "-q", "1", "-t", "rem/data/#")
	mosqPub(t, h2.MQTTAddr(), "-q", "1", "-t", "loc/data/x", "-m", "end")
	waitFor(t, 30*time.Second, "the sentinel upstream", func() bool { return again.count("rem/data/x end") == 1 })
	var got []string
	for _, l := range again.all() {
		if strings.HasPrefix(l, "rem/data/x f") {
			got = append(got, strings.TrimPrefix(l, "rem/data/x "))
		}
	}
	if want := "f0 f1 f2 f3 f4 f5 f6 f7 f8 f9"; strings.Join(got, " ") != want {
		t.Errorf("upstream got %q, want %s once each, in order", got, want)
	}
}

// The hub restarted while the uplink is down: the outbox is on disk
// (dataDir/bridge-queue) and the next run sends all of it, in order.
func TestBridgeOutboxSurvivesHubRestart(t *testing.T) {
	up := newUpstream(t) // not started: the uplink is down
	dir := t.TempDir()
	edit := bridgeHub(up, "data/# out 1 loc/ rem/", func(c *Config) { c.Bridge.LocalAccess.Publish = "operate" })
	h := startHubIn(t, dir, edit)
	const n = 25
	for i := range n {
		mosqPub(t, h.MQTTAddr(), "-q", "1", "-t", "loc/data/x", "-m", fmt.Sprint("m", i))
	}
	waitFor(t, 20*time.Second, "the outbox holding every message", func() bool { return h.Main.Bridge.State().Outbox == n })
	if st := h.Main.Bridge.State(); st.State == "connected" || st.Sent != 0 || st.Lag <= 0 {
		t.Fatalf("state with the uplink down: %+v", st)
	}
	h.Close()
	// An append-only log: one segment and the marker, not a file per message.
	files, _ := filepath.Glob(filepath.Join(dir, "bridge-queue", "upstream", "queue", "*"))
	segs, _ := filepath.Glob(filepath.Join(dir, "bridge-queue", "upstream", "queue", "*.seg"))
	if len(segs) != 1 || len(files) != 2 {
		t.Fatalf("queue files on disk after the hub stopped: %v, want one segment and the marker", files)
	}

	up.start()
	sub := startSub(t, up.addr(), "-q", "1", "-t", "rem/data/#")
	sub.ready(up.addr(), "rem/data/probe")
	h2 := startHubIn(t, dir, edit)
	waitFor(t, 30*time.Second, "every queued message upstream", func() bool { return sub.count(fmt.Sprint("rem/data/x m", n-1)) == 1 })
	var got []string
	for _, l := range sub.all() {
		if strings.HasPrefix(l, "rem/data/x ") {
			got = append(got, strings.TrimPrefix(l, "rem/data/x "))
		}
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprint("m", i))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("upstream got %q, want %q in order", got, want)
	}
	// The outbox holds each message until the upstream's PUBACK.
	waitFor(t, 20*time.Second, "every message acknowledged upstream", func() bool { return h2.Main.Bridge.State().Outbox == 0 })
	if st := h2.Main.Bridge.State(); st.Sent != n || st.Outbox != 0 || st.Lag != 0 {
		t.Errorf("state after the replay: %+v", st)
	}
}

// subRefused runs mosquitto_sub with args and returns its exit code and
// stderr: a SUBSCRIBE the hub refuses ends it.
func subRefused(t *testing.T, addr string, args ...string) (int, string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mosquittoTool(t, "mosquitto_sub"), append([]string{"-h", host, "-p", port, "-V", "5", "-W", "5"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// Who may use the local side of bridged topics (PROTOCOL §4.4): reading
// follows events (access.anonymous none: anonymous clients are refused,
// tokens read), a topic can ask for an authenticated reader, publishing
// is nobody's but the bridge's unless the configuration says so, and no
// filter reaches beyond the bridged areas. Each refusal is the strict
// client's error, and nothing refused is delivered on either side.
func TestBridgeLocalAccess(t *testing.T) {
	up := newUpstream(t)
	up.start()
	h := startHub(t, bridgeHub(up, "cmd/# in 1 up/ cloud/;shared/# both 1 loc/ rem/", func(c *Config) {
		c.Access.Anonymous = "none"
		c.Bridge.Topics[1].Subscribe = "authenticated"
		c.Bridge.Topics[1].Publish = "authenticated"
	}))
	local := h.MQTTAddr()
	waitFor(t, 10*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })
	operate, _ := createToken(t, h, "operate", "")
	read, _ := createToken(t, h, "read", "")
	asToken := func(secret string) []string { return []string{"-u", "token", "-P", secret} }

	// Refused subscriptions: SUBACK 0x87, mosquitto_sub says so and gives
	// up at once (mosquitto_sub 2.0.11 exits 0 then; -W 5 would exit 27).
	for _, c := range []struct {
		who  string
		args []string
	}{
		{"anonymous on an in topic", []string{"-t", "up/cmd/#"}},
		{"a read token where authenticated readers are asked", append(asToken(read), "-t", "loc/shared/#")},
		{"an operate token beyond the area", append(asToken(operate), "-t", "up/#")},
		{"an operate token with a wildcard first level", append(asToken(operate), "-t", "+/cmd/#")},
		{"an operate token outside every area", append(asToken(operate), "-t", "elsewhere/#")},
	} {
		code, out := subRefused(t, local, c.args...)
		if code == 27 || !strings.Contains(out, "All subscription requests were denied") {
			t.Errorf("%s: mosquitto_sub exited %d: %s", c.who, code, out)
		}
	}
	// Allowed readers: a read token on the in topic, an operate token on
	// the authenticated one.
	reader := startSub(t, local, append(asToken(read), "-q", "1", "-t", "up/cmd/#")...)
	both := startSub(t, local, append(asToken(operate), "-q", "1", "-t", "loc/shared/#")...)
	remote := startSub(t, up.addr(), "-q", "1", "-t", "rem/shared/#", "-t", "cloud/cmd/#")
	remote.ready(up.addr(), "cloud/cmd/probe")
	waitFor(t, 20*time.Second, "readers subscribed", func() bool {
		mosqPub(t, up.addr(), "-q", "1", "-t", "cloud/cmd/probe", "-m", "p")
		mosqPub(t, up.addr(), "-q", "1", "-t", "rem/shared/probe", "-m", "p")
		time.Sleep(100 * time.Millisecond)
		return reader.count("up/cmd/probe p") > 0 && both.count("loc/shared/probe p") > 0
	})

	// Refused publishes: PUBACK 0x87 (mosquitto_pub says Not authorized).
	for _, c := range []struct {
		who  string
		args []string
	}{
		{"an operate token on an in topic (publish: none)", append(asToken(operate), "-q", "1", "-t", "up/cmd/x", "-m", "refused")},
		{"a read token on the both topic (publish: authenticated)", append(asToken(read), "-q", "1", "-t", "loc/shared/x", "-m", "refused")},
		{"an operate token outside every area", append(asToken(operate), "-q", "1", "-t", "elsewhere/x", "-m", "refused")},
	} {
		out, err := mosqPubErr(t, local, c.args...)
		if !strings.Contains(out, "Not authorized") {
			t.Errorf("%s: mosquitto_pub (%v) said %q, want Not authorized", c.who, err, out)
		}
	}
	// The operate token may publish on the both topic: it goes up; after
	// it, nothing refused arrived anywhere.
	mosqPub(t, local, append(asToken(operate), "-q", "1", "-t", "loc/shared/x", "-m", "allowed")...)
	waitFor(t, 20*time.Second, "the allowed publish upstream", func() bool { return remote.count("rem/shared/x allowed") == 1 })
	mosqPub(t, up.addr(), "-q", "1", "-t", "cloud/cmd/end", "-m", "end")
	waitFor(t, 20*time.Second, "the in sentinel", func() bool { return reader.count("up/cmd/end end") == 1 })
	for _, s := range []*lineSub{reader, both, remote} {
		for _, l := range s.all() {
			if strings.HasSuffix(l, " refused") {
				t.Errorf("a refused publish was delivered: %q", l)
			}
		}
	}
	if both.count("loc/shared/x allowed") != 1 {
		t.Errorf("the local reader saw %q", both.all())
	}
}

// With access.anonymous read, anonymous clients read the bridged topics
// (and still may not publish there).
func TestBridgeAnonymousRead(t *testing.T) {
	up := newUpstream(t)
	up.start()
	h := startHub(t, bridgeHub(up, "cmd/# in 1 up/ cloud/", func(c *Config) { c.Access.Anonymous = "read" }))
	waitFor(t, 10*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })
	sub := startSub(t, h.MQTTAddr(), "-q", "1", "-t", "up/cmd/#")
	waitFor(t, 20*time.Second, "an anonymous reader served", func() bool {
		mosqPub(t, up.addr(), "-q", "1", "-t", "cloud/cmd/a", "-m", "in")
		time.Sleep(100 * time.Millisecond)
		return sub.count("up/cmd/a in") > 0
	})
	if out, _ := mosqPubErr(t, h.MQTTAddr(), "-q", "1", "-t", "up/cmd/a", "-m", "refused"); !strings.Contains(out, "Not authorized") {
		t.Errorf("anonymous publish: %q, want Not authorized", out)
	}
	mosqPub(t, up.addr(), "-q", "1", "-t", "cloud/cmd/a", "-m", "end")
	waitFor(t, 20*time.Second, "the sentinel", func() bool { return sub.count("up/cmd/a end") == 1 })
	if sub.count("up/cmd/a refused") != 0 {
		t.Errorf("a refused publish was delivered: %q", sub.all())
	}
}

// A full outbox (bridge.maxQueued) drops what comes after, counting it
// and saying why; what it holds still goes up once the uplink is back.
func TestBridgeOutboxFull(t *testing.T) {
	up := newUpstream(t)
	// A persistent subscriber session upstream, then the upstream stops
	// (SIGTERM: its state saved) before the hub starts.
	up.start()
	sub := startSub(t, up.addr(), "-c", "-i", "fullsub", "-q", "1", "-t", "rem/data/#")
	sub.ready(up.addr(), "rem/data/probe")
	sub.stop()
	up.stop()
	h := startHub(t, bridgeHub(up, "data/# out 1 loc/ rem/", func(c *Config) {
		c.Bridge.LocalAccess.Publish = "operate"
		c.Bridge.MaxQueued = 5
	}))
	for i := range 8 {
		mosqPub(t, h.MQTTAddr(), "-q", "1", "-t", "loc/data/x", "-m", fmt.Sprint("m", i))
	}
	waitFor(t, 20*time.Second, "the outbox full and the drops counted", func() bool {
		st := h.Main.Bridge.State()
		return st.Outbox == 5 && strings.Contains(st.LastError, "message dropped: the queue holds bridge.maxQueued (5) messages")
	})
	up.start()
	waitFor(t, 30*time.Second, "outbox drained", func() bool {
		st := h.Main.Bridge.State()
		return st.State == "connected" && st.Outbox == 0
	})
	again := startSub(t, up.addr(), "-c", "-i", "fullsub", "-q", "1", "-t", "rem/data/#")
	mosqPub(t, h.MQTTAddr(), "-q", "1", "-t", "loc/data/x", "-m", "end")
	waitFor(t, 20*time.Second, "the sentinel upstream", func() bool { return again.count("rem/data/x end") == 1 })
	for i := range 8 {
		want := 1
		if i >= 5 {
			want = 0 // dropped
		}
		if got := again.count(fmt.Sprint("rem/data/x m", i)); got != want {
			t.Errorf("m%d arrived %d times, want %d (upstream saw %q)", i, got, want, again.all())
		}
	}
}

// A retained message that came in on a topic bridged both ways stays the
// bridge's own across a hub restart: the restarted bridge, handed the
// retained messages as it subscribes here again, does not send it back
// up (no loop through the retained store).
func TestBridgeRetainedNotSentBackAfterRestart(t *testing.T) {
	up := newUpstream(t)
	up.start()
	dir := t.TempDir()
	edit := bridgeHub(up, "shared/# both 1 loc/ rem/", func(c *Config) { c.Bridge.LocalAccess.Publish = "operate" })
	h := startHubIn(t, dir, edit)
	waitFor(t, 10*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })
	remote := startSub(t, up.addr(), "-q", "1", "-t", "rem/shared/#")
	remote.ready(up.addr(), "rem/shared/probe")
	mosqPub(t, up.addr(), "-q", "1", "-r", "-t", "rem/shared/kept", "-m", "retained")
	local := startSub(t, h.MQTTAddr(), "-q", "1", "-t", "loc/shared/kept")
	waitFor(t, 20*time.Second, "the retained message here", func() bool { return local.count("loc/shared/kept retained") == 1 })
	local.stop()
	h.Close()

	h2 := startHubIn(t, dir, edit)
	waitFor(t, 10*time.Second, "bridge connected again", func() bool { return h2.Main.Bridge.State().State == "connected" })
	again := startSub(t, h2.MQTTAddr(), "-q", "1", "-t", "loc/shared/kept", "-C", "1", "-W", "20")
	<-again.done
	if got := again.all(); len(got) != 1 || got[0] != "loc/shared/kept retained" {
		t.Fatalf("retained here after the restart: %q", got)
	}
	mosqPub(t, h2.MQTTAddr(), "-q", "1", "-t", "loc/shared/end", "-m", "end")
	waitFor(t, 20*time.Second, "the sentinel upstream", func() bool { return remote.count("rem/shared/end end") == 1 })
	if got := remote.count("rem/shared/kept retained"); got != 1 {
		t.Errorf("upstream saw its retained message %d times, want once (it came back: %q)", got, remote.all())
	}
}

// QoS 0 crosses both ways while connected, at QoS 0 (mosquitto_sub -F
// prints the QoS it received); while the uplink is down it is dropped,
// counted as the link's error, and never queued.
func TestBridgeQoS0(t *testing.T) {
	up := newUpstream(t)
	up.start()
	h := startHub(t, bridgeHub(up, "q/# both 1 loc/ rem/", func(c *Config) {
		c.Bridge.LocalAccess.Publish = "operate"
		// After the upstream goes, one attempt at once, the next no
		// sooner than 30 s: its error does not hide the drop below.
		c.Bridge.RetryMin, c.Bridge.RetryMax = Duration(30*time.Second), Duration(time.Minute)
	}))
	waitFor(t, 10*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })
	remote := startSub(t, up.addr(), "-q", "1", "-t", "rem/q/#", "-F", "%t %q %p")
	near := startSub(t, h.MQTTAddr(), "-q", "1", "-t", "loc/q/#", "-F", "%t %q %p")
	waitFor(t, 20*time.Second, "QoS 0 out", func() bool {
		mosqPub(t, h.MQTTAddr(), "-q", "0", "-t", "loc/q/out", "-m", "zero")
		time.Sleep(50 * time.Millisecond)
		return remote.count("rem/q/out 0 zero") > 0
	})
	waitFor(t, 20*time.Second, "QoS 0 in", func() bool {
		mosqPub(t, up.addr(), "-q", "0", "-t", "rem/q/in", "-m", "zero")
		time.Sleep(50 * time.Millisecond)
		return near.count("loc/q/in 0 zero") > 0
	})
	up.kill()
	waitFor(t, 20*time.Second, "bridge down and its reconnection refused", func() bool {
		st := h.Main.Bridge.State()
		return st.State != "connected" && strings.Contains(st.LastError, "cannot connect")
	})
	before := h.Main.Bridge.State().Errors
	mosqPub(t, h.MQTTAddr(), "-q", "0", "-t", "loc/q/out", "-m", "lost")
	waitFor(t, 20*time.Second, "the drop counted", func() bool {
		st := h.Main.Bridge.State()
		return st.Errors > before && strings.Contains(st.LastError, "message dropped")
	})
	if st := h.Main.Bridge.State(); st.Outbox != 0 {
		t.Errorf("a QoS 0 message was queued: %+v", st)
	}
}
