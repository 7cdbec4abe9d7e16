// Package hub is the domain of lmos-hub: the Thing Description model and its
// validation, the Registry (TTL, search, change feed), admin tokens, the
// interaction Router with JSON/CBOR transcoding, and the small interfaces
// (Store, TokenStore, Transport, ConnServer, Publisher) that adapters
// implement.
//
// It imports only the standard library and pure libraries; adapters (store,
// web, mqtt, mdns, sync) import hub and never each other.
package hub
