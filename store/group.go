package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
	bolt "go.etcd.io/bbolt"
)

// bucketGroups maps a group id to the group with its members (hub.Group,
// JSON); bucketStatus holds the one credential status list under
// keyStatusList (hub.StatusList, JSON: its bits are 16 KiB).
// bucketMemberCredentials maps "{gid}/{thing}" (a group id has no '/')
// to the member's signed membership credential, kept apart from the
// group so that the hub need not hold it in memory.
var (
	bucketGroups            = []byte("groups")
	bucketStatus            = []byte("status")
	bucketMemberCredentials = []byte("memberCredentials")
	keyStatusList           = []byte("memberships")
)

func memberCredentialKey(gid, thing string) []byte { return []byte(gid + "/" + thing) }

// storedGroup reads a group as stored, also as an older hub stored it:
// with each member's credential in the group's record.
type storedGroup struct {
	hub.Group
	Members []storedMember `json:"members"`
}

type storedMember struct {
	hub.Member
	Credential json.RawMessage `json:"credential,omitempty"`
}

// LoadGroups calls fn for every stored group, in id order. Credentials
// an older hub kept in the groups' records are moved to their own bucket
// first.
func (s *DB) LoadGroups(fn func(hub.Group) error) error {
	var groups []hub.Group
	var moved []hub.MemberCredential
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGroups)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var sg storedGroup
			if err := json.Unmarshal(v, &sg); err != nil {
				return fmt.Errorf("group %q: %w", k, err)
			}
			g := sg.Group
			g.ID = string(k)
			g.Members = make([]hub.Member, len(sg.Members))
			legacy := false
			for i, m := range sg.Members {
				g.Members[i] = m.Member
				if m.Credential != nil {
					g.Members[i].SetCredential(m.Credential)
					moved = append(moved, hub.MemberCredential{Group: g.ID, Thing: m.Thing, Credential: m.Credential})
					legacy = true
				}
			}
			if !legacy {
				return fn(g)
			}
			groups = append(groups, g) // rewritten below, then passed on
			return nil
		})
	})
	if err != nil || len(groups) == 0 {
		return err
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		if err := putGroups(tx, groups, nil, nil); err != nil {
			return err
		}
		return putMemberCredentials(tx, moved)
	}); err != nil {
		return fmt.Errorf("cannot move the membership credentials out of the groups: %w", err)
	}
	for _, g := range groups {
		if err := fn(g); err != nil {
			return err
		}
	}
	return nil
}

// MemberCredential returns the stored membership credential of thing in
// group gid (nil when there is none).
func (s *DB) MemberCredential(gid, thing string) (json.RawMessage, error) {
	var cred json.RawMessage
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketMemberCredentials); b != nil {
			if v := b.Get(memberCredentialKey(gid, thing)); v != nil {
				cred = bytes.Clone(v) // v lives only as long as tx
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read the credential of %q in %q: %w", thing, gid, err)
	}
	return cred, nil
}

// putMemberCredentials stores or drops membership credentials, in order.
func putMemberCredentials(tx *bolt.Tx, creds []hub.MemberCredential) error {
	if len(creds) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketMemberCredentials)
	if err != nil {
		return fmt.Errorf("cannot create bucket %s: %w", bucketMemberCredentials, err)
	}
	for _, c := range creds {
		if strings.Contains(c.Group, "/") || c.Group == "" {
			return fmt.Errorf("invalid group id %q", c.Group)
		}
		k := memberCredentialKey(c.Group, c.Thing)
		if c.Credential == nil {
			err = b.Delete(k)
		} else {
			err = b.Put(k, c.Credential)
		}
		if err != nil {
			return fmt.Errorf("credential of %q in %q: %w", c.Thing, c.Group, err)
		}
	}
	return nil
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
