package hub

import (
	"encoding/json"
	"time"
)

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
}

// ThingRecord is one stored Thing: the submitted bytes, kept exactly, the
// hub's metadata, and the encoded Summary of the document (EncodeSummary;
// opaque to stores). In a Batch, a record without Raw updates only the
// metadata of a stored Thing and keeps its Summary.
type ThingRecord struct {
	ID      string
	Raw     []byte
	Meta    ThingMeta
	Summary []byte
}

// EventType names a change-feed event, as the W3C WoT Discovery SSE API does.
type EventType string

// Registry change events.
const (
	EventCreated EventType = "thing_created"
	EventUpdated EventType = "thing_updated"
	EventDeleted EventType = "thing_deleted"
	// EventPresence reports a change of lmos:presence. It is a hub event
	// (/api/events, lmos/v1/hub/events), not a W3C WoT Discovery one.
	EventPresence EventType = "presence"
)

// IsDirectoryEvent reports whether t is one of the W3C WoT Discovery
// directory events.
func (t EventType) IsDirectoryEvent() bool {
	return t == EventCreated || t == EventUpdated || t == EventDeleted
}

// Event is one entry of the change feed. Seq increases by one per event and
// never repeats, across restarts too.
type Event struct {
	Seq  uint64    `json:"seq"`
	Type EventType `json:"type"`
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	// TD is the submitted document of a created Thing (for diff=true). Only
	// live events carry it; the event log does not store it.
	TD json.RawMessage `json:"td,omitempty"`
	// Patch is the RFC 7396 merge patch from the old to the new document of
	// an updated Thing, including "id" (for diff=true).
	Patch json.RawMessage `json:"patch,omitempty"`
	// Presence is the new lmos:presence of a presence event.
	Presence *Presence `json:"presence,omitempty"`
}

// Batch is a set of changes committed in one durable transaction.
type Batch struct {
	Puts    []ThingRecord
	Deletes []string
	Events  []Event
	// Credentials are MQTT credentials issued with a join (hub/join.go),
	// stored in the same transaction as the joined Thing's description, so
	// no crash or failure can leave one without the other.
	Credentials []CredentialRecord
}

// CredentialRecord is the password hash (HashToken) of a joined Thing.
type CredentialRecord struct {
	ThingID string
	Hash    string
}

// Store keeps Things and the change-feed log durably. Commit is called by
// one goroutine at a time (the Registry's write loop); reads may run
// concurrently with it.
type Store interface {
	// HubID returns the hub's stable id (a UUID created on first open).
	HubID() string
	// LoadThings calls fn for every stored Thing, in id order. A record
	// with a stored Summary comes without Raw (start-up then reads no
	// documents); one without comes with Raw.
	LoadThings(fn func(ThingRecord) error) error
	// ThingRaw returns the submitted bytes of a Thing, or an ENOTFOUND error.
	ThingRaw(id string) ([]byte, error)
	// ThingsRaw calls fn with the submitted bytes of each stored id in one
	// consistent read; raw is valid only during the call.
	ThingsRaw(ids []string, fn func(id string, raw []byte) error) error
	// ThingsRawAt is ThingsRaw in a read that sees the state after the
	// event with sequence seq and nothing later: it returns ErrStale,
	// without calling fn, when the last committed sequence is not seq.
	ThingsRawAt(seq uint64, ids []string, fn func(id string, raw []byte) error) error
	// Commit applies b atomically and durably (fsync), appends b.Events to the
	// event log and trims the log to its bound.
	Commit(b *Batch) error
	// LastSeq returns the highest event sequence ever committed (0 if none).
	LastSeq() (uint64, error)
	// EventsAfter calls fn for each logged event with Seq > seq, in order.
	EventsAfter(seq uint64, fn func(Event) error) error
}

// Token is an admin bearer token as stored: never the secret, only its hash.
type Token struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Hash    string    `json:"hash"` // hex SHA-256 of the secret
	Created time.Time `json:"created"`
	// Revoked is zero while the token is valid.
	Revoked time.Time `json:"revoked,omitzero"`
}

// TokenStore keeps admin tokens.
type TokenStore interface {
	// PutToken stores t (insert or replace by ID).
	PutToken(t Token) error
	// TokenByHash finds a token by the hash of its secret, or ENOTFOUND.
	TokenByHash(hash string) (Token, error)
	// Tokens lists every token (revoked ones included), oldest first.
	Tokens() ([]Token, error)
}
