package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/grandcat/zeroconf"
	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// The tests here check the hub against mDNS senders as they are in the
// world: stacks that send with IP TTL 1 (github.com/grandcat/zeroconf),
// plain DNS resolvers asking port 5353 (dig), hosts routed in from
// another network (to be ignored), and avahi-daemon on the same host.

// serveTD serves td at /td on addr in the current namespace.
func serveTD(addr string, td []byte) {
	mux := http.NewServeMux()
	mux.HandleFunc("/td", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/td+json")
		w.Write(td)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go http.Serve(ln, mux)
}

// runZeroconfAgent is the "zeroconf" child (args: id|title|port): a Thing
// announced by github.com/grandcat/zeroconf v1.0.0, the library the design
// card names, which sends with IP TTL 1. SIGTERM: Shutdown (its goodbye).
func runZeroconfAgent(c *netnstest.Child, args []string) {
	port, _ := strconv.Atoi(args[2])
	serveTD(fmt.Sprintf(":%d", port), hubtest.BareTD(args[0], args[1]))
	eth0, err := net.InterfaceByName("eth0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// zeroconf announces twice, a second apart, from a goroutine its
	// Shutdown does not stop: a goodbye sent before the second went out is
	// followed by it, and the hub rightly takes that answer as a refresh
	// (RFC 6762 §10.1). So "registered" is said once both were seen on
	// the link (multicast loops back to this host).
	heard, err := net.ListenMulticastUDP("udp4", eth0, &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251), Port: 5353})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start := time.Now()
	srv, err := zeroconf.Register(args[1], "_wot._tcp", "local.", port, []string{"td=/td", "type=Thing"}, []net.Interface{*eth0})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buf := make([]byte, 9000)
	for announced := 0; announced < 2; {
		n, _, err := heard.ReadFromUDP(buf)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var m dns.Msg
		if m.Unpack(buf[:n]) == nil && m.Response {
			for _, rr := range m.Answer {
				if ptr, ok := rr.(*dns.PTR); ok && strings.HasPrefix(ptr.Ptr, strings.ReplaceAll(args[1], " ", "\\ ")+".") {
					announced++
					break
				}
			}
		}
	}
	heard.Close()
	fmt.Println("registered", start.UnixNano())
	c.Serve(nil, func() {
		t := time.Now()
		srv.Shutdown()
		fmt.Println("goodbye", t.UnixNano())
	})
}

// runUnicastAnnounce is the "unicast-announce" child (args:
// id|title|port|destination): it serves a TD and sends one mDNS response
// announcing it, from port 5353 with IP TTL 255, by unicast to the
// destination's port 5353, then waits to be stopped.
func runUnicastAnnounce(args []string) {
	port, _ := strconv.Atoi(args[2])
	serveTD(fmt.Sprintf(":%d", port), hubtest.BareTD(args[0], args[1]))
	eth0, err := net.InterfaceByName("eth0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addrs, _ := eth0.Addrs()
	var own net.IP
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			own = ipn.IP.To4()
		}
	}
	host := strings.ToLower(strings.ReplaceAll(args[1], " ", "-")) + ".local."
	inst := strings.ReplaceAll(args[1], " ", `\032`) + "._wot._tcp.local."
	m := new(dns.Msg)
	m.Response, m.Authoritative = true, true
	hdr := func(name string, t uint16) dns.RR_Header {
		return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: 120}
	}
	m.Answer = []dns.RR{
		&dns.PTR{Hdr: hdr("_wot._tcp.local.", dns.TypePTR), Ptr: inst},
		&dns.SRV{Hdr: hdr(inst, dns.TypeSRV), Port: uint16(port), Target: host},
		&dns.TXT{Hdr: hdr(inst, dns.TypeTXT), Txt: []string{"td=/td", "type=Thing"}},
		&dns.A{Hdr: hdr(host, dns.TypeA), A: own},
	}
	b, err := m.Pack()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: 5353})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = ipv4.NewConn(c).SetTTL(255)
	if _, err := c.WriteToUDP(b, &net.UDPAddr{IP: net.ParseIP(args[3]), Port: 5353}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("sent", own)
	select {}
}

