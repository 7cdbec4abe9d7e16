// Package netnstest builds small LANs out of Linux network namespaces for
// tests that need real multicast (mDNS) without touching the machine's own
// interfaces: every node is a namespace whose eth0 (a veth) is plugged into
// a bridge in a switch namespace, with a link-local 169.254.x.y address.
// Processes in the nodes are the test binary re-executed (LAN.Helper, and
// StartChild on the child's side). It needs root; Require skips without
// it unless CI is set.
package netnstest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// prefix starts every namespace this package creates, so stale ones from
// killed test runs can be found and deleted.
const prefix = "lmosmd"

// Require skips the test unless it can create network namespaces: as root
// with the ip command. With CI set it fails instead of skipping.
func Require(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "the ip command (iproute2) is missing"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("network namespace tests need root and iproute2 (%s); CI must run them", why)
	}
	t.Skipf("skipping: network namespace tests need root and iproute2 (%s); run as root or set CI to make this fail", why)
}

var counter atomic.Int64

// LAN is a set of namespaces on one bridge.
type LAN struct {
	t     testing.TB
	id    string
	sw    string
	nodes map[string]int
	net   int // third octet of the addresses
	// routed holds the address of each node added by AddRouted.
	routed map[string]string
}

// New creates the nodes (names are short, e.g. "hub", "a1"). Each gets
// eth0 with 169.254.<n>.<i>/16 where i is its position from 1; without
// IPv6 when noIPv6 lists it. Everything is deleted at cleanup.
func New(t testing.TB, nodes []string, noIPv6 ...string) *LAN {
	t.Helper()
	Require(t)
	deleteStale()
	n := counter.Add(1)
	l := &LAN{t: t, id: fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), n), nodes: map[string]int{}, routed: map[string]string{}, net: 10 + int(n%200)}
	l.sw = l.id + "-sw"
	t.Cleanup(l.Close)
	l.ip("netns", "add", l.sw)
	l.ip("-n", l.sw, "link", "add", "br0", "type", "bridge")
	// Forward multicast at once: no snooping, no learning delay.
	l.ip("-n", l.sw, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0", "forward_delay", "0")
	l.ip("-n", l.sw, "link", "set", "br0", "up")
	for i, n := range nodes {
		ns := l.NS(n)
		l.nodes[n] = i + 1
		l.ip("netns", "add", ns)
		l.ip("-n", ns, "link", "set", "lo", "up")
		port := fmt.Sprintf("p%d", i+1)
		l.ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", l.sw)
		l.ip("-n", l.sw, "link", "set", port, "master", "br0")
		l.ip("-n", l.sw, "link", "set", port, "up")
		if contains(noIPv6, n) {
			l.run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
		} else {
			// No duplicate address detection: link-local IPv6 is usable at once.
			// eth0 exists already: it took the default before it changed.
			l.run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0",
				"net.ipv6.conf.eth0.accept_dad=0")
		}
		l.ip("-n", ns, "addr", "add", l.Addr(n)+"/16", "dev", "eth0")
		l.ip("-n", ns, "link", "set", "eth0", "up")
	}
	return l
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// NS is the namespace name of node.
func (l *LAN) NS(node string) string { return l.id + "-" + node }

// Addr is the IPv4 address of node.
func (l *LAN) Addr(node string) string {
	if a, ok := l.routed[node]; ok {
		return a
	}
	return fmt.Sprintf("169.254.%d.%d", l.net, l.nodes[node])
}

// AddRouted adds node off the LAN: on its own link (10.<n>.0.2/24, IPv4
// only) to router, a LAN node that forwards between the two; the LAN
// nodes listed in routes get a route to it through router. Its packets
// reach the LAN only routed, from an address in no LAN subnet.
func (l *LAN) AddRouted(node, router string, routes ...string) {
	l.t.Helper()
	ns, rns := l.NS(node), l.NS(router)
	l.nodes[node] = len(l.nodes) + 1
	far := fmt.Sprintf("10.%d.0.", l.net)
	l.routed[node] = far + "2"
	l.ip("netns", "add", ns)
	l.ip("-n", ns, "link", "set", "lo", "up")
	l.run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	l.ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "r-"+node, "netns", rns)
	l.ip("-n", ns, "addr", "add", far+"2/24", "dev", "eth0")
	l.ip("-n", ns, "link", "set", "eth0", "up")
	l.ip("-n", ns, "route", "add", "default", "via", far+"1")
	l.ip("-n", rns, "addr", "add", far+"1/24", "dev", "r-"+node)
	l.ip("-n", rns, "link", "set", "r-"+node, "up")
	l.run("ip", "netns", "exec", rns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, n := range routes {
		l.ip("-n", l.NS(n), "route", "add", far+"0/24", "via", l.Addr(router))
	}
}

func (l *LAN) ip(args ...string) { l.t.Helper(); l.run("ip", args...) }

func (l *LAN) run(name string, args ...string) {
	l.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// Command runs argv inside node's namespace.
func (l *LAN) Command(node string, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", l.NS(node)}, argv...)...)
}

// Close deletes the namespaces (processes still inside keep them alive
// until they exit; tests stop theirs first).
func (l *LAN) Close() {
	for n := range l.nodes {
		_ = exec.Command("ip", "netns", "del", l.NS(n)).Run()
	}
	_ = exec.Command("ip", "netns", "del", l.sw).Run()
}

// deleteStale removes namespaces left by test processes that no longer run.
func deleteStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(strings.TrimPrefix(name, prefix), "%d-", &pid); err != nil {
			continue
		}
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = exec.Command("ip", "netns", "del", name).Run()
	}
}

// AddAddr adds the address cidr (say fd00:24::a/64) to node's eth0, an
// IPv6 one without duplicate address detection, so it is usable at once.
func (l *LAN) AddAddr(node, cidr string) {
	l.t.Helper()
	args := []string{"-n", l.NS(node), "addr", "add", cidr, "dev", "eth0"}
	if strings.Contains(cidr, ":") {
		args = append(args, "nodad")
	}
	l.ip(args...)
}

// DropIPv4 removes node's IPv4 address: it speaks IPv6 only (its
// link-local address and what AddAddr gave it).
func (l *LAN) DropIPv4(node string) {
	l.t.Helper()
	l.ip("-n", l.NS(node), "addr", "del", l.Addr(node)+"/16", "dev", "eth0")
}

// HTTPClient returns a client whose connections are opened inside node's
// namespace (Dialer).
func (l *LAN) HTTPClient(node string) *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: l.Dialer(node), DisableKeepAlives: true},
	}
}

// Dialer returns a dial function whose connections are opened inside
// node's namespace: each dial runs on an OS thread switched into it (and
// then discarded), and the socket stays in that namespace.
func (l *LAN) Dialer(node string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	path := "/var/run/netns/" + l.NS(node)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			// Never unlocked: the thread, now in another namespace, ends
			// with this goroutine.
			runtime.LockOSThread()
			f, err := os.Open(path)
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, fmt.Errorf("cannot enter namespace %s: %w", path, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}
