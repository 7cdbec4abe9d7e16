package hub

import (
	"net/netip"
	"strings"
)

// SourceOf names the anonymous source an address belongs to, for the
// per-source quota and the fairness of joins: an IPv4 address (also one
// mapped into IPv6) as it is, an IPv6 address by its /64 prefix, since one
// host picks addresses from its /64 freely (SLAAC, privacy addresses) and
// would otherwise count as many sources. Anything else is returned as is.
func SourceOf(addr string) string {
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"))
	if err != nil {
		return addr
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return addr
	}
	return p.String()
}

// HostOf names the host an address belongs to: the exact address (an IPv4
// address also when mapped into IPv6, an IPv6 one with its zone), where
// SourceOf names its /64. Anything else is returned as is.
func HostOf(addr string) string {
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"))
	if err != nil {
		return addr
	}
	return ip.Unmap().String()
}

// WrittenFrom reports whether addr is the host the Thing was last written
// from (Host). When that is unknown (a Thing stored by an older version)
// Anon stands for it only if it names one address, as an IPv4 source
// does: an IPv6 /64 is every host of a home LAN.
func (m ThingMeta) WrittenFrom(addr string) bool {
	h := HostOf(addr)
	if h == "" {
		return false
	}
	if m.Host != "" {
		return h == m.Host
	}
	return !strings.Contains(m.Anon, "/") && h == m.Anon
}
