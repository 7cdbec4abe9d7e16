package store

import (
	"encoding/json"
	"fmt"

	"github.com/eclipse-lmos/lmos-hub/hub"
	bolt "go.etcd.io/bbolt"
)

// bucketPeers maps a paired peer's DID to the peer (hub.Peer, JSON). It is
// made with the first pairing, so a hub that never pairs has none.
var bucketPeers = []byte("peers")

// LoadPeers calls fn for every paired peer, in DID order.
func (s *DB) LoadPeers(fn func(hub.Peer) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPeers)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var p hub.Peer
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("cannot decode peer %q: %w", k, err)
			}
			p.DID = string(k)
			return fn(p)
		})
	})
}

// PutPeer stores a paired peer, replacing one of the same DID.
func (s *DB) PutPeer(p hub.Peer) error {
	v, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("cannot store peer: %w", err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketPeers)
		if err != nil {
			return err
		}
		return b.Put([]byte(p.DID), v)
	})
	if err != nil {
		return fmt.Errorf("cannot store peer %s: %w", p.DID, err)
	}
	return nil
}

// DeletePeer removes a paired peer; an unknown one is no error.
func (s *DB) DeletePeer(did string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPeers)
		if b == nil {
			return nil
		}
		return b.Delete([]byte(did))
	})
	if err != nil {
		return fmt.Errorf("cannot delete peer %s: %w", did, err)
	}
	return nil
}
