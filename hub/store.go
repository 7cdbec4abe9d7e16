package hub

import (
	"encoding/json"
	"errors"
)

// ErrStale is returned by a Store's ThingsRawAt when the store no longer
// holds the state the caller read: a newer batch has been committed (a
// reader can see it in the store just before the registry installs it in
// its index; Page.Installed says when that happened).
var ErrStale = errors.New("the collection changed since the page was read")

// ThingRecord is one stored Thing: the submitted bytes, kept exactly, the
// hub's metadata, and the encoded Summary of the document (internal/tdindex;
// opaque to stores). In a Batch, a record without Raw updates only the
// metadata of a stored Thing and keeps its Summary.
type ThingRecord struct {
	ID      string
	Raw     []byte
	Meta    ThingMeta
	Summary []byte
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
	// DeleteCredentials are the credentials of Things their holder
	// deregistered (Admission.Join), deleted in the same transaction
	// as the Thing for the same reason. No id is in both lists.
	DeleteCredentials []string
	// DeletePending are pending joins approved in this transaction
	// (Admission.Approve), deleted with the Thing's registration.
	DeletePending []string
	// Bindings are key bindings (hub/binding.go) accepted with a Thing's
	// description, or set by an admin, stored in the same transaction as
	// the description; DeleteBindings are bindings an admin removed.
	// Deleting a Thing never deletes its binding.
	Bindings       []Binding
	DeleteBindings []string
	// Groups are groups created or changed (each whole, with its members),
	// DeleteGroups dissolved ones, and StatusList the credential status
	// list when a membership was added or revoked (hub/group.go).
	Groups       []Group
	DeleteGroups []string
	StatusList   *StatusList
	// MemberCredentials are membership credentials issued (Credential
	// set) or dropped (nil), to apply in order after Groups: the hub keeps
	// them only in the store, not with the group in memory (65,536 of
	// ~2 KB each would be 130 MB there).
	MemberCredentials []MemberCredential
}

// MemberCredential is the signed membership credential of Thing in Group
// (nil: drop the stored one).
type MemberCredential struct {
	Group, Thing string
	Credential   json.RawMessage
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
	// LoadBindings calls fn for every stored key binding.
	LoadBindings(fn func(Binding) error) error
	// LoadGroups calls fn for every stored group.
	LoadGroups(fn func(Group) error) error
	// MemberCredential returns the stored membership credential of thing
	// in group gid (nil when there is none).
	MemberCredential(gid, thing string) (json.RawMessage, error)
	// LoadStatusList returns the stored credential status list (the zero
	// value when none was stored).
	LoadStatusList() (StatusList, error)
	// LastSeq returns the highest event sequence ever committed (0 if none).
	LastSeq() (uint64, error)
	// EventsAfter calls fn for each logged event with Seq > seq, in order.
	EventsAfter(seq uint64, fn func(Event) error) error
}
