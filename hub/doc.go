// Package hub is the domain of lmos-hub: the Thing Description model and its
// validation, the Registry (TTL, search, change feed), admin tokens, the
// interaction Router with JSON/CBOR transcoding, and the small interfaces
// (Store, TokenStore, Transport, Publisher) that adapters
// implement.
//
// It imports only the standard library, pure libraries and the wire
// contract (package lmos: problems, topic keys, media types, CBOR limits);
// it does not import net/http. Adapters (store, web, mqtt, mdns, sync)
// import hub and never each other.
package hub
