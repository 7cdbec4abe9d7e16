package main

import (
	"net"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
)

// discover's usage errors are reported before any socket is opened (a
// real browse runs only in the namespace tests).
func TestDiscoverUsage(t *testing.T) {
	for _, args := range [][]string{{"discover", "extra"}, {"discover", "--timeout", "0s"}, {"discover", "--timeout", "soon"}} {
		r := cli(t, nil, "", args...).want(t, exitUsage, strings.Join(args, " "))
		if !strings.Contains(r.stderr, "timeout") {
			t.Errorf("%v: stderr %q does not explain", args, r.stderr)
		}
	}
	r := cli(t, nil, "", "discover", "--help").want(t, exitOK, "discover --help")
	if !strings.Contains(r.stderr, "_wot._tcp") {
		t.Errorf("help: %q", r.stderr)
	}
}

// printDiscovered sorts what mDNS saw into hubs (with their broker) and
// Things.
func TestPrintDiscovered(t *testing.T) {
	ip := net.IPv4(169, 254, 1, 1)
	var b strings.Builder
	printDiscovered(&b, []dnssd.Entry{
		{Instance: "Home", Service: "_wot._tcp", Port: 8080, IPs: []net.IP{ip}, Iface: "eth0", Text: []string{"td=/.well-known/wot", "type=Directory", "scheme=http"}},
		{Instance: "Home", Service: "_mqtt._tcp", Port: 1883, IPs: []net.IP{ip}, Iface: "eth0"},
		{Instance: "Lamp", Service: "_wot._tcp", Port: 8000, IPs: []net.IP{net.IPv4(169, 254, 1, 2)}, Iface: "eth0", Text: []string{"td=/td"}},
		{Instance: "Broken", Service: "_wot._tcp", Port: 8000, IPs: []net.IP{ip}, Iface: "eth0", Text: []string{"type=Thing"}},
	})
	out := b.String()
	for _, want := range []string{"HUBS (1)", "Home  http://169.254.1.1:8080/.well-known/wot  mqtt://169.254.1.1:1883", "THINGS (2)",
		"Lamp    Thing  http://169.254.1.2:8000/td", "the TXT record has no td key"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printDiscovered(&b, nil)
	if !strings.Contains(b.String(), "nothing seen") {
		t.Errorf("empty: %q", b.String())
	}
}
