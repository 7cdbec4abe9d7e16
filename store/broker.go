package store

import (
	"bytes"
	"fmt"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
	bolt "go.etcd.io/bbolt"
)

// Broker state and MQTT credentials were added after schema version 1
// without changing it: their buckets are created on first write, and
// readers treat a missing bucket as empty, so a store written by an older
// lmos-hub opens unchanged (and an older lmos-hub ignores the new buckets).
var (
	// bucketBroker holds one nested bucket per brokerstate.Record kind.
	bucketBroker = []byte("broker")
	// bucketCredentials maps a Thing id to the hex SHA-256 of its MQTT
	// password.
	bucketCredentials = []byte("credentials")
)

// brokerKinds are the brokerstate.Record kinds, each a bucket under
// bucketBroker.
var brokerKinds = map[string]bool{
	"retained":     true,
	"client":       true,
	"subscription": true,
	"inflight":     true,
}

var (
	_ brokerstate.Store   = (*DB)(nil)
	_ hub.CredentialStore = (*DB)(nil)
)

// ApplyBroker stores (Value non-nil) or deletes (Value nil) recs in one
// durable transaction, in order, so a later record for the same kind and
// key wins. A record with an unknown kind or an empty key fails the whole
// call before anything is written.
func (s *DB) ApplyBroker(recs []brokerstate.Record) error {
	for _, r := range recs {
		if !brokerKinds[r.Kind] {
			return fmt.Errorf("cannot apply broker records: %w", hub.Errorf(hub.EINVALID, "unknown broker record kind %q", r.Kind))
		}
		if r.Key == "" {
			return fmt.Errorf("cannot apply broker records: %w", hub.Errorf(hub.EINVALID, "broker %s record with empty key", r.Kind))
		}
	}
	if len(recs) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		parent, err := tx.CreateBucketIfNotExists(bucketBroker)
		if err != nil {
			return fmt.Errorf("cannot create bucket %s: %w", bucketBroker, err)
		}
		var b *bolt.Bucket // the bucket of kind; batches are mostly one kind
		kind := ""
		for _, r := range recs {
			if b == nil || r.Kind != kind {
				if b, err = parent.CreateBucketIfNotExists([]byte(r.Kind)); err != nil {
					return fmt.Errorf("cannot create bucket %s/%s: %w", bucketBroker, r.Kind, err)
				}
				kind = r.Kind
			}
			if r.Value == nil {
				err = b.Delete([]byte(r.Key))
			} else {
				err = b.Put([]byte(r.Key), r.Value)
			}
			if err != nil {
				return fmt.Errorf("%s %q: %w", r.Kind, r.Key, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot apply broker records: %w", err)
	}
	return nil
}

// LoadBroker calls fn for every stored record of kind, in key (byte)
// order, until fn returns an error, which LoadBroker returns as is.
//
// The records are copied out in one read transaction (a consistent
// snapshot) and fn runs after it ends, so fn may be slow, or even call
// ApplyBroker, without holding the transaction open. value is fn's to keep.
func (s *DB) LoadBroker(kind string, fn func(key string, value []byte) error) error {
	if !brokerKinds[kind] {
		return fmt.Errorf("cannot load broker records: %w", hub.Errorf(hub.EINVALID, "unknown broker record kind %q", kind))
	}
	type kv struct {
		key   string
		value []byte
	}
	var recs []kv
	err := s.db.View(func(tx *bolt.Tx) error {
		parent := tx.Bucket(bucketBroker)
		if parent == nil {
			return nil
		}
		b := parent.Bucket([]byte(kind))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				continue // a nested bucket; ApplyBroker never makes one
			}
			recs = append(recs, kv{string(k), bytes.Clone(v)})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot load broker records: %w", err)
	}
	for _, r := range recs {
		if err := fn(r.key, r.value); err != nil {
			return err
		}
	}
	return nil
}

// PutCredential stores hash (the hex SHA-256 of the Thing's MQTT password)
// for thingID in one durable transaction, replacing any earlier one.
func (s *DB) PutCredential(thingID, hash string) error {
	if thingID == "" || hash == "" {
		return hub.Errorf(hub.EINVALID, "credential needs a thing id and a hash")
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		return putCredentials(tx, []hub.CredentialRecord{{ThingID: thingID, Hash: hash}})
	})
	if err != nil {
		return fmt.Errorf("cannot store credential: %w", err)
	}
	return nil
}

// putCredentials writes credentials in tx (PutCredential, and Commit for
// the ones a join issues with its Thing).
func putCredentials(tx *bolt.Tx, creds []hub.CredentialRecord) error {
	if len(creds) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketCredentials)
	if err != nil {
		return fmt.Errorf("cannot create bucket %s: %w", bucketCredentials, err)
	}
	for _, c := range creds {
		if c.ThingID == "" || c.Hash == "" {
			return fmt.Errorf("credential of thing %q: needs a thing id and a hash", c.ThingID)
		}
		if err := b.Put([]byte(c.ThingID), []byte(c.Hash)); err != nil {
			return fmt.Errorf("credential of thing %q: %w", c.ThingID, err)
		}
	}
	return nil
}

// CredentialHash returns the stored hash for thingID, or a hub.ENOTFOUND
// *hub.Error.
func (s *DB) CredentialHash(thingID string) (string, error) {
	var hash string
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketCredentials); b != nil {
			if v := b.Get([]byte(thingID)); v != nil {
				hash, found = string(v), true
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("cannot read credential: %w", err)
	}
	if !found {
		return "", hub.Errorf(hub.ENOTFOUND, "no credential for thing %q", thingID)
	}
	return hash, nil
}

// deleteCredentials removes credentials in tx (Commit, for Things their
// holder deregistered); an absent one is not an error.
func deleteCredentials(tx *bolt.Tx, ids []string) error {
	b := tx.Bucket(bucketCredentials)
	if b == nil {
		return nil // none was ever stored
	}
	for _, id := range ids {
		if id == "" {
			continue // cannot exist
		}
		if err := b.Delete([]byte(id)); err != nil {
			return fmt.Errorf("credential of thing %q: %w", id, err)
		}
	}
	return nil
}
