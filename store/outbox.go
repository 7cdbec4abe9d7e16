package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// bucketOutbox holds one bucket per named outbox (the remote directory a
// dirsync.Pusher sends to), each with three buckets of its own: the queue
// (position → id, so a cursor walks the ops in order), the ops (id → its
// one pending op) and the claimed ids.
var (
	bucketOutbox  = []byte("outbox")
	outboxQueue   = []byte("q")
	outboxOps     = []byte("op")
	outboxClaimed = []byte("claimed")
)

var _ hub.Outbox = (*Outbox)(nil)

// Outbox is the durable outbox name in the store (hub.Outbox). Each
// changing call is one bbolt transaction, synced on commit.
type Outbox struct {
	db   *bolt.DB
	name []byte
}

// Outbox returns the outbox called name (created on its first write).
func (s *DB) Outbox(name string) *Outbox {
	return &Outbox{db: s.db, name: []byte(name)}
}

// opRecord is an op as stored: position, version, since (Unix ns), and
// 1 for a deletion.
const opRecordLen = 8 + 8 + 8 + 1

func encodeOp(op hub.OutboxOp) []byte {
	b := make([]byte, opRecordLen)
	binary.BigEndian.PutUint64(b[0:], op.Pos)
	binary.BigEndian.PutUint64(b[8:], op.Version)
	binary.BigEndian.PutUint64(b[16:], uint64(op.Since.UnixNano()))
	if op.Delete {
		b[24] = 1
	}
	return b
}

func decodeOp(id string, b []byte) (hub.OutboxOp, error) {
	if len(b) != opRecordLen {
		return hub.OutboxOp{}, fmt.Errorf("corrupt outbox op for %q (%d bytes)", id, len(b))
	}
	return hub.OutboxOp{ID: id, Pos: binary.BigEndian.Uint64(b[0:]), Version: binary.BigEndian.Uint64(b[8:]),
		Since: time.Unix(0, int64(binary.BigEndian.Uint64(b[16:]))), Delete: b[24] == 1}, nil
}

// buckets returns the outbox's buckets in tx, creating them when create
// is true (nil, nil, nil, nil when absent and not created).
func (o *Outbox) buckets(tx *bolt.Tx, create bool) (top, q, ops, claimed *bolt.Bucket, err error) {
	root := tx.Bucket(bucketOutbox)
	if root == nil {
		if !create {
			return nil, nil, nil, nil, nil
		}
		if root, err = tx.CreateBucket(bucketOutbox); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	top = root.Bucket(o.name)
	if top == nil {
		if !create {
			return nil, nil, nil, nil, nil
		}
		if top, err = root.CreateBucket(o.name); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	var bs [3]*bolt.Bucket
	for i, name := range [][]byte{outboxQueue, outboxOps, outboxClaimed} {
		if bs[i] = top.Bucket(name); bs[i] == nil {
			if !create {
				return nil, nil, nil, nil, errors.New("corrupt outbox: a bucket is missing")
			}
			if bs[i], err = top.CreateBucket(name); err != nil {
				return nil, nil, nil, nil, err
			}
		}
	}
	return top, bs[0], bs[1], bs[2], nil
}

// Enqueue records changes (hub.Outbox).
func (o *Outbox) Enqueue(now time.Time, changes ...hub.OutboxChange) error {
	if len(changes) == 0 {
		return nil
	}
	err := o.db.Update(func(tx *bolt.Tx) error {
		top, q, ops, claimed, err := o.buckets(tx, true)
		if err != nil {
			return err
		}
		for _, c := range changes {
			if err := enqueue(top, q, ops, claimed, c, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot enqueue %d changes in outbox %q: %w", len(changes), o.name, err)
	}
	return nil
}

// enqueue replaces the pending op of c's id in place, or appends one.
func enqueue(top, q, ops, claimed *bolt.Bucket, c hub.OutboxChange, now time.Time) error {
	if c.ID == "" {
		return errors.New("a change needs a thing id")
	}
	v, err := top.NextSequence()
	if err != nil {
		return err
	}
	key := []byte(c.ID)
	op := hub.OutboxOp{ID: c.ID, Delete: c.Delete, Pos: v, Version: v, Since: now}
	if old := ops.Get(key); old != nil {
		prev, err := decodeOp(c.ID, old)
		if err != nil {
			return err
		}
		op.Pos, op.Since = prev.Pos, prev.Since
	} else if err := q.Put(u64(v), key); err != nil {
		return err
	}
	if err := ops.Put(key, encodeOp(op)); err != nil {
		return err
	}
	if c.Delete {
		return nil
	}
	return claimed.Put(key, nil)
}

// Pending returns ops in order (hub.Outbox).
func (o *Outbox) Pending(after uint64, limit int) ([]hub.OutboxOp, error) {
	var out []hub.OutboxOp
	err := o.db.View(func(tx *bolt.Tx) error {
		top, q, ops, _, err := o.buckets(tx, false)
		if err != nil || top == nil {
			return err
		}
		c := q.Cursor()
		for k, id := c.Seek(u64(after + 1)); k != nil && (limit <= 0 || len(out) < limit); k, id = c.Next() {
			op, err := decodeOp(string(id), ops.Get(id))
			if err != nil {
				return err
			}
			out = append(out, op)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read outbox %q: %w", o.name, err)
	}
	return out, nil
}

// Done applies acks of sent ops in one commit (hub.Outbox).
func (o *Outbox) Done(acks ...hub.OutboxAck) error {
	if len(acks) == 0 {
		return nil
	}
	err := o.db.Update(func(tx *bolt.Tx) error {
		top, q, ops, claimed, err := o.buckets(tx, false)
		if err != nil || top == nil {
			return err
		}
		for _, a := range acks {
			if err := done(q, ops, claimed, a); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot remove %d sent changes from outbox %q: %w", len(acks), o.name, err)
	}
	return nil
}

// done removes the op a acknowledges unless it changed since it was sent.
func done(q, ops, claimed *bolt.Bucket, a hub.OutboxAck) error {
	key := []byte(a.ID)
	if raw := ops.Get(key); raw != nil {
		op, err := decodeOp(a.ID, raw)
		if err != nil {
			return err
		}
		if op.Version != a.Version {
			return nil // changed again while being sent: it goes again
		}
		if err := q.Delete(u64(op.Pos)); err != nil {
			return err
		}
		if err := ops.Delete(key); err != nil {
			return err
		}
	}
	if a.Release {
		return claimed.Delete(key)
	}
	return nil
}

// Claimed lists the claimed ids (hub.Outbox).
func (o *Outbox) Claimed(fn func(id string) error) error {
	var ids []string
	err := o.db.View(func(tx *bolt.Tx) error {
		top, _, _, claimed, err := o.buckets(tx, false)
		if err != nil || top == nil {
			return err
		}
		return claimed.ForEach(func(k, _ []byte) error {
			ids = append(ids, string(k))
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("cannot read outbox %q: %w", o.name, err)
	}
	for _, id := range ids {
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

// Stats reports the depth and the oldest op's time (hub.Outbox).
func (o *Outbox) Stats() (depth int, oldest time.Time, err error) {
	err = o.db.View(func(tx *bolt.Tx) error {
		top, q, ops, _, err := o.buckets(tx, false)
		if err != nil || top == nil {
			return err
		}
		depth = ops.Stats().KeyN
		if _, id := q.Cursor().First(); id != nil {
			op, err := decodeOp(string(id), ops.Get(id))
			if err != nil {
				return err
			}
			oldest = op.Since
		}
		return nil
	})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("cannot read outbox %q: %w", o.name, err)
	}
	return depth, oldest, nil
}
