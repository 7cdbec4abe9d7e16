package mqtt

import "testing"

// One host is one exact address: the /64 that counts as one client
// address for quotas is a whole home LAN over IPv6.
func TestSameHost(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:5000", "127.0.0.1:6000", true},
		{"127.0.0.1:5000", "127.0.0.2:5000", false},
		{"[::ffff:192.168.1.7]:5000", "192.168.1.7:6000", true},
		{"[2001:db8::1]:5000", "[2001:db8::1]:6000", true},
		{"[2001:db8::1]:5000", "[2001:db8::2]:5000", false}, // one /64, two hosts
		{"[fe80::1%eth0]:5000", "[fe80::1%eth0]:6000", true},
		{"[fe80::1%eth0]:5000", "[fe80::1%eth1]:5000", false},
		{"websocket/unknown-addr", "websocket/unknown-addr", true},
	} {
		if got := sameHost(c.a, c.b); got != c.want {
			t.Errorf("sameHost(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
