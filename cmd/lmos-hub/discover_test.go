package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
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
	if !strings.Contains(r.stdout, "_wot._tcp") || !strings.Contains(r.stdout, "-timeout") {
		t.Errorf("help: stdout %q", r.stdout)
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

// TestDiscoverPinsHubCertificates: `discover --pin` against a real TLS hub
// (the mDNS entries are what its advertisement carries; browsing itself
// is covered by the namespace tests): the first run pins the certificate
// its TXT record names, the next one finds it unchanged, a TXT record
// naming another certificate is a MISMATCH, and a pinned fingerprint the
// hub no longer presents is CHANGED; both fail the command and pin
// nothing.
func TestDiscoverPinsHubCertificates(t *testing.T) {
	h := hubtest.Start(t, func(c *Config) { c.TLS.Enabled = true })
	fp := h.Main.TLS.Fingerprint()
	_, port, _ := net.SplitHostPort(h.Main.MQTTSAddr.String())
	p, _ := strconv.Atoi(port)
	lo := net.IPv4(127, 0, 0, 1)
	entries := func(txtFP string) []dnssd.Entry {
		return []dnssd.Entry{
			{Instance: "Home", Service: "_wot._tcp", Port: 8080, IPs: []net.IP{lo}, Iface: "lo",
				Text: []string{"td=/.well-known/wot", "type=Directory", "scheme=http", "tls=" + txtFP}},
			{Instance: "Home", Service: "_secure-mqtt._tcp", Port: p, IPs: []net.IP{lo}, Iface: "lo", Text: []string{"tls=" + txtFP}},
		}
	}
	file := filepath.Join(t.TempDir(), "cfg", "known_hubs")
	var out, errOut strings.Builder
	if code := pinHubs(&out, &errOut, entries(fp), file); code != exitOK || !strings.Contains(out.String(), "PIN Home: pinned "+fp) {
		t.Fatalf("first use: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "Home\t"+fp+"\n" {
		t.Fatalf("known_hubs holds %q (%v)", b, err)
	}
	out.Reset()
	if code := pinHubs(&out, &errOut, entries(strings.ToLower(fp)), file); code != exitOK || !strings.Contains(out.String(), "PIN Home: ok") {
		t.Fatalf("second run: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	other := lmos.Fingerprint([]byte("spoofed"))
	if code := pinHubs(&out, &errOut, entries(other), file); code != exitFailure || !strings.Contains(out.String(), "MISMATCH") {
		t.Fatalf("TXT naming another certificate: exit %d\n%s", code, out.String())
	}
	if err := os.WriteFile(file, []byte("Home\t"+other+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := pinHubs(&out, &errOut, entries(fp), file); code != exitFailure || !strings.Contains(out.String(), "CHANGED") {
		t.Fatalf("pinned certificate replaced: exit %d\n%s", code, out.String())
	}
	if b, _ := os.ReadFile(file); string(b) != "Home\t"+other+"\n" {
		t.Fatalf("a CHANGED hub was re-pinned: %q", b)
	}
	var b strings.Builder
	printDiscovered(&b, entries(fp))
	if !strings.Contains(b.String(), "mqtts://127.0.0.1:"+port+" "+fp) {
		t.Errorf("discover does not print the TLS door and fingerprint:\n%s", b.String())
	}
}
