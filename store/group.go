package store

import (
	"encoding/json"
	"fmt"

	"github.com/eclipse-lmos/lmos-hub/hub"
	bolt "go.etcd.io/bbolt"
)

// bucketGroups maps a group id to the group with its members (hub.Group,
// JSON); bucketStatus holds the one credential status list under
// keyStatusList (hub.StatusList, JSON: its bits are 16 KiB).
var (
	bucketGroups  = []byte("groups")
	bucketStatus  = []byte("status")
	keyStatusList = []byte("memberships")
)

// LoadGroups calls fn for every stored group, in id order.
func (s *DB) LoadGroups(fn func(hub.Group) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGroups)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var g hub.Group
			if err := json.Unmarshal(v, &g); err != nil {
				return fmt.Errorf("group %q: %w", k, err)
			}
			g.ID = string(k)
			return fn(g)
		})
	})
}

// LoadStatusList returns the stored credential status list.
func (s *DB) LoadStatusList() (hub.StatusList, error) {
	var st hub.StatusList
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketStatus)
		if b == nil {
			return nil
		}
		v := b.Get(keyStatusList)
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(v, &st); err != nil {
			return fmt.Errorf("credential status list: %w", err)
		}
		return nil
	})
	return st, err
}

// putGroups writes a batch's group changes in tx.
func putGroups(tx *bolt.Tx, puts []hub.Group, deletes []string, status *hub.StatusList) error {
	if len(puts)+len(deletes) > 0 {
		b, err := tx.CreateBucketIfNotExists(bucketGroups)
		if err != nil {
			return fmt.Errorf("cannot create bucket %s: %w", bucketGroups, err)
		}
		for _, g := range puts {
			if g.ID == "" {
				return fmt.Errorf("a group needs an id")
			}
			v, err := json.Marshal(g)
			if err != nil {
				return fmt.Errorf("group %q: %w", g.ID, err)
			}
			if err := b.Put([]byte(g.ID), v); err != nil {
				return fmt.Errorf("group %q: %w", g.ID, err)
			}
		}
		for _, id := range deletes {
			if err := b.Delete([]byte(id)); err != nil {
				return fmt.Errorf("group %q: %w", id, err)
			}
		}
	}
	if status == nil {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketStatus)
	if err != nil {
		return fmt.Errorf("cannot create bucket %s: %w", bucketStatus, err)
	}
	v, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("credential status list: %w", err)
	}
	if err := b.Put(keyStatusList, v); err != nil {
		return fmt.Errorf("credential status list: %w", err)
	}
	return nil
}