// TestMDNSZeroconfInterop: a Thing announced with grandcat/zeroconf
// v1.0.0 (IP TTL 1) registers with the hub and goes offline on its
// goodbye. (zeroconf's resolver is not used: on Linux its sockets, bound
// to 224.0.0.0:5353 and [ff02::]:5353, receive no mDNS packet at all; the
// hub's answer to a TTL 1 query is checked with npm multicast-dns.)
func TestMDNSZeroconfInterop(t *testing.T) {
	lan := netnstest.New(t, []string{"hub", "zc"})
	_, base := mdnsHub(t, lan, "hub", "Zeroconf Test Hub")
	c := lan.HTTPClient("hub")
	zc := lan.Helper("zc", "TestMDNSChild", childEnv+"=zeroconf", "LMOS_MDNS_ARGS=urn:test:zeroconf|Zeroconf Lamp|8003")
	zc.WaitContains(10*time.Second, "registered")
	testwait.Eventually(t, 10*time.Second, "the zeroconf Thing registered online", func() bool {
		s := getThing(t, c, base, "urn:test:zeroconf")
		return s.status == 200 && s.Origin.Source == "mdns" && s.Presence.Status == "online" && s.Title == "Zeroconf Lamp"
	})

	zc.Signal(syscall.SIGTERM)
	zc.WaitContains(5*time.Second, "goodbye")
	testwait.Eventually(t, 10*time.Second, "the zeroconf Thing offline", func() bool {
		return getThing(t, c, base, "urn:test:zeroconf").Presence.Status == "offline"
	})
}

// digLines runs dig in node and returns its output lines; dig's exit
// status is returned, not judged.
func digLines(t *testing.T, lan *netnstest.LAN, node string, args ...string) ([]string, error) {
	t.Helper()
	out, err := lan.Command(node, append([]string{"dig"}, args...)...).CombinedOutput()
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines, err
}

func requireDig(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dig"); err != nil {
		if os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("dig not installed (scripts/test-deps.sh installs bind9-dnsutils): %v", err)
		}
		t.Skip("dig not installed; `make test` installs it")
	}
}

// checkLegacyAnswer fails unless line is the answer dig prints for the
// hub's PTR: its instance, TTL at most 10 s (RFC 6762 §6.7).
func checkLegacyAnswer(t *testing.T, line, instance string) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "_wot._tcp.local." || f[2] != "IN" || f[3] != "PTR" || f[4] != instance+"._wot._tcp.local." {
		t.Fatalf("dig answered %q, want the PTR of %s", line, instance)
	}
	if ttl, err := strconv.Atoi(f[1]); err != nil || ttl > 10 || ttl <= 0 {
		t.Fatalf("legacy unicast answer with TTL %s: %q", f[1], line)
	}
}

