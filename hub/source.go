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
