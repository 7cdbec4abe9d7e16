package packaging

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// rootfs is a Debian bookworm tree with systemd, made once by debootstrap
// from Debian's mirror into .cache/ (gitignored) and reused by later runs.
func rootfs(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), ".cache", "nspawn-bookworm")
	if _, err := os.Stat(filepath.Join(dir, "usr", "lib", "systemd", "systemd")); err == nil {
		return dir
	}
	deb := need(t, "debootstrap", "debootstrap")
	tmp := dir + ".tmp-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	cmd := exec.Command(deb, "--variant=minbase", "--include=systemd,systemd-sysv,dbus", "bookworm", tmp, "http://deb.debian.org/debian")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap: %v\n%s", err, tail(out))
	}
	// Another run may have made it meanwhile: either tree will do.
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "usr", "lib", "systemd", "systemd")); serr != nil {
			t.Fatalf("cannot keep the tree: %v", err)
		}
	}
	return dir
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// container is a booted systemd in systemd-nspawn on an ephemeral copy of
// rootfs, in the network namespace ns.
type container struct {
	t    *testing.T
	init int // the container's PID 1, as the host sees it
	out  *bytes.Buffer
}

func bootContainer(t *testing.T, root, ns, deb string) *container {
	t.Helper()
	nspawn := need(t, "systemd-nspawn", "systemd-container")
	// --keep-unit and --register=no: no systemd runs on the host to make
	// a scope or register the machine.
	cmd := exec.Command(nspawn, "-q", "-D", root, "--ephemeral", "-b", "--register=no", "--keep-unit",
		"--network-namespace-path=/run/netns/"+ns, "--bind-ro="+deb+":/root/lmos-hub.deb")
	cmd.Stdin = nil
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	c := &container{t: t, out: out}
	// nspawn forks a process of its own, whose child is the container's
	// systemd: the init is looked up until it runs.
	testwait.Eventually(t, 2*time.Minute, "the container booted", func() bool {
		pid := containerInit(cmd.Process.Pid)
		if pid == 0 {
			return false
		}
		c.init = pid
		// multi-user.target reached (the state of the whole system may
		// stay "starting" for a unit of the image that does not matter).
		o, _ := c.exec("systemctl", "is-active", "multi-user.target")
		return strings.TrimSpace(o) == "active"
	})
	return c
}

// containerInit is the container's PID 1 as the host sees it: the first
// process named systemd below nspawn's pid (0 while there is none).
func containerInit(pid int) int {
	level := []int{pid}
	for depth := 0; depth < 3 && len(level) > 0; depth++ {
		var next []int
		for _, p := range level {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p, p))
			for _, f := range strings.Fields(string(b)) {
				n, _ := strconv.Atoi(f)
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", n)); strings.TrimSpace(string(comm)) == "systemd" {
					return n
				}
				next = append(next, n)
			}
		}
		level = next
	}
	return 0
}

// exec runs argv inside the container (its namespaces, PID 1's root).
func (c *container) exec(argv ...string) (string, error) {
	args := append([]string{"-t", strconv.Itoa(c.init), "-m", "-u", "-i", "-n", "-p", "--"}, argv...)
	out, err := exec.Command("nsenter", args...).CombinedOutput()
	return string(out), err
}

func (c *container) must(argv ...string) string {
	c.t.Helper()
	out, err := c.exec(argv...)
	if err != nil {
		c.t.Fatalf("in the container: %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return out
}

// TestUnitUnderSystemd: the amd64 .deb installed into a booted Debian with
// systemd (systemd-nspawn, its own network namespace on a LAN of this
// test's) starts the hardened unit; it becomes active only once the hub
// said READY=1; from another host of the LAN the hub answers HTTP, is found
// over mDNS (multicast out of the sandbox) and lists its interface
// (netlink); a stop is clean. It proves what systemd-analyze alone cannot:
// that the sandbox lets the hub do its work.
func TestUnitUnderSystemd(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("skipping: needs root (systemd-nspawn, network namespaces)")
	}
	deb := debFile(debs(t), "amd64")
	root := rootfs(t)
	lan := netnstest.New(t, []string{"hub", "a1"})
	c := bootContainer(t, root, lan.NS("hub"), deb)

	out := c.must("dpkg", "-i", "/root/lmos-hub.deb")
	if !strings.Contains(out, "http://") {
		t.Errorf("the install printed no dashboard address:\n%s", out)
	}
	testwait.Eventually(t, 2*time.Minute, "lmos-hub.service active", func() bool {
		o, _ := c.exec("systemctl", "is-active", "lmos-hub")
		return strings.TrimSpace(o) == "active"
	})
	show := c.must("systemctl", "show", "lmos-hub", "-p", "Type,NRestarts,MainPID,StatusText")
	if !strings.Contains(show, "Type=notify") || !strings.Contains(show, "NRestarts=0") || !strings.Contains(show, "StatusText=serving on") {
		t.Errorf("the unit as systemd sees it:\n%s", show)
	}

	hub := "http://" + lan.Addr("hub") + ":8080"
	client := lan.HTTPClient("a1")
	var st struct {
		MDNS struct {
			State      string
			Interfaces []string
		}
	}
	testwait.Eventually(t, time.Minute, "the hub advertising over mDNS from inside the sandbox", func() bool {
		resp, err := client.Get(hub + "/api/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&st) == nil && st.MDNS.State == "advertising"
	})
	if len(st.MDNS.Interfaces) == 0 || st.MDNS.Interfaces[0] != "eth0" {
		t.Errorf("mDNS interfaces %v, want eth0 (read over netlink)", st.MDNS.Interfaces)
	}
	if resp, err := client.Get(hub + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz from the LAN: %v %v", resp, err)
	}
	// Another host finds it over mDNS: its announcements left the sandbox.
	bin := filepath.Join(built(t), "lmos-hub-linux-amd64")
	found := false
	for try := 0; try < 3 && !found; try++ {
		o, _ := lan.Command("a1", bin, "discover", "--timeout", "3s", "--interfaces", "eth0").CombinedOutput()
		found = strings.Contains(string(o), lan.Addr("hub"))
		if !found && try == 2 {
			t.Errorf("discover on the LAN did not find the hub:\n%s", o)
		}
	}

	c.must("systemctl", "stop", "lmos-hub")
	state := c.must("systemctl", "show", "lmos-hub", "-p", "ActiveState", "-p", "Result")
	if !strings.Contains(state, "ActiveState=inactive") || !strings.Contains(state, "Result=success") {
		t.Errorf("after stop:\n%s\nwant ActiveState=inactive and Result=success", state)
	}
	if t.Failed() {
		log, _ := c.exec("journalctl", "-u", "lmos-hub", "--no-pager", "-n", "80")
		t.Logf("journal of lmos-hub:\n%s\ncontainer console:\n%s", log, tail(c.out.Bytes()))
	}
}
