package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/percentile"
)

// runAgents is the "agents" child: n agents in one process (one mDNS
// responder and TD server each), started together.
func runAgents(n int, log *slog.Logger) {
	sc := bufio.NewScanner(os.Stdin)
	var ads []*agent.Advertisement
	for sc.Scan() {
		switch sc.Text() {
		case "go":
			start := time.Now()
			ads = make([]*agent.Advertisement, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a, err := agent.Advertise(context.Background(), agent.AdvertiseOptions{
						Name: fmt.Sprintf("Bench %d", i), TD: hubtest.BareTD(fmt.Sprintf("urn:bench:many:%d", i), fmt.Sprint("Bench ", i)),
						Interfaces: []string{"eth0"}, Logger: log})
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
					ads[i] = a
				}()
			}
			wg.Wait()
			fmt.Println("started", time.Since(start).Milliseconds(), "ms")
		case "reannounce":
			go func() {
				for {
					for _, a := range ads {
						a.Announce()
					}
					time.Sleep(time.Second)
				}
			}()
			fmt.Println("reannouncing")
		}
	}
	os.Exit(0)
}

// pollThing polls the hub every 2 ms until cond holds for the Thing id,
// and returns when it did (bounded at 30 s).
func pollThing(b *testing.B, c *http.Client, base, id string, cond func(thingState) bool) time.Time {
	b.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		var s thingState
		resp, err := c.Get(base + "/things/" + url.PathEscape(id))
		if err != nil {
			continue
		}
		s.status = resp.StatusCode
		if resp.StatusCode == http.StatusOK {
			json.NewDecoder(resp.Body).Decode(&s)
		}
		resp.Body.Close()
		if cond(s) {
			return time.Now()
		}
	}
	b.Fatalf("%s: condition not reached in 30 s", id)
	return time.Time{}
}

// BenchmarkMDNSLatency: an agent in another namespace announces itself
// (after probing) → the hub has fetched, validated and registered its TD
// online (also measured from the agent's Advertise call, probing
// included); SIGTERM (goodbye) → the hub shows it offline. 20 tries, each a
// fresh agent process. Run with -benchtime 1x.
func BenchmarkMDNSLatency(b *testing.B) {
	lan := netnstest.New(b, []string{"hub", "a1"})
	_, base := mdnsHubB(b, lan, "Bench Hub")
	c := lan.HTTPClient("hub")
	var reg, off, probe []time.Duration
	for i := range 20 {
		id := fmt.Sprintf("urn:bench:lat:%d", i)
		a := lan.Helper("a1", "TestMDNSChild", childEnv+"=agent", "LMOS_MDNS_ARGS="+id+"|Lat "+strconv.Itoa(i)+"|0")
		line := a.WaitContains(10*time.Second, "advertised")
		f := strings.Fields(line)
		ns, _ := strconv.ParseInt(f[len(f)-2], 10, 64)
		t0 := time.Unix(0, ns)
		ns, _ = strconv.ParseInt(f[len(f)-1], 10, 64)
		tStart := time.Unix(0, ns)
		t1 := pollThing(b, c, base, id, func(s thingState) bool { return s.status == 200 && s.Presence.Status == "online" })
		reg = append(reg, t1.Sub(t0))
		probe = append(probe, t1.Sub(tStart))
		t2 := time.Now()
		a.Signal(syscall.SIGTERM)
		t3 := pollThing(b, c, base, id, func(s thingState) bool { return s.Presence.Status == "offline" })
		off = append(off, t3.Sub(t2))
		a.Stop()
	}
	percentile.Report(b, reg, time.Millisecond, "ms-announce-to-registered")
	percentile.Report(b, probe, time.Millisecond, "ms-switch-on-to-registered")
	percentile.Report(b, off, time.Millisecond, "ms-goodbye-to-offline")
}

