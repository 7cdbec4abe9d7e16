package store

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// bucketPending maps a Thing id to its join parked for approval (JSON of
// hub.PendingJoin), so the pending list survives a restart.
var bucketPending = []byte("pending")

// PutPending stores a parked join durably, replacing one of the same id,
// and deletes the entries drop (evicted for it) in the same commit.
func (s *DB) PutPending(p hub.PendingJoin, drop ...string) error {
	if p.ID == "" {
		return hub.Errorf(hub.EINVALID, "a pending join needs a thing id")
	}
	v, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("cannot encode pending join %q: %w", p.ID, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketPending)
		if err != nil {
			return fmt.Errorf("cannot create bucket %s: %w", bucketPending, err)
		}
		if err := deletePending(tx, drop); err != nil {
			return err
		}
		return b.Put([]byte(p.ID), v)
	})
	if err != nil {
		return fmt.Errorf("cannot store pending join %q: %w", p.ID, err)
	}
	return nil
}

// DeletePending removes parked joins (denied, expired or dropped) in one
// commit; an absent one is no error.
func (s *DB) DeletePending(ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error { return deletePending(tx, ids) })
	if err != nil {
		return fmt.Errorf("cannot delete %d pending joins: %w", len(ids), err)
	}
	return nil
}

// LoadPending calls fn for every parked join, in id order.
func (s *DB) LoadPending(fn func(hub.PendingJoin) error) error {
	var list []hub.PendingJoin
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPending)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var p hub.PendingJoin
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("pending join %q: %w", k, err)
			}
			list = append(list, p)
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("cannot read pending joins: %w", err)
	}
	for _, p := range list {
		if err := fn(p); err != nil {
			return err
		}
	}
	return nil
}

// deletePending removes parked joins in tx (DeletePending, and Commit for
// the ones approved with their Thing's registration).
func deletePending(tx *bolt.Tx, ids []string) error {
	b := tx.Bucket(bucketPending)
	if b == nil {
		return nil
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		if err := b.Delete([]byte(id)); err != nil {
			return fmt.Errorf("pending join %q: %w", id, err)
		}
	}
	return nil
}
