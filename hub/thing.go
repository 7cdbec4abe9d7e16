package hub

import "time"

// Thing is a read-only snapshot of a registered Thing. Summary is shared
// with the registry and must not be modified; the document itself is read
// from the store when needed (Registry.Raw, Registry.Document).
type Thing struct {
	ID      string
	Summary *Summary
	Meta    ThingMeta
}

// Source says where a Thing's description came from (lmos:origin.source).
type Source string

// Sources of a description.
const (
	SourceHTTP   Source = "http"
	SourceMQTT   Source = "mqtt"
	SourceWS     Source = "ws"
	SourceMDNS   Source = "mdns"
	SourceRemote Source = "remote"
)

// Origin is the hub extension lmos:origin.
type Origin struct {
	Source Source `json:"source"`
	Hub    string `json:"hub,omitempty"`
	// Addr is the address of an anonymous writer ("" when the writer
	// was authenticated: an admin token, a Thing's own credentials). It
	// counts against registry.maxThingsPerSource and is never shown.
	Addr string `json:"-"`
	// Admin says the writer holds an admin token (HTTP): it may write a
	// key-bound Thing without its key's proof (PROTOCOL §6).
	Admin bool `json:"-"`
	// ByProof says the writer is authenticated by the description's proof
	// alone (an HTTP PUT without a token): the id must be bound to its
	// signer (PROTOCOL §3.5).
	ByProof bool `json:"-"`
	// JoinOpen says new Things may join now (join.mode open or a
	// permit-join window). A ByProof write may bring back a Thing whose id
	// an accepted proof bound (the Thing since deleted) only then: that is
	// a new Thing's join (PROTOCOL §4.4).
	JoinOpen bool `json:"-"`
	// Takeover says the write hands the Thing to a new live connection (a
	// WebSocket registerThing on another socket): its proof must be
	// fresh, not the stored description sent again, which anyone can
	// read from the directory.
	Takeover bool `json:"-"`
	// Owner says the writer is the Thing's own: the holder of its MQTT
	// credential, the live WebSocket connection that created it or proved
	// its key, the mDNS instance that announced it. Only its owner or an
	// admin may bind a registered Thing to a key for the first time
	// (PROTOCOL §6): anyone else's key would take the Thing over.
	Owner bool `json:"-"`
	// Admitted says the hub picked the Thing: it joined while joining was
	// not open to all (a permit window under join.mode approve or closed)
	// or an administrator approved its join (ThingMeta.Admitted).
	Admitted bool `json:"-"`
}

// Presence status values.
const (
	PresenceOnline  = "online"
	PresenceOffline = "offline"
	PresenceUnknown = "unknown"
)

// Presence is the hub extension lmos:presence.
type Presence struct {
	Status string    `json:"status"`
	Since  time.Time `json:"since"`
	Via    Source    `json:"via,omitempty"`
}

// ThingMeta is what the hub knows about a Thing besides its document.
type ThingMeta struct {
	Created  time.Time `json:"created"`
	Modified time.Time `json:"modified"`
	// Expires is zero when the registration never expires.
	Expires time.Time `json:"expires,omitzero"`
	// TTL in seconds from registration.ttl; 0 when none was given.
	TTL      int64    `json:"ttl,omitempty"`
	Origin   Origin   `json:"origin"`
	Presence Presence `json:"presence"`
	// Verified is the DID whose proof verified, if any.
	Verified string `json:"verified,omitempty"`
	// Size is the stored document's length in bytes (registry.maxBytes).
	Size int64 `json:"size,omitempty"`
	// Anon is the address that wrote the Thing anonymously, "" when an
	// authenticated writer did (registry.maxThingsPerSource). Stored, so
	// the count per source survives restarts.
	Anon string `json:"anon,omitempty"`
	// Host is the exact address (HostOf) of the last write that came
	// with one: an anonymous MQTT join's, its mDNS instance's, an
	// approved join's requester's. The writes of its credential holder or
	// of an admin keep it; one from a door that knows only the /64 (HTTP,
	// WebSocket) clears it. "" when unknown: stored by an older version,
	// or only ever written by authenticated writers. Stored, never shown:
	// only this host resumes a Thing that holds no credential and no key
	// binding, since Anon's IPv6 /64 is a whole home LAN (PROTOCOL §6).
	Host string `json:"host,omitempty"`
	// Admitted says the hub picked this Thing (Origin.Admitted, or an
	// admin token wrote it): only then is it an authenticated consumer of
	// Things that require security (hub.Access). A Thing that joined
	// itself while anyone could join has an anonymous client's rights.
	// Stored with the Thing, so it survives restarts.
	Admitted bool `json:"admitted,omitempty"`
}