// TestMDNSLegacyUnicast: 100 queries from dig (a plain DNS resolver: its
// own source port, IP TTL 64) straight to the hub's port 5353 all get
// their answer, whichever of the hub's users of the port the kernel hands
// them to.
func TestMDNSLegacyUnicast(t *testing.T) {
	requireDig(t)
	lan := netnstest.New(t, []string{"hub", "q"})
	hub, _ := mdnsHub(t, lan, "hub", "Legacy Hub")
	// The responder answers once its names are probed.
	hub.WaitContains(10*time.Second, "mdns advertising")
	batch := filepath.Join(t.TempDir(), "queries")
	var q strings.Builder
	for range 100 {
		q.WriteString("_wot._tcp.local PTR\n")
	}
	if err := os.WriteFile(batch, []byte(q.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := digLines(t, lan, "q", "@"+lan.Addr("hub"), "-p", "5353", "+time=1", "+tries=1", "+noall", "+answer", "-f", batch)
	answered := 0
	for _, l := range lines {
		if strings.HasPrefix(l, ";") {
			continue // counted below: every unanswered query is a missing line
		}
		checkLegacyAnswer(t, l, `Legacy\032Hub`)
		answered++
	}
	if answered != 100 || err != nil {
		t.Fatalf("%d of 100 legacy unicast queries answered (dig: %v):\n%s", answered, err, strings.Join(lines, "\n"))
	}
}

// TestMDNSOnLinkBySource: a host routed in from another network (source
// address in none of the hub's subnets, IP TTL 254 after the router) gets
// no answer and cannot register a Thing; the router's own address on the
// hub's link gets both.
func TestMDNSOnLinkBySource(t *testing.T) {
	requireDig(t)
	lan := netnstest.New(t, []string{"hub", "near"}, "hub", "near")
	lan.AddRouted("far", "near", "hub")
	hub, base := mdnsHub(t, lan, "hub", "Link Hub")
	hub.WaitContains(10*time.Second, "mdns advertising")
	c := lan.HTTPClient("hub")
	// The route works: far reaches the hub's HTTP port.
	if out, err := lan.Command("far", "python3", "-c", "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=5)", "http://"+lan.Addr("hub")+":8080/healthz").CombinedOutput(); err != nil {
		t.Fatalf("far cannot reach the hub over the router: %v %s", err, out)
	}

	query := []string{"@" + lan.Addr("hub"), "-p", "5353", "+time=1", "+tries=1", "+noall", "+answer", "_wot._tcp.local", "PTR"}
	lines, err := digLines(t, lan, "far", query...)
	for _, l := range lines {
		if !strings.HasPrefix(l, ";") {
			t.Errorf("the hub answered a query from off the link: %q", l)
		}
	}
	if err == nil {
		t.Errorf("dig from off the link got a reply: %q", lines)
	}
	lines, err = digLines(t, lan, "near", query...)
	if err != nil || len(lines) != 1 {
		t.Fatalf("dig on the link: %v %q", err, lines)
	}
	checkLegacyAnswer(t, lines[0], `Link\032Hub`)

	// Announcements by unicast: the far one first, then the near one.
	far := lan.Helper("far", "TestMDNSChild", childEnv+"=unicast-announce", "LMOS_MDNS_ARGS=urn:test:far|Far Lamp|8004|"+lan.Addr("hub"))
	far.WaitContains(5*time.Second, "sent", lan.Addr("far"))
	near := lan.Helper("near", "TestMDNSChild", childEnv+"=unicast-announce", "LMOS_MDNS_ARGS=urn:test:near|Near Lamp|8004|"+lan.Addr("hub"))
	near.WaitContains(5*time.Second, "sent", lan.Addr("near"))
	testwait.Eventually(t, 10*time.Second, "the on-link Thing registered", func() bool {
		s := getThing(t, c, base, "urn:test:near")
		return s.status == 200 && s.Presence.Status == "online"
	})
	// The far one had as long and longer; give it a little more.
	time.Sleep(500 * time.Millisecond)
	if s := getThing(t, c, base, "urn:test:far"); s.status != http.StatusNotFound {
		t.Errorf("the Thing announced from off the link: status %d %+v, want 404", s.status, s)
	}
}

// TestMDNSAvahiSharedPortNonRoot: avahi-daemon (root) and the hub running
// as nobody share UDP 5353 in one namespace: SO_REUSEPORT alone would
// refuse sockets of another user, SO_REUSEADDR lets them share. Each sees
// the other: the hub registers the Thing Avahi publishes, avahi-browse
// resolves the hub's directory.
func TestMDNSAvahiSharedPortNonRoot(t *testing.T) {
	daemon := requireAvahi(t)
	lan := netnstest.New(t, []string{"host"})
	dbusEnv, _ := startAvahi(t, lan, "host", daemon, "urn:test:shared", "Shared Lamp")

	// The test binary, readable by nobody, and a data directory it owns.
	dir, err := os.MkdirTemp("", "lmos-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "lmos-hub.test")
	if err := copyFile(exe, bin); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "hub.yaml")
	if err := os.WriteFile(cfg, []byte("mdns:\n  interfaces: [eth0]\n  forgetAfter: 1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, bin, data} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := lan.Command("host", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^TestMDNSChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=run", "LMOS_MDNS_ARGS="+strings.Join([]string{"serve", "--config", cfg, "--data-dir", data,
		"--http-addr", "0.0.0.0:8080", "--mqtt-addr", "0.0.0.0:1883", "--admin-token", testToken, "--hub-name", "Nobody Hub"}, "|"))
	hub := lan.Start(cmd)
	c := lan.HTTPClient("host")
	base := "http://" + lan.Addr("host") + ":8080"
	testwait.Eventually(t, 10*time.Second, "the hub serving", func() bool {
		resp, err := c.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hub.Cmd.Process.Pid))
	if err != nil || !strings.Contains(string(status), "\nUid:\t65534\t65534\t65534\t65534\n") {
		t.Fatalf("the hub does not run as nobody: %v\n%s", err, status)
	}
	testwait.Eventually(t, 15*time.Second, "the Avahi Thing registered online", func() bool {
		s := getThing(t, c, base, "urn:test:shared")
		return s.status == 200 && s.Origin.Source == "mdns" && s.Presence.Status == "online"
	})
	out := avahiBrowse(t, lan, "host", dbusEnv, "_wot._tcp")
	want := ";" + lan.Addr("host") + `;8080;"scheme=http" "type=Directory" "td=/.well-known/wot"`
	found := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "=;eth0;IPv4;Nobody\\032Hub;_wot._tcp;local;") && strings.HasSuffix(line, want) {
			found = true
		}
	}
	if !found {
		t.Errorf("avahi-browse did not resolve the hub's directory:\n%s", out)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