// BenchmarkMDNS100Agents: 100 agents switched on at once → all
// registered online; then the hub's CPU and RSS over 10 s while all 100
// re-announce every second. Run with -benchtime 1x.
func BenchmarkMDNS100Agents(b *testing.B) {
	lan := netnstest.New(b, []string{"hub", "a1"})
	hubProc, base := mdnsHubB(b, lan, "Bench Hub")
	c := lan.HTTPClient("hub")
	agents := lan.Helper("a1", "TestMDNSChild", childEnv+"=agents", "LMOS_MDNS_ARGS=100")
	t0 := time.Now()
	agents.Send("go")
	var online int
	for deadline := time.Now().Add(60 * time.Second); online < 100; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of 100 online after 60 s", online)
		}
		online = countOnline(c, base)
	}
	b.ReportMetric(time.Since(t0).Seconds(), "s-all-100-registered")
	line := agents.WaitContains(30*time.Second, "started")
	if f := strings.Fields(line); len(f) == 3 {
		ms, _ := strconv.ParseFloat(f[1], 64)
		b.ReportMetric(ms/1000, "s-all-100-announced")
	}
	pid := hubProc.Cmd.Process.Pid
	agents.Send("reannounce")
	agents.WaitContains(5*time.Second, "reannouncing")
	cpu0, w0 := cpuTicks(b, pid), time.Now()
	time.Sleep(10 * time.Second)
	cpu1, w1 := cpuTicks(b, pid), time.Now()
	b.ReportMetric((cpu1-cpu0)/100/w1.Sub(w0).Seconds()*100, "hub-CPU-%-reannouncing")
	b.ReportMetric(procStatusMB(b, pid, "VmRSS"), "hub-RSS-MB-reannouncing")
	if n := countOnline(c, base); n != 100 {
		b.Errorf("%d of 100 online after re-announcing", n)
	}
}

func countOnline(c *http.Client, base string) int {
	resp, err := c.Get(base + "/things")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var list []thingState
	json.NewDecoder(resp.Body).Decode(&list)
	n := 0
	for _, s := range list {
		if s.Origin.Source == "mdns" && s.Presence.Status == "online" {
			n++
		}
	}
	return n
}

// cpuTicks is utime+stime of pid in clock ticks (100 per second).
func cpuTicks(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return u + s
}

func procStatusMB(b *testing.B, pid int, key string) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// sniffer receives, in node's namespace, every mDNS packet multicast on
// its eth0, with the time it arrived: the moment an announcement or a
// goodbye reached the hub's link.
type sniffer struct {
	pc   *ipv4.PacketConn
	msgs chan sniffed
}

type sniffed struct {
	at  time.Time
	msg *dns.Msg
}

func sniff(b *testing.B, lan *netnstest.LAN, node string) *sniffer {
	b.Helper()
	type result struct {
		pc  net.PacketConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, now in the node's namespace, ends
		// with this goroutine; the socket stays there.
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + lan.NS(node))
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			})
		}}
		pc, err := lc.ListenPacket(context.Background(), "udp4", "0.0.0.0:5353")
		if err != nil {
			ch <- result{nil, err}
			return
		}
		ifi, err := net.InterfaceByName("eth0")
		if err == nil {
			err = ipv4.NewPacketConn(pc).JoinGroup(ifi, &net.UDPAddr{IP: net.IPv4(224, 0, 0, 251)})
		}
		ch <- result{pc, err}
	}()
	r := <-ch
	if r.err != nil {
		b.Fatalf("sniffer in %s: %v", node, r.err)
	}
	s := &sniffer{pc: ipv4.NewPacketConn(r.pc), msgs: make(chan sniffed, 1024)}
	b.Cleanup(func() { r.pc.Close() })
	go func() {
		buf := make([]byte, 9000)
		for {
			n, _, err := r.pc.ReadFrom(buf)
			if err != nil {
				return
			}
			at := time.Now()
			m := new(dns.Msg)
			if m.Unpack(buf[:n]) != nil || !m.Response {
				continue
			}
			select {
			case s.msgs <- sniffed{at, m}:
			default:
			}
		}
	}()
	return s
}

