// Package hub is the domain of lmos-hub, one file per concept: the Thing
// and its metadata (thing.go), the change events and their feed
// (event.go), the Store interface the registry persists through
// (store.go), admin tokens (token.go), the Thing Description's validation
// (validate.go, tdschema.go, depth.go) and enrichment (enrich*.go), the
// Registry with its write loop, pages, preconditions, summaries and search
// (registry*.go, page.go, precondition.go, summary.go, search*.go; the
// index those read, internal/tdindex, is a package of its own),
// interactions (interaction.go: Op, Interaction, Result, Transport) and the
// Router that checks them against the TD's data schemas (router.go,
// dataschema.go) and the payloads' encoding (payload.go), the rules every
// transport shares (finalresult.go: results before the final one;
// failure.go: ThingFailed, the problem of a failure a Thing reported),
// the join policy
// (join.go: Admission, with anonymous sources named by source.go), and the
// hub's errors and problems (errors.go, problem.go). The small interfaces
// the adapters implement live next to what uses them (Store, TokenStore,
// CredentialStore, Transport, Publisher). The MQTT broker's durable state
// is no part of the domain: internal/brokerstate holds its record.
//
// It imports only the standard library, pure libraries, the wire contract
// (package lmos: problems, peers' problem objects, topics, media types,
// result statuses, CBOR) and the JSON and JSON/CBOR utilities of
// internal/jsonx and internal/codec, the per-source token buckets of
// internal/ratelimit and the search index of internal/tdindex; it does not
// import net or net/http. It does import
// net/netip, on purpose: source.go keeps client addresses as comparable
// values (netip.Addr, netip.Prefix) to name anonymous sources; netip opens
// no sockets. Adapters (store, web, mqtt, mdns) import hub and never each
// other.
package hub
