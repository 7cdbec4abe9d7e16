package dnssd

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// announcement packs what an agent announces, as a fuzz seed.
func announcement(f *testing.F, instance string, ttl uint32, txt ...string) []byte {
	a := &Advertiser{cfg: AdvertiserConfig{TTL: ttl}, host: "agent",
		services: []Service{{Instance: instance, Type: "_wot._tcp", Port: 8000, Text: txt}}}
	m := new(dns.Msg)
	m.Response = true
	m.Answer = a.records(nil, ttl == 0)
	m.Answer = append(m.Answer, &dns.A{Hdr: hdr("agent.local.", dns.TypeA, 120, true), A: net.IPv4(169, 254, 1, 2)})
	b, err := m.Pack()
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzBrowserPacket feeds arbitrary packets to the browser's cache: no
// panic, the cache stays within its bound, and entries are well formed.
func FuzzBrowserPacket(f *testing.F) {
	f.Add(announcement(f, "Lamp", 120, "td=/td", "type=Thing"))
	f.Add(announcement(f, "Lamp", 0, "td=/td"))
	f.Add(announcement(f, "we.ird\\ name (2)", 1, ""))
	f.Add(announcement(f, strings.Repeat("x", 63), 4500, "td=/"+strings.Repeat("a", 200), "td=/dup", "=novalue", "flag"))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var events int
		b, err := newBrowser(BrowserConfig{Types: []string{"_wot._tcp", "_directory._sub._wot._tcp"}, MaxRecords: 64,
			OnEvent: func(e Event) {
				events++
				if e.Entry.Port < 0 || e.Entry.Port > 65535 || len(e.Entry.IPs) == 0 && e.Kind == Added {
					t.Fatalf("malformed entry %+v", e)
				}
				_, _ = e.Entry.TDURL()
				_ = e.Entry.Key()
			}})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := parseMessage(raw)
		if err != nil {
			return
		}
		now := time.Now()
		from := &net.UDPAddr{IP: net.IPv4(169, 254, 1, 2), Port: mdnsPort}
		b.handle(packet{msg: msg, from: from, ifIndex: 2}, now)
		b.handle(packet{msg: msg, from: from, ifIndex: 3}, now.Add(time.Millisecond))
		if len(b.records) > 64 {
			t.Fatalf("cache holds %d records, bound 64", len(b.records))
		}
		// Everything expires eventually, with a removal for every addition.
		b.maintain(now.Add(5 * time.Hour))
		if len(b.records) != 0 || len(b.views) != 0 {
			t.Fatalf("after every TTL: %d records, %d instances", len(b.records), len(b.views))
		}
	})
}

// FuzzNames checks the label and TXT parsing the browser relies on.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"Lamp._wot._tcp.local.", `we\.ird\032name._wot._tcp.local.`, `\`, `\25`, `\999.x`, "", ".", "td=/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		label, rest, err := splitFirstLabel(s)
		if err == nil {
			// What escapeLabel writes, splitFirstLabel reads back.
			l2, r2, err := splitFirstLabel(escapeLabel(label) + "." + rest)
			if err != nil || l2 != label || r2 != rest {
				t.Fatalf("round trip of %q: %q %q %v", label, l2, r2, err)
			}
		}
		txt := parseTXT(strings.Split(s, "\x00"))
		for k := range txt {
			if k == "" || k != strings.ToLower(k) {
				t.Fatalf("bad key %q", k)
			}
		}
		e := Entry{Instance: s, Service: "_wot._tcp", Port: 1, Text: []string{"td=" + s}, IPs: []net.IP{net.IPv4(169, 254, 0, 1)}}
		if u, err := e.TDURL(); err == nil && !strings.HasPrefix(u, "http://169.254.0.1:1/") {
			t.Fatalf("TDURL = %q", u)
		}
	})
}
