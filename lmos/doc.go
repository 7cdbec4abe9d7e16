// Package lmos is the LMOS wire contract shared by the hub and agents
// (docs/PROTOCOL.md). It owns what both sides must spell the same way: the
// RFC 9457 problem document with the LMOS type base and the one table
// between problem codes and HTTP statuses; the MQTT topic layout and topic
// keys of Thing ids; a Thing's path in the directory API; the payload media
// types and how a Content-Type is read; and the limits every CBOR payload
// is decoded with.
//
// It depends on the standard library and the CBOR library only, and not on
// net/http: the hub's domain builds problems with it without depending on a
// transport.
package lmos
