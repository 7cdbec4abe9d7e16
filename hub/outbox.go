package hub

import "time"

// OutboxOp is one pending change of a Thing waiting to be sent to a remote
// directory (PROTOCOL §9): the Thing's current document (Delete false), or
// its removal. An outbox holds at most one op per Thing id: a later change
// replaces the pending one in place, so repeated updates coalesce into one
// send of the latest state and the order stays that of first enqueuing.
type OutboxOp struct {
	ID     string
	Delete bool
	// Pos orders the ops: the position of the first enqueue of this id
	// since it was last sent.
	Pos uint64
	// Version changes with every enqueue of the id; Done removes the op
	// only if it was not enqueued again while being sent.
	Version uint64
	// Since is when the op was first enqueued (the link's lag).
	Since time.Time
}

// OutboxChange is a change to enqueue: id changed (Delete false) or was
// deleted.
type OutboxChange struct {
	ID     string
	Delete bool
}

// OutboxAck says that version Version of the op of ID was sent (or
// dropped); Release also lets the id go from the claimed set (a deletion
// was sent, or the Thing is no longer this hub's to push).
type OutboxAck struct {
	ID      string
	Version uint64
	Release bool
}

// Outbox is a durable queue of changes for one remote directory. Every
// method that changes it commits before returning, so what it returned
// survives a crash. Besides the ops it keeps the set of ids that may exist
// on the remote because of this hub (claimed by an enqueued change, let go
// by a sent deletion), so a deletion missed while the hub was down is found
// again by comparing that set with the registry.
type Outbox interface {
	// Enqueue records changes at now, each replacing the pending op of
	// its id (keeping that op's position and Since), and claims the ids
	// of the changes that are not deletions.
	Enqueue(now time.Time, changes ...OutboxChange) error
	// Pending returns up to limit ops with Pos > after, in order.
	Pending(after uint64, limit int) ([]OutboxOp, error)
	// Done applies acks in one commit: each removes the op of its id if
	// its version is still the one sent.
	Done(acks ...OutboxAck) error
	// Claimed calls fn with every claimed id, in id order.
	Claimed(fn func(id string) error) error
	// Stats reports how many ops wait and when the oldest was enqueued
	// (zero when none waits).
	Stats() (depth int, oldest time.Time, err error)
}
