package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/internal/netnstest"
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
						Name: fmt.Sprintf("Bench %d", i), TD: tdFor(fmt.Sprintf("urn:bench:many:%d", i), fmt.Sprint("Bench ", i)),
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
		resp, err := c.Get(base + "/things/" + pathEscape(id))
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

func reportLatencies(b *testing.B, name string, lat []time.Duration) {
	slices.Sort(lat)
	ms := float64(time.Millisecond)
	b.ReportMetric(float64(lat[len(lat)/2])/ms, "p50-ms-"+name)
	b.ReportMetric(float64(lat[len(lat)-1])/ms, "max-ms-"+name)
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
	reportLatencies(b, "announce-to-registered", reg)
	reportLatencies(b, "switch-on-to-registered", probe)
	reportLatencies(b, "goodbye-to-offline", off)
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
