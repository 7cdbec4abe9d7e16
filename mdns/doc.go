// Package mdns is lmos-hub's mDNS adapter (PROTOCOL §8): Open advertises the
// hub's directory (_wot._tcp with subtype _directory) and broker
// (_mqtt._tcp) and browses _wot._tcp on one shared socket pair, and the
// Registrar turns the browsed Things into registry entries (it fetches
// each announced TD, validates and stores it with origin mdns, and follows
// the instance's lifecycle as its presence).
//
// The DNS-SD stack itself (sockets, probing, announcing, the browser's
// cache) is internal/dnssd, which knows nothing of the hub; this package
// is only the hub's use of it. Only hub and internal/dnssd are imported;
// app wires the adapter.
package mdns
