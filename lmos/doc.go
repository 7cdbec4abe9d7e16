// Package lmos is the LMOS wire contract shared by the hub and agents
// (docs/PROTOCOL.md): no definition of the wire exists outside it. It owns
// what both sides must spell the same way:
//   - the RFC 9457 problem document with the LMOS type base and the one
//     table between problem codes and HTTP statuses (problem.go), and how a
//     peer's problem object is read, bounded (peer.go: PeerProblem,
//     Truncate);
//   - the MQTT topic layout (TopicRoot, things, reply inboxes, the hub's
//     status and events topics) and topic keys of Thing ids, and a Thing's
//     path in the directory API (topic.go);
//   - result statuses, the lmos-status user property and the join result
//     with its credentials (result.go);
//   - the WebSocket envelope: subprotocol, message types and member names
//     (ws.go);
//   - the DNS-SD service names and TXT keys (dnssd.go);
//   - the media types and how a Content-Type is read (media.go);
//   - the one CBOR encoding and the limits every CBOR payload is decoded
//     with (cbor.go).
//
// It depends on the standard library and the CBOR library only, and not on
// net/http: the hub's domain builds problems with it without depending on a
// transport.
package lmos
