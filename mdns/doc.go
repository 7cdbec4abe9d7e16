// Package mdns is lmos-hub's DNS-SD over multicast DNS adapter (PROTOCOL §8):
// an Advertiser that announces the hub's directory (_wot._tcp with subtype
// _directory) and broker (_mqtt._tcp), a Browser that follows _wot._tcp
// instances on the LAN (added, updated, removed by goodbye or TTL expiry),
// and a Registrar that turns browsed Things into registry entries.
//
// Messages are packed and parsed by github.com/miekg/dns; the protocol
// itself (probing, conflict renaming, announcements, goodbyes, the cache
// with its expiry and refresh queries) is written here, because neither
// github.com/grandcat/zeroconf v1.0.0 nor github.com/brutella/dnssd v1.2.14
// can deliver what the contract asks through their APIs (see README).
//
// Only hub is imported; cmd/lmos-hub wires the adapter.
package mdns
