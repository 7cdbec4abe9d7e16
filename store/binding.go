package store

import (
	"encoding/json"
	"fmt"

	"github.com/eclipse-lmos/lmos-hub/hub"
	bolt "go.etcd.io/bbolt"
)

// bucketBindings maps a Thing id to its key binding (hub.Binding, JSON):
// the DID its descriptions must be signed by. Bindings outlive their
// Things (PROTOCOL §6), so this bucket is never cleared by a delete.
var bucketBindings = []byte("bindings")

// LoadBindings calls fn for every stored binding, in id order.
func (s *DB) LoadBindings(fn func(hub.Binding) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketBindings)
		if b == nil {
			return nil // none was ever stored
		}
		return b.ForEach(func(k, v []byte) error {
			var rec hub.Binding
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("binding of thing %q: %w", k, err)
			}
			rec.ID = string(k)
			return fn(rec)
		})
	})
}

// putBindings writes and deletes bindings in tx (Commit: in the same
// transaction as the Thing they were accepted with).
func putBindings(tx *bolt.Tx, puts []hub.Binding, deletes []string) error {
	if len(puts)+len(deletes) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketBindings)
	if err != nil {
		return fmt.Errorf("cannot create bucket %s: %w", bucketBindings, err)
	}
	for _, rec := range puts {
		if rec.ID == "" || rec.DID == "" {
			return fmt.Errorf("binding of thing %q: needs a thing id and a DID", rec.ID)
		}
		v, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("binding of thing %q: %w", rec.ID, err)
		}
		if err := b.Put([]byte(rec.ID), v); err != nil {
			return fmt.Errorf("binding of thing %q: %w", rec.ID, err)
		}
	}
	for _, id := range deletes {
		if err := b.Delete([]byte(id)); err != nil {
			return fmt.Errorf("binding of thing %q: %w", id, err)
		}
	}
	return nil
}
