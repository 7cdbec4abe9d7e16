// Package federation links paired lmos-hub peers on the LAN (PROTOCOL
// §9.1): a mirror of each peer's own Things here, and the forwarding of
// interactions with them to the hub they live on. It speaks only HTTP to
// the peers (the directory API, the change feed, the interaction proxy),
// signing each request with the hub's key (lmos.SignPeerRequest).
package federation
