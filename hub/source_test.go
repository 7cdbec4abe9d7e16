package hub

import "testing"

func TestSourceOf(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":            "192.0.2.7",
		"::ffff:192.0.2.7":     "192.0.2.7",
		"2001:db8:1:2:a:b:c:d": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]":    "2001:db8:1:3::/64",
		"fe80::1%eth0":         "fe80::/64",
		"not an address":       "not an address",
		"":                     "",
	} {
		if got := SourceOf(in); got != want {
			t.Errorf("SourceOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":            "192.0.2.7",
		"::ffff:192.0.2.7":     "192.0.2.7",
		"2001:db8:1:2:a:b:c:d": "2001:db8:1:2:a:b:c:d",
		"[2001:db8:1:3::1]":    "2001:db8:1:3::1",
		"2001:DB8:1:3:0::1":    "2001:db8:1:3::1",
		"fe80::1%eth0":         "fe80::1%eth0",
		"not an address":       "not an address",
		"":                     "",
	} {
		if got := HostOf(in); got != want {
			t.Errorf("HostOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// Two hosts of one IPv6 /64 are one source but not one host; a Thing
// stored before the exact host was kept is resumed from an IPv4 source
// (one address) but from no host of an IPv6 one (a whole LAN).
func TestWrittenFrom(t *testing.T) {
	for _, c := range []struct {
		meta ThingMeta
		addr string
		want bool
	}{
		{ThingMeta{Anon: "fd00:24::/64", Host: "fd00:24::a"}, "fd00:24::a", true},
		{ThingMeta{Anon: "fd00:24::/64", Host: "fd00:24::a"}, "[fd00:24::a]", true},
		{ThingMeta{Anon: "fd00:24::/64", Host: "fd00:24::a"}, "fd00:24::b", false},
		{ThingMeta{Anon: "fe80::/64", Host: "fe80::a%eth0"}, "fe80::b%eth0", false},
		{ThingMeta{Anon: "192.0.2.7", Host: "192.0.2.7"}, "::ffff:192.0.2.7", true},
		{ThingMeta{Anon: "192.0.2.7", Host: "192.0.2.7"}, "192.0.2.8", false},
		// Stored by an older version: no Host.
		{ThingMeta{Anon: "192.0.2.7"}, "192.0.2.7", true},
		{ThingMeta{Anon: "192.0.2.7"}, "192.0.2.8", false},
		{ThingMeta{Anon: "fd00:24::/64"}, "fd00:24::a", false},
		{ThingMeta{Anon: "fd00:24::/64"}, "fd00:24::/64", false},
		// Never written anonymously, or no address to compare.
		{ThingMeta{}, "", false},
		{ThingMeta{}, "192.0.2.7", false},
		{ThingMeta{Anon: "192.0.2.7", Host: "192.0.2.7"}, "", false},
	} {
		if got := c.meta.WrittenFrom(c.addr); got != c.want {
			t.Errorf("%+v.WrittenFrom(%q) = %v, want %v", c.meta, c.addr, got, c.want)
		}
	}
}
