package dnssd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
)

// helperEnv selects what TestHelperProcess does in a namespace.
const helperEnv = "LMOS_MDNS_HELPER"

// TestHelperProcess is not a test: re-executed inside a network namespace
// by the tests below, it advertises or browses and talks over stdio.
func TestHelperProcess(t *testing.T) {
	c := netnstest.StartChild(t, helperEnv)
	log := c.Log
	out := json.NewEncoder(os.Stdout)
	switch c.Mode {
	case "advertise":
		ttl, _ := strconv.Atoi(os.Getenv("LMOS_TTL"))
		svc := Service{Instance: os.Getenv("LMOS_NAME"), Type: "_wot._tcp", Port: 8000, Text: strings.Split(os.Getenv("LMOS_TXT"), ",")}
		a, err := Advertise(context.Background(), AdvertiserConfig{Host: os.Getenv("LMOS_HOST"), Interfaces: []string{"eth0"}, TTL: uint32(ttl), Logger: log}, svc)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = out.Encode(map[string]string{"advertised": a.Services()[0].Instance, "host": a.Host()})
		c.Serve(func(l string) {
			if txt, ok := strings.CutPrefix(l, "txt "); ok {
				a.SetText(0, strings.Split(txt, ","))
				_ = out.Encode(map[string]string{"txt": txt})
			}
			if l == "names" {
				_ = out.Encode(map[string]string{"advertised": a.Services()[0].Instance, "host": a.Host()})
			}
		}, func() { a.Close() })
	case "browse":
		b, err := Browse(BrowserConfig{Types: []string{"_wot._tcp"}, Interfaces: []string{"eth0"}, Logger: log,
			OnEvent: func(e Event) {
				if e.Kind == Seen {
					return
				}
				_ = out.Encode(map[string]any{"kind": e.Kind.String(), "instance": e.Entry.Instance, "reason": e.Reason,
					"text": e.Entry.Text, "ips": e.Entry.IPs, "port": e.Entry.Port, "host": e.Entry.Host})
			}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = out.Encode(map[string]string{"browsing": "_wot._tcp"})
		c.Serve(nil, func() { b.Close() })
	}
	os.Exit(2)
}

func advertiser(lan *netnstest.LAN, node, name string, env ...string) *netnstest.Proc {
	p := lan.Helper(node, "TestHelperProcess", append([]string{helperEnv + "=advertise", "LMOS_NAME=" + name, "LMOS_HOST=" + node, "LMOS_TXT=td=/td,type=Thing"}, env...)...)
	p.WaitContains(10*time.Second, `"advertised"`)
	return p
}

func TestAdvertiseBrowseLifecycle(t *testing.T) {
	lan := netnstest.New(t, []string{"b", "a1", "a2"}, "a2")
	br := lan.Helper("b", "TestHelperProcess", helperEnv+"=browse")
	br.WaitContains(10*time.Second, `"browsing"`)

	// Announced → added, with its TXT in order and its address.
	a1 := advertiser(lan, "a1", "Thermo 1")
	br.WaitContains(5*time.Second, `"kind":"added"`, `"instance":"Thermo 1"`, `"text":["td=/td","type=Thing"]`, lan.Addr("a1"))

	// TXT change → updated.
	a1.Send("txt td=/td2,type=Thing")
	br.WaitContains(5*time.Second, `"kind":"updated"`, `"instance":"Thermo 1"`, `td=/td2`)

	// Goodbye → removed at once.
	a1.Stop()
	br.WaitContains(3*time.Second, `"kind":"removed"`, `"instance":"Thermo 1"`, `"reason":"goodbye"`)

	// A host without IPv6, killed without goodbye, TTL 2 s → removed when
	// the refresh queries go unanswered.
	a2 := advertiser(lan, "a2", "Thermo 2", "LMOS_TTL=2")
	br.WaitContains(5*time.Second, `"kind":"added"`, `"instance":"Thermo 2"`, lan.Addr("a2"))
	a2.Kill()
	br.WaitContains(6*time.Second, `"kind":"removed"`, `"instance":"Thermo 2"`, `"reason":"expired"`)
}

func TestAdvertiseNameConflict(t *testing.T) {
	lan := netnstest.New(t, []string{"a1", "a2", "a3"})
	advertiser(lan, "a1", "Same Name")
	// A later host probing for a held name gets it defended and renames.
	second := lan.Helper("a2", "TestHelperProcess", helperEnv+"=advertise", "LMOS_NAME=Same Name", "LMOS_HOST=a2", "LMOS_TXT=td=/td")
	second.WaitContains(10*time.Second, `"advertised":"Same Name (2)"`)
	// Two hosts probing at once for the same free name: one wins the
	// tie-break, the other renames (RFC 6762 §8.2).
	x := lan.Helper("a3", "TestHelperProcess", helperEnv+"=advertise", "LMOS_NAME=Twin", "LMOS_HOST=a3", "LMOS_TXT=td=/x")
	y := lan.Helper("a2", "TestHelperProcess", helperEnv+"=advertise", "LMOS_NAME=Twin", "LMOS_HOST=a2b", "LMOS_TXT=td=/y")
	nx := x.WaitContains(10*time.Second, `"advertised"`)
	ny := y.WaitContains(10*time.Second, `"advertised"`)
	if strings.Contains(nx, `"Twin"`) == strings.Contains(ny, `"Twin"`) {
		t.Fatalf("want exactly one Twin and one renamed, got %s and %s", nx, ny)
	}
}
