package dnssd

import (
	"fmt"
	"log/slog"
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

// A goodbye removes the instance one second later, not at once (RFC 6762
// §10.1); an announcement within that second cancels the removal, so a
// late answer crossing a goodbye makes no removed→added flap.
func TestBrowserGoodbyeHold(t *testing.T) {
	var events []string
	b, err := newBrowser(BrowserConfig{Types: []string{"_wot._tcp"}, OnEvent: func(e Event) {
		if e.Kind != Seen {
			events = append(events, e.Kind.String()+" "+e.Reason)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := &Advertiser{host: "lamp", services: []Service{{Instance: "Lamp", Type: "_wot._tcp", Port: 1, Text: []string{"td=/td"}}}}
	msg := func(goodbye bool) packet {
		m := new(dns.Msg)
		m.Response = true
		ttl := uint32(120)
		if goodbye {
			ttl = 0
		}
		m.Answer = append(a.records(nil, goodbye), &dns.A{Hdr: hdr("lamp.local.", dns.TypeA, ttl, true), A: net.IPv4(169, 254, 1, 2)})
		return packet{msg: m, from: &net.UDPAddr{IP: net.IPv4(169, 254, 1, 2), Port: mdnsPort}, ifIndex: 2}
	}
	want := func(step string, w ...string) {
		t.Helper()
		if fmt.Sprint(events) != fmt.Sprint(w) {
			t.Fatalf("%s: events %q, want %q", step, events, w)
		}
	}
	t0 := time.Now()
	b.handle(msg(false), t0)
	want("announced", "added ")

	// Goodbye, then the late answer 300 ms later: still there, and still
	// there after the hold would have ended.
	b.handle(msg(true), t0.Add(100*time.Millisecond))
	b.maintain(t0.Add(200 * time.Millisecond))
	want("during the hold", "added ")
	if len(b.Entries()) != 1 {
		t.Fatalf("entries during the hold: %v", b.Entries())
	}
	b.handle(msg(false), t0.Add(400*time.Millisecond))
	b.maintain(t0.Add(3 * time.Second))
	want("goodbye cancelled by an answer", "added ")

	// A goodbye with nothing after it: removed once the second is over,
	// as a goodbye; the run loop is woken for that moment.
	t1 := t0.Add(10 * time.Second)
	b.handle(msg(true), t1)
	if !b.holdUntil.Equal(t1.Add(goodbyeHold)) {
		t.Errorf("hold until %v, want %v", b.holdUntil, t1.Add(goodbyeHold))
	}
	b.maintain(t1.Add(goodbyeHold - time.Millisecond))
	want("just before the hold ends", "added ")
	b.maintain(t1.Add(goodbyeHold))
	want("hold over", "added ", "removed goodbye")
	if len(b.records) != 0 || len(b.Entries()) != 0 {
		t.Errorf("after the hold: %d records, entries %v", len(b.records), b.Entries())
	}
}

// A packet counts as from the link by its source address: link-local, or
// in a subnet of the receiving interface; the TTL plays no part. Others
// are ignored, and so is anything from an interface not selected.
func TestConnOnLinkBySource(t *testing.T) {
	_, lan4, _ := net.ParseCIDR("192.168.1.10/24")
	lan4.IP = net.ParseIP("192.168.1.10").To4()
	_, lan6, _ := net.ParseCIDR("2001:db8:1::10/64")
	in := make(chan packet, 16)
	c := &Conn{log: slog.New(slog.DiscardHandler), nets: map[int][]*net.IPNet{2: {lan4, lan6}}, inboxes: []chan packet{in}}
	m := new(dns.Msg)
	m.SetQuestion("_wot._tcp.local.", dns.TypePTR)
	raw, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ip      string
		ifIndex int
		heard   bool
	}{
		{"192.168.1.77", 2, true},
		{"169.254.9.9", 2, true},
		{"fe80::1234", 2, true},
		{"2001:db8:1::99", 2, true},
		{"192.168.2.77", 2, false},
		{"10.0.0.5", 2, false},
		{"2001:db8:2::99", 2, false},
		{"192.168.1.77", 3, false}, // interface not selected
	} {
		c.deliver(raw, &net.UDPAddr{IP: net.ParseIP(tc.ip), Port: 5353}, tc.ifIndex)
		select {
		case <-in:
			if !tc.heard {
				t.Errorf("%s on %d: delivered, want ignored", tc.ip, tc.ifIndex)
			}
		default:
			if tc.heard {
				t.Errorf("%s on %d: ignored, want delivered", tc.ip, tc.ifIndex)
			}
		}
	}
	if got := c.offLink.Load(); got != 3 {
		t.Errorf("off-link count %d, want 3", got)
	}
}