// waitPTR returns when a response with a _wot._tcp PTR naming an instance
// whose first label starts with label (as miekg/dns prints it) arrived, with TTL 0 (goodbye) or not.
func (s *sniffer) waitPTR(b *testing.B, label string, goodbye bool) time.Time {
	b.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case p := <-s.msgs:
			for _, rr := range p.msg.Answer {
				ptr, ok := rr.(*dns.PTR)
				if ok && strings.EqualFold(ptr.Hdr.Name, "_wot._tcp.local.") && strings.HasPrefix(ptr.Ptr, label) && (ptr.Hdr.Ttl == 0) == goodbye {
					return p.at
				}
			}
		case <-deadline:
			b.Fatalf("no %s PTR (goodbye %v) seen in 30 s", label, goodbye)
		}
	}
}

// BenchmarkMDNSInteropLatency: Things announced by implementations this
// project did not write — grandcat/zeroconf v1.0.0 (IP TTL 1), npm
// multicast-dns (TTL 1) and avahi-daemon — from another namespace. For
// each: its first announcement arriving on the hub's link (seen by a
// sniffer there) → the hub shows it registered online; its goodbye
// arriving → the hub shows it offline (RFC 6762 §10.1 holds a goodbye one
// second). 10 tries for zeroconf and multicast-dns, 5 for Avahi, each a
// fresh agent process. Run with -benchtime 1x.
func BenchmarkMDNSInteropLatency(b *testing.B) {
	lan := netnstest.New(b, []string{"hub", "a1"})
	hub, base := mdnsHubB(b, lan, "Bench Hub")
	hub.WaitContains(10*time.Second, "mdns advertising")
	c := lan.HTTPClient("hub")
	s := sniff(b, lan, "hub")
	measure := func(name, id, label string, start func() *netnstest.Proc) {
		var reg, off []time.Duration
		tries := 10
		if name == "avahi" {
			tries = 5
		}
		for range tries {
			for len(s.msgs) > 0 { // what earlier tries sent
				<-s.msgs
			}
			p := start()
			t0 := s.waitPTR(b, label, false)
			t1 := pollThing(b, c, base, id, func(s thingState) bool { return s.status == 200 && s.Presence.Status == "online" })
			p.Signal(syscall.SIGTERM)
			t2 := s.waitPTR(b, label, true)
			t3 := pollThing(b, c, base, id, func(s thingState) bool { return s.Presence.Status == "offline" })
			reg, off = append(reg, t1.Sub(t0)), append(off, t3.Sub(t2))
			p.Stop()
		}
		percentile.Report(b, reg, time.Millisecond, "ms-"+name+"-announce-to-registered")
		percentile.Report(b, off, time.Millisecond, "ms-"+name+"-goodbye-to-offline")
	}
	measure("zeroconf", "urn:bench:zeroconf", "Zeroconf", func() *netnstest.Proc {
		p := lan.Helper("a1", "TestMDNSChild", childEnv+"=zeroconf", "LMOS_MDNS_ARGS=urn:bench:zeroconf|Zeroconf Lamp|8003")
		p.WaitContains(10*time.Second, "registered")
		return p
	})
	if script, err := filepath.Abs("../../test/interop/mdns-agent.mjs"); err == nil {
		if _, err := os.Stat("../../test/interop/node_modules/multicast-dns"); err == nil {
			measure("multicast-dns", "urn:bench:node", "Node", func() *netnstest.Proc {
				cmd := lan.Command("a1", "node", script, "urn:bench:node", "Node Lamp", lan.Addr("a1"), "8001")
				cmd.Env = append(os.Environ(), "MDNS_TTL=1")
				p := lan.Start(cmd)
				p.WaitContains(10*time.Second, `"announced"`)
				return p
			})
		}
	}
	daemon := requireAvahi(b)
	dbusEnv, av := startAvahi(b, lan, "a1", daemon, "urn:bench:avahi", "Avahi Lamp")
	first := true
	measure("avahi", "urn:bench:avahi", "Avahi", func() *netnstest.Proc {
		if first {
			first = false
			return av
		}
		return avahiDaemon(lan, "a1", daemon, dbusEnv)
	})
}
