package mdns

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// A flood of announcements for distinct instances fills the cache only up
// to its bound; what fits is reported once, and everything expires.
func TestBrowserFloodBounded(t *testing.T) {
	var added, removed int
	b, err := newBrowser(BrowserConfig{Types: []string{"_wot._tcp"}, MaxRecords: 500, OnEvent: func(e Event) {
		switch e.Kind {
		case Added:
			added++
		case Removed:
			removed++
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	from := &net.UDPAddr{IP: net.IPv4(169, 254, 1, 2), Port: mdnsPort}
	for i := range 10000 {
		a := &Advertiser{host: fmt.Sprint("h", i), services: []Service{{Instance: fmt.Sprint("flood ", i), Type: "_wot._tcp", Port: 1, Text: []string{"td=/td"}}}}
		m := new(dns.Msg)
		m.Response = true
		m.Answer = append(a.records(nil, false), &dns.A{Hdr: hdr(a.hostName(), dns.TypeA, 120, true), A: net.IPv4(169, 254, byte(i>>8), byte(i))})
		b.handle(packet{msg: m, from: from, ifIndex: 2}, now)
		if len(b.records) > 500 {
			t.Fatalf("cache holds %d records after %d packets, bound 500", len(b.records), i+1)
		}
	}
	if b.dropped == 0 || added == 0 || added > 125 {
		t.Errorf("dropped %d records, added %d instances", b.dropped, added)
	}
	b.maintain(now.Add(2 * time.Hour))
	if len(b.records) != 0 || removed != added {
		t.Errorf("after expiry: %d records, %d removed of %d added", len(b.records), removed, added)
	}
}

func TestSkippedInterfaces(t *testing.T) {
	for name, want := range map[string]bool{"eth0": false, "wlan0": false, "enp3s0": false, "docker0": true,
		"veth12ab": true, "br-3f2a": true, "tun0": true, "tap1": true, "virbr0": true, "wg0": true} {
		if got := skipped(name); got != want {
			t.Errorf("skipped(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestRenames(t *testing.T) {
	for in, want := range map[string]string{"Hub": "Hub (2)", "Hub (2)": "Hub (3)", "Hub (x)": "Hub (x) (2)"} {
		if got := bumpInstance(in); got != want {
			t.Errorf("bumpInstance(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"pi": "pi-2", "pi-2": "pi-3", "pi-zero": "pi-zero-2"} {
		if got := bumpHost(in); got != want {
			t.Errorf("bumpHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// A host announcing on two interfaces is reported on one, and stays there
// while that one is complete: no update per announcement.
func TestBrowserTwoInterfacesStable(t *testing.T) {
	var kinds []EventKind
	b, err := newBrowser(BrowserConfig{Types: []string{"_wot._tcp"}, OnEvent: func(e Event) {
		if e.Kind != Seen {
			kinds = append(kinds, e.Kind)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := &Advertiser{host: "lamp", services: []Service{{Instance: "Lamp", Type: "_wot._tcp", Port: 1, Text: []string{"td=/td"}}}}
	msg := func(ip net.IP) *dns.Msg {
		m := new(dns.Msg)
		m.Response = true
		m.Answer = append(a.records(nil, false), &dns.A{Hdr: hdr("lamp.local.", dns.TypeA, 120, true), A: ip})
		return m
	}
	from := &net.UDPAddr{IP: net.IPv4(169, 254, 1, 2), Port: mdnsPort}
	now := time.Now()
	for i := range 10 {
		now = now.Add(time.Second)
		b.handle(packet{msg: msg(net.IPv4(169, 254, 1, 2)), from: from, ifIndex: 2}, now)
		now = now.Add(time.Second)
		b.handle(packet{msg: msg(net.IPv4(192, 168, 1, 2)), from: from, ifIndex: 3}, now)
		if i == 0 && len(kinds) != 1 {
			t.Fatalf("after the first round: %v", kinds)
		}
	}
	if len(kinds) != 1 || kinds[0] != Added {
		t.Errorf("events %v, want one added", kinds)
	}
}
