package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/eclipse-lmos/lmos-hub/hub"
	bolt "go.etcd.io/bbolt"
)

// Where a key binding (hub.Binding, JSON) is kept. Bindings outlive their
// Things (PROTOCOL §6), but while an id's Thing is stored its binding rides
// in that Thing's thingmeta record, which the commit accepting a signed
// description writes anyway: binding a new id then dirties no page of a
// B+tree of its own (issue 14: a bucket of bindings alone cost ~1.4 more
// page writes per signed PUT). Only a binding without a stored Thing (the
// Thing deleted or expired, or an id an admin bound before it registers)
// is in bucketBindings.
//
// Every commit keeps each id's binding in exactly one of the two places:
// writing a Thing's record takes its binding out of the bucket, deleting
// the Thing puts the binding back there, in the same transaction. Stores
// of schema 1 had every binding in the bucket; those move into the
// records as their Things are written, and load from either place
// meanwhile.
var bucketBindings = []byte("bindings")

// LoadBindings calls fn for every stored binding, in id order: those in
// Things' records and those in bucketBindings.
func (s *DB) LoadBindings(fn func(hub.Binding) error) error {
	var recs []hub.Binding
	err := s.db.View(func(tx *bolt.Tx) error {
		in := tx.Bucket(bucketThingMeta).Cursor()
		var out *bolt.Cursor
		if b := tx.Bucket(bucketBindings); b != nil {
			out = b.Cursor()
		}
		ik, iv := in.First()
		var ok, ov []byte
		if out != nil {
			ok, ov = out.First()
		}
		// Both walks are in id order; an id may be in both (a registered
		// Thing and, from a schema 1 store, its binding in the bucket).
		for ik != nil || ok != nil {
			c := compareKeys(ik, ok)
			var id, v []byte
			if c <= 0 {
				_, bind, _, err := splitMeta(iv)
				if err != nil {
					return fmt.Errorf("thing %q: %w", ik, err)
				}
				id, v = ik, bind
				ik, iv = in.Next()
			}
			if c >= 0 {
				if v != nil {
					// Commit never leaves one in both places.
					return fmt.Errorf("binding of thing %q is stored twice", ok)
				}
				id, v = ok, ov
				ok, ov = out.Next()
			}
			if v == nil {
				continue // a Thing without a binding
			}
			rec, err := decodeBinding(id, v)
			if err != nil {
				return err
			}
			recs = append(recs, rec)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot load bindings: %w", err)
	}
	for _, rec := range recs {
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// compareKeys orders two cursors' keys, nil (the cursor is done) last.
func compareKeys(a, b []byte) int {
	switch {
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return bytes.Compare(a, b)
}

func decodeBinding(id, v []byte) (hub.Binding, error) {
	var rec hub.Binding
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, fmt.Errorf("binding of thing %q: %w", id, err)
	}
	rec.ID = string(id)
	return rec, nil
}

// bindingEdits are a batch's binding changes by id, encoded; a nil value
// removes the binding. Commit takes each one out as it places it.
type bindingEdits map[string][]byte

// encodeBindings encodes a batch's binding changes (outside the
// transaction, to keep the writer lock short).
func encodeBindings(puts []hub.Binding, deletes []string) (bindingEdits, error) {
	if len(puts)+len(deletes) == 0 {
		return nil, nil
	}
	e := make(bindingEdits, len(puts)+len(deletes))
	for _, rec := range puts {
		if rec.ID == "" || rec.DID == "" {
			return nil, fmt.Errorf("binding of thing %q: needs a thing id and a DID", rec.ID)
		}
		v, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("binding of thing %q: %w", rec.ID, err)
		}
		e[rec.ID] = v
	}
	for _, id := range deletes {
		e[id] = nil
	}
	return e, nil
}

// take returns id's change, if the batch has one, and marks it placed.
func (e bindingEdits) take(id string) (v []byte, changed bool) {
	if v, changed = e[id]; changed {
		delete(e, id)
	}
	return v, changed
}

// recordBinding returns the binding to write in id's thingmeta record,
// which held held (nil: none): the batch's change, else the one it
// holds, else the one the bucket held (it moves into the record, so a
// store of schema 1 is converted as its Things are written).
func recordBinding(tx *bolt.Tx, id string, held []byte, edits bindingEdits) ([]byte, error) {
	v, changed := edits.take(id)
	if !changed && held != nil {
		return held, nil
	}
	b := tx.Bucket(bucketBindings)
	if b == nil {
		return v, nil
	}
	if out := b.Get([]byte(id)); out != nil {
		if !changed {
			v = bytes.Clone(out)
		}
		if err := b.Delete([]byte(id)); err != nil {
			return nil, fmt.Errorf("binding of thing %q: %w", id, err)
		}
	}
	return v, nil
}

// keepBinding moves the binding of id, whose Thing is being deleted and
// whose record held held (nil: none), to the bucket: a binding outlives
// its Thing. The batch's change, if any, wins. A record without one
// leaves the bucket as it is (a schema 1 store's binding is there).
func keepBinding(tx *bolt.Tx, id string, held []byte, edits bindingEdits) error {
	v, changed := edits.take(id)
	if !changed {
		if held == nil {
			return nil
		}
		v = held
	}
	return putBucketBinding(tx, id, v)
}

// putBucketBinding stores v as the binding of id in the bucket, or
// removes it there when v is nil.
func putBucketBinding(tx *bolt.Tx, id string, v []byte) error {
	if v == nil {
		if b := tx.Bucket(bucketBindings); b != nil {
			if err := b.Delete([]byte(id)); err != nil {
				return fmt.Errorf("binding of thing %q: %w", id, err)
			}
		}
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketBindings)
	if err != nil {
		return fmt.Errorf("cannot create bucket %s: %w", bucketBindings, err)
	}
	if err := b.Put([]byte(id), bytes.Clone(v)); err != nil {
		return fmt.Errorf("binding of thing %q: %w", id, err)
	}
	return nil
}

// putBindings places the binding changes the batch's Puts and Deletes did
// not: in the stored Thing's record (rewritten with its metadata and
// summary as they are), else in the bucket.
func putBindings(tx *bolt.Tx, edits bindingEdits) error {
	if len(edits) == 0 {
		return nil
	}
	metas := tx.Bucket(bucketThingMeta)
	for _, id := range slices.Sorted(maps.Keys(edits)) {
		v := edits[id]
		old := metas.Get([]byte(id))
		if old == nil {
			if err := putBucketBinding(tx, id, v); err != nil {
				return err
			}
			continue
		}
		meta, _, sum, err := splitMeta(old)
		if err != nil {
			return fmt.Errorf("thing %q: %w", id, err)
		}
		if v == nil && sum == nil {
			meta = bytes.Clone(meta) // joinMeta would return the old value's bytes
		}
		if err := metas.Put([]byte(id), joinMeta(meta, v, sum)); err != nil {
			return fmt.Errorf("thing %q: %w", id, err)
		}
		if err := putBucketBinding(tx, id, nil); err != nil { // a schema 1 store's copy
			return err
		}
	}
	return nil
}
