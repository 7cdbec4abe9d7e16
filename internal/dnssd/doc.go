// Package dnssd is DNS-SD over multicast DNS (RFC 6763 over RFC 6762), with
// no knowledge of the hub: a Conn (the shared sockets on port 5353 of the
// chosen interfaces, packets from off the link ignored), an Advertiser
// (probing and conflict renaming, announcements, answers to multicast and
// legacy unicast queries, re-announcements when addresses change,
// goodbyes) and a Browser (a cache with cache-flush, goodbye hold, expiry
// and refresh queries that reports instances added, updated, seen and
// removed). The hub's adapter (package mdns) and the agent library both
// build on it, so an agent binary carries none of the hub. The one piece
// of WoT it knows is Entry.TDURL, the TD address an instance's TXT record
// names (td and scheme keys, PROTOCOL §8), which all three users read.
//
// Messages are packed and parsed by github.com/miekg/dns; the protocol is
// written here because neither github.com/grandcat/zeroconf v1.0.0 nor
// github.com/brutella/dnssd v1.2.14 can deliver what the contract asks
// through their APIs: they do not probe, do not keep the TXT order
// (td, type, scheme), or do not report removals and updates (the dependency
// table in docs/DEVELOPING.md records why).
package dnssd
