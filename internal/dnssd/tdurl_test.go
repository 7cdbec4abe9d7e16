package dnssd

import (
	"net"
	"net/url"
	"testing"
)

// A link-local IPv6 address's zone is escaped in the URL (RFC 6874): the
// bare "%eth0" the URL had did not parse, so a Thing (or a hub) reachable
// only at its link-local address could not be fetched.
func TestTDURLOfALinkLocalAddress(t *testing.T) {
	for _, c := range []struct{ ip, want, host string }{
		{"fe80::1", "http://[fe80::1%25eth0]:8000/td", "fe80::1%eth0"},
		{"fd00:24::a", "http://[fd00:24::a]:8000/td", "fd00:24::a"},
		{"169.254.1.2", "http://169.254.1.2:8000/td", "169.254.1.2"},
	} {
		e := Entry{Instance: "Plug", Service: "_wot._tcp", Port: 8000, Text: []string{"td=/td"}, IPs: []net.IP{net.ParseIP(c.ip)}, Iface: "eth0"}
		u, err := e.TDURL()
		if err != nil || u != c.want {
			t.Errorf("%s: TDURL = %q, %v; want %q", c.ip, u, err, c.want)
			continue
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Hostname() != c.host {
			t.Errorf("%s: the URL %q does not parse back to its host: %v %v", c.ip, u, pu, err)
		}
	}
}
