// Package store keeps the hub's Things, change-feed log, admin tokens, MQTT
// broker state and MQTT credentials in a single bbolt file (hub.db in the
// data directory). It implements hub.Store, hub.TokenStore,
// brokerstate.Store and hub.CredentialStore.
//
// Every Commit is one read-write transaction that bbolt fsyncs before
// returning, so a Commit that returned nil survives a crash.
package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// FileName is the name of the database file inside the data directory.
const FileName = "hub.db"

// SchemaVersion is the layout version of the stores this version writes.
// Open refuses a store written by a newer version rather than misreading
// it, and marks an older one as its own (the newer layout reads the older).
// 2: a stored Thing's key binding is in its thingmeta record (binding.go);
// a hub of schema 1 would not see it, so it must not open such a store.
const SchemaVersion = 2

// Defaults applied by Open for zero Options fields.
const (
	DefaultEventLogSize = 1000
	DefaultLockTimeout  = time.Second
)

// loadChunk is how many Things LoadThings reads per read transaction.
const loadChunk = 256

// ErrLocked is matched (errors.Is) by the error Open returns when another
// process holds the data directory's file lock.
var ErrLocked = errors.New("data directory is locked by another process")

// Options tunes Open. The zero value is usable.
type Options struct {
	// EventLogSize bounds the event log; Commit keeps the newest
	// EventLogSize events. 0 means DefaultEventLogSize.
	EventLogSize int
	// LockTimeout is how long Open waits for the file lock. 0 means
	// DefaultLockTimeout.
	LockTimeout time.Duration
}

var (
	bucketMeta      = []byte("meta")
	bucketThings    = []byte("things")
	bucketThingMeta = []byte("thingmeta")
	bucketEvents    = []byte("events")
	bucketTokens    = []byte("tokens")
	bucketTokenHash = []byte("tokenhash") // hash → token ID

	keyHubID   = []byte("hubid")
	keySchema  = []byte("schema")
	keyLastSeq = []byte("lastseq")
)

// DB is every store the domain and the broker adapter ask for; the checks
// keep a changed interface from compiling past it.
var (
	_ hub.Store           = (*DB)(nil)
	_ hub.PendingStore    = (*DB)(nil)
	_ hub.TokenStore      = (*DB)(nil)
	_ hub.CredentialStore = (*DB)(nil)
	_ brokerstate.Store   = (*DB)(nil)
)

// DB is the bbolt-backed store. It is safe for concurrent use; Commit is
// meant to be called by one goroutine at a time (bbolt serialises writers
// anyway).
type DB struct {
	db           *bolt.DB
	path         string
	hubID        string
	eventLogSize uint64
}

var (
	_ hub.Store      = (*DB)(nil)
	_ hub.TokenStore = (*DB)(nil)
)

// lockedError reports a held file lock; it matches both ErrLocked and the
// bbolt cause.
type lockedError struct {
	dir     string
	timeout time.Duration
	err     error
}

func (e *lockedError) Error() string {
	return fmt.Sprintf("cannot open data directory %q: it is in use by another lmos-hub process (no file lock after %s)", e.dir, e.timeout)
}

func (e *lockedError) Unwrap() []error { return []error{ErrLocked, e.err} }

// Open opens (creating if needed) the store in dir.
func Open(dir string, opts Options) (*DB, error) {
	if opts.EventLogSize <= 0 {
		opts.EventLogSize = DefaultEventLogSize
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create data directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	// NoSync stays false: durability of Commit depends on bbolt's fsync.
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, &lockedError{dir: dir, timeout: opts.LockTimeout, err: err}
		}
		return nil, fmt.Errorf("cannot open data directory %q: %w", dir, err)
	}
	s := &DB{db: bdb, path: path, eventLogSize: uint64(opts.EventLogSize)}
	if err := bdb.Update(s.init); err != nil {
		bdb.Close()
		return nil, fmt.Errorf("cannot open data directory %q: %w", dir, err)
	}
	return s, nil
}

// init creates the buckets, the hub id and the schema version on first
// open, and checks the schema version on later ones.
func (s *DB) init(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketMeta, bucketThings, bucketThingMeta, bucketEvents, bucketTokens, bucketTokenHash, bucketBindings} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("cannot create bucket %s: %w", name, err)
		}
	}
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keySchema); v != nil {
		if len(v) != 8 {
			return errors.New("corrupt schema version")
		}
		got := binary.BigEndian.Uint64(v)
		if got > SchemaVersion {
			return fmt.Errorf("store schema version %d is newer than this lmos-hub supports (%d)", got, SchemaVersion)
		}
		if got < SchemaVersion {
			if err := meta.Put(keySchema, u64(SchemaVersion)); err != nil {
				return fmt.Errorf("cannot write schema version: %w", err)
			}
		}
	} else if err := meta.Put(keySchema, u64(SchemaVersion)); err != nil {
		return fmt.Errorf("cannot write schema version: %w", err)
	}
	if v := meta.Get(keyHubID); v != nil {
		s.hubID = string(v)
		return nil
	}
	s.hubID = uuid.NewString()
	if err := meta.Put(keyHubID, []byte(s.hubID)); err != nil {
		return fmt.Errorf("cannot write hub id: %w", err)
	}
	return nil
}

// Close closes the database file and releases its lock.
func (s *DB) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("cannot close store: %w", err)
	}
	return nil
}

// Size returns the size of the database file in bytes, or 0 if it cannot
// be read.
func (s *DB) Size() int64 {
	fi, err := os.Stat(s.path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// Ping checks that the database answers a read transaction; it fails once
// the store is closed.
func (s *DB) Ping() error {
	if err := s.db.View(func(*bolt.Tx) error { return nil }); err != nil {
		return fmt.Errorf("cannot read the store: %w", err)
	}
	return nil
}

// Backup writes a consistent snapshot of the whole database to w, while
// the store stays in use. The output is itself a valid hub.db.
func (s *DB) Backup(w io.Writer) (int64, error) {
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("cannot back up store: %w", err)
	}
	return n, nil
}

// HubID returns the hub's UUID, created on first open.
func (s *DB) HubID() string { return s.hubID }

// LoadThings calls fn for every stored Thing in id (byte) order.
//
// It reads in chunks and calls fn outside any transaction, so fn may take
// its time (or even Commit) without pinning bbolt's mmap, which would block
// writers when the file grows. The flip side is that the walk is not one
// snapshot; it is meant for startup, before anything writes.
func (s *DB) LoadThings(fn func(hub.ThingRecord) error) error {
	var after []byte // last id handed out; nil before the first chunk
	for {
		recs := make([]hub.ThingRecord, 0, loadChunk)
		err := s.db.View(func(tx *bolt.Tx) error {
			things, metas := tx.Bucket(bucketThings), tx.Bucket(bucketThingMeta)
			// Walk the metadata: walking the documents' bucket would read
			// (and keep resident) every page of the documents.
			c := metas.Cursor()
			var k, mv []byte
			if after == nil {
				k, mv = c.First()
			} else {
				k, mv = c.Seek(after)
				if bytes.Equal(k, after) {
					k, mv = c.Next()
				}
			}
			for ; k != nil && len(recs) < loadChunk; k, mv = c.Next() {
				rec := hub.ThingRecord{ID: string(k)}
				meta, _, sum, err := splitMeta(mv)
				if err != nil {
					return fmt.Errorf("thing %q: %w", k, err)
				}
				if err := json.Unmarshal(meta, &rec.Meta); err != nil {
					return fmt.Errorf("thing %q: cannot decode metadata: %w", k, err)
				}
				if sum != nil {
					rec.Summary = bytes.Clone(sum)
				} else if raw := things.Get(k); raw != nil {
					rec.Raw = bytes.Clone(raw) // to be parsed and summarised
				} else {
					return fmt.Errorf("thing %q has metadata but no document", k)
				}
				recs = append(recs, rec)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("cannot load things: %w", err)
		}
		for _, rec := range recs {
			if err := fn(rec); err != nil {
				return err
			}
		}
		if len(recs) < loadChunk {
			return nil
		}
		after = []byte(recs[len(recs)-1].ID)
	}
}

// ThingRaw returns a copy of the stored document of Thing id, or an
// hub.ENOTFOUND error.
func (s *DB) ThingRaw(id string) ([]byte, error) {
	var raw []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		raw = bytes.Clone(tx.Bucket(bucketThings).Get([]byte(id)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot read thing: %w", err)
	}
	if raw == nil {
		return nil, hub.Errorf(hub.ENOTFOUND, "thing %q not found", id)
	}
	return raw, nil
}

// ThingsRaw calls fn with the stored bytes of each id, in one read
// transaction; ids that are not stored are skipped. raw is only valid
// during the call (it points into the memory-mapped file), so a list page
// is served without copying every document first.
func (s *DB) ThingsRaw(ids []string, fn func(id string, raw []byte) error) error {
	if err := s.db.View(func(tx *bolt.Tx) error { return eachRaw(tx, ids, fn) }); err != nil {
		return fmt.Errorf("cannot read things: %w", err)
	}
	return nil
}

// eachRaw calls fn with the stored bytes of each id that tx holds.
func eachRaw(tx *bolt.Tx, ids []string, fn func(id string, raw []byte) error) error {
	b := tx.Bucket(bucketThings)
	for _, id := range ids {
		if raw := b.Get([]byte(id)); raw != nil {
			if err := fn(id, raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// ThingsRawAt is ThingsRaw in a transaction whose last event sequence is
// seq (Commit writes it with the batch), else hub.ErrStale.
func (s *DB) ThingsRawAt(seq uint64, ids []string, fn func(id string, raw []byte) error) error {
	err := s.db.View(func(tx *bolt.Tx) error {
		if getU64(tx.Bucket(bucketMeta).Get(keyLastSeq)) != seq {
			return hub.ErrStale
		}
		return eachRaw(tx, ids, fn)
	})
	if err != nil {
		return fmt.Errorf("cannot read things: %w", err)
	}
	return nil
}

// Commit applies b in one durable transaction: Puts, then Deletes (so a
// batch should not name one id in both), then Credentials and
// DeleteCredentials, then Bindings and DeleteBindings (each in its Thing's
// record if stored, else in the bindings bucket: binding.go), then Groups,
// DeleteGroups, StatusList and MemberCredentials (group.go), then Events,
// then trims the event log. Event seqs must be strictly increasing and
// above LastSeq; otherwise nothing is applied, because feed readers rely
// on seqs never repeating.
func (s *DB) Commit(b *hub.Batch) error {
	if batchEmpty(b) {
		return nil
	}
	// Encode before the transaction to keep the writer lock short.
	metas, events := make([][]byte, len(b.Puts)), make([][]byte, len(b.Events))
	edits, err := encodeBatch(b, metas, events)
	if err != nil {
		return fmt.Errorf("cannot commit batch: %w", err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := putThings(tx, b.Puts, metas, edits); err != nil {
			return err
		}
		if err := deleteThings(tx, b.Deletes, edits); err != nil {
			return err
		}
		if err := putCredentials(tx, b.Credentials); err != nil {
			return err
		}
		if err := deleteCredentials(tx, b.DeleteCredentials); err != nil {
			return err
		}
		if err := deletePending(tx, b.DeletePending); err != nil {
			return err
		}
		if err := putBindings(tx, edits); err != nil {
			return err
		}
		if err := putGroups(tx, b.Groups, b.DeleteGroups, b.StatusList); err != nil {
			return err
		}
		if err := putMemberCredentials(tx, b.MemberCredentials); err != nil {
			return err
		}
		return s.appendEvents(tx, b.Events, events)
	})
	if err != nil {
		return fmt.Errorf("cannot commit batch: %w", err)
	}
	return nil
}

// batchEmpty reports whether b has nothing Commit writes. DeletePending
// is not counted: it comes only with the registration that approves the
// join (hub.Batch).
func batchEmpty(b *hub.Batch) bool {
	return b == nil || len(b.Puts)+len(b.Deletes)+len(b.Events)+len(b.Credentials)+len(b.DeleteCredentials)+len(b.Bindings)+len(b.DeleteBindings)+len(b.Groups)+len(b.DeleteGroups)+len(b.MemberCredentials) == 0 && b.StatusList == nil
}

// encodeBatch encodes b's metadata into metas and its events into events
// (by index, each as long as its list), in that order with the binding
// edits between, stopping at the first error. The caller makes the slices
// so that small ones can stay on its stack.
func encodeBatch(b *hub.Batch, metas, events [][]byte) (bindingEdits, error) {
	for i, p := range b.Puts {
		m, err := json.Marshal(p.Meta)
		if err != nil {
			return nil, fmt.Errorf("thing %q: cannot encode metadata: %w", p.ID, err)
		}
		metas[i] = m
	}
	edits, err := encodeBindings(b.Bindings, b.DeleteBindings)
	if err != nil {
		return nil, err
	}
	for i, e := range b.Events {
		v, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("event %d: cannot encode: %w", e.Seq, err)
		}
		events[i] = v
	}
	return edits, nil
}

// putThings writes each put's document (if it has one) and its metadata
// record, which carries the Thing's binding and summary.
func putThings(tx *bolt.Tx, puts []hub.ThingRecord, metas [][]byte, edits bindingEdits) error {
	things, thingMeta := tx.Bucket(bucketThings), tx.Bucket(bucketThingMeta)
	for i, p := range puts {
		if p.ID == "" {
			return errors.New("thing with empty id")
		}
		var held, sum []byte
		if old := thingMeta.Get([]byte(p.ID)); old != nil {
			var err error
			if _, held, sum, err = splitMeta(old); err != nil {
				return fmt.Errorf("thing %q: %w", p.ID, err)
			}
		}
		// A record without Raw changes only the metadata (presence)
		// and keeps the stored summary.
		if p.Raw != nil || p.Summary != nil {
			sum = p.Summary
		}
		if p.Raw != nil {
			if err := things.Put([]byte(p.ID), p.Raw); err != nil {
				return fmt.Errorf("thing %q: %w", p.ID, err)
			}
		}
		bind, err := recordBinding(tx, p.ID, held, edits)
		if err != nil {
			return err
		}
		// joinMeta copies held and sum out of the old value.
		if err := thingMeta.Put([]byte(p.ID), joinMeta(metas[i], bind, sum)); err != nil {
			return fmt.Errorf("thing %q: %w", p.ID, err)
		}
	}
	return nil
}

// deleteThings deletes each Thing's document and metadata; a binding held
// in its record moves to the bindings bucket unless edits drop it.
func deleteThings(tx *bolt.Tx, ids []string, edits bindingEdits) error {
	things, thingMeta := tx.Bucket(bucketThings), tx.Bucket(bucketThingMeta)
	for _, id := range ids {
		if id == "" {
			continue // cannot exist
		}
		if old := thingMeta.Get([]byte(id)); old != nil {
			_, held, _, err := splitMeta(old)
			if err != nil {
				return fmt.Errorf("thing %q: %w", id, err)
			}
			if err := keepBinding(tx, id, held, edits); err != nil {
				return err
			}
		}
		if err := things.Delete([]byte(id)); err != nil {
			return fmt.Errorf("thing %q: %w", id, err)
		}
		if err := thingMeta.Delete([]byte(id)); err != nil {
			return fmt.Errorf("thing %q: %w", id, err)
		}
	}
	return nil
}

// appendEvents appends a batch's events (encoded) to the event log in tx
// and trims it.
func (s *DB) appendEvents(tx *bolt.Tx, evs []hub.Event, events [][]byte) error {
	if len(evs) == 0 {
		return nil
	}
	meta, log := tx.Bucket(bucketMeta), tx.Bucket(bucketEvents)
	last := getU64(meta.Get(keyLastSeq))
	for i, e := range evs {
		if e.Seq <= last {
			return fmt.Errorf("event seq %d is not above %d", e.Seq, last)
		}
		last = e.Seq
		if err := log.Put(u64(e.Seq), events[i]); err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
	}
	if err := meta.Put(keyLastSeq, u64(last)); err != nil {
		return fmt.Errorf("cannot update last seq: %w", err)
	}
	return s.trim(log, last)
}

// A thingmeta value is one of:
//   - the metadata as JSON (no summary, no binding);
//   - metaWithSummary, the JSON's length as a uvarint, the JSON and the
//     summary;
//   - metaWithBinding, the JSON's length as a uvarint, the JSON, the
//     binding's length as a uvarint, the binding (hub.Binding as JSON) and
//     the summary, if any, to the end (a summary is never empty).
//
// JSON never starts with either byte, so values written before summaries
// existed still read; a value without a binding is written as before
// bindings moved here, so an unsigned Thing's record did not change.
const (
	metaWithSummary = 0x00
	metaWithBinding = 0x01
)

// joinMeta builds a thingmeta value; binding and summary may be nil. The
// value is a new slice (binding and summary may alias the value it
// replaces), except with neither: then it is meta itself.
func joinMeta(meta, binding, summary []byte) []byte {
	if binding == nil && summary == nil {
		return meta
	}
	out := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(meta)+len(binding)+len(summary))
	if binding == nil {
		out = append(out, metaWithSummary)
		out = binary.AppendUvarint(out, uint64(len(meta)))
		out = append(out, meta...)
		return append(out, summary...)
	}
	out = append(out, metaWithBinding)
	out = binary.AppendUvarint(out, uint64(len(meta)))
	out = append(out, meta...)
	out = binary.AppendUvarint(out, uint64(len(binding)))
	out = append(out, binding...)
	return append(out, summary...)
}

// splitMeta returns the metadata JSON of a thingmeta value, its binding
// and its summary (each nil when it has none); all alias v.
func splitMeta(v []byte) (meta, binding, summary []byte, err error) {
	if len(v) == 0 || v[0] != metaWithSummary && v[0] != metaWithBinding {
		return v, nil, nil, nil
	}
	meta, rest, ok := cutLen(v[1:])
	if !ok {
		return nil, nil, nil, errors.New("corrupt metadata record")
	}
	if v[0] == metaWithSummary {
		return meta, nil, rest, nil
	}
	binding, rest, ok = cutLen(rest)
	if !ok || len(binding) == 0 {
		return nil, nil, nil, errors.New("corrupt metadata record")
	}
	if len(rest) == 0 {
		rest = nil
	}
	return meta, binding, rest, nil
}

// cutLen splits a uvarint length and that many bytes off the front of v.
func cutLen(v []byte) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(v)
	if w <= 0 || n > uint64(len(v)-w) {
		return nil, nil, false
	}
	return v[w : w+int(n)], v[w+int(n):], true
}

// trim deletes events with seq <= last-EventLogSize. Seqs are unique, so at
// most EventLogSize remain (exactly that many when seqs have no gaps), and
// the cost is proportional to what is deleted, not to the log size.
func (s *DB) trim(log *bolt.Bucket, last uint64) error {
	if last <= s.eventLogSize {
		return nil
	}
	cutoff := last - s.eventLogSize
	c := log.Cursor()
	// Re-seek with First after each Delete: Next after Cursor.Delete can
	// skip an entry in bbolt.
	for k, _ := c.First(); k != nil && getU64(k) <= cutoff; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return fmt.Errorf("cannot trim event log: %w", err)
		}
	}
	return nil
}

// LastSeq returns the highest event seq ever committed, 0 if none. It is
// kept in meta, so trimming the log does not lower it.
func (s *DB) LastSeq() (uint64, error) {
	var last uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		last = getU64(tx.Bucket(bucketMeta).Get(keyLastSeq))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("cannot read last seq: %w", err)
	}
	return last, nil
}

// EventsAfter calls fn, in seq order, for each event still in the log with
// Seq > seq.
//
// The events are copied out in one read transaction (a consistent snapshot,
// bounded by EventLogSize) and fn runs after it ends, so a slow consumer
// such as an SSE client cannot hold the transaction open and block writers.
func (s *DB) EventsAfter(seq uint64, fn func(hub.Event) error) error {
	if seq == ^uint64(0) {
		return nil
	}
	var evs []hub.Event
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEvents).Cursor()
		for k, v := c.Seek(u64(seq + 1)); k != nil; k, v = c.Next() {
			var e hub.Event
			// Unmarshal copies (RawMessage included), so nothing points into
			// the mmap after the transaction.
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("event %d: %w", getU64(k), err)
			}
			evs = append(evs, e)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot read events: %w", err)
	}
	for _, e := range evs {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// PutToken inserts or replaces the token with t.ID and keeps the hash
// index in step.
func (s *DB) PutToken(t hub.Token) error {
	if t.ID == "" || t.Hash == "" {
		return hub.Errorf(hub.EINVALID, "token needs an id and a hash")
	}
	v, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("cannot store token: %w", err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		tokens, index := tx.Bucket(bucketTokens), tx.Bucket(bucketTokenHash)
		if owner := index.Get([]byte(t.Hash)); owner != nil && string(owner) != t.ID {
			return hub.Errorf(hub.ECONFLICT, "token hash already in use")
		}
		if old := tokens.Get([]byte(t.ID)); old != nil {
			var ot hub.Token
			if err := json.Unmarshal(old, &ot); err != nil {
				return fmt.Errorf("cannot decode token %q: %w", t.ID, err)
			}
			if ot.Hash != t.Hash && ot.Hash != "" {
				if err := index.Delete([]byte(ot.Hash)); err != nil {
					return err
				}
			}
		}
		if err := tokens.Put([]byte(t.ID), v); err != nil {
			return err
		}
		return index.Put([]byte(t.Hash), []byte(t.ID))
	})
	if err != nil {
		return fmt.Errorf("cannot store token: %w", err)
	}
	return nil
}

// TokenByHash returns the token whose secret hashes to hash, or an
// hub.ENOTFOUND error. Revoked tokens are returned too; the caller checks.
func (s *DB) TokenByHash(hash string) (hub.Token, error) {
	var t hub.Token
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		id := tx.Bucket(bucketTokenHash).Get([]byte(hash))
		if id == nil {
			return nil
		}
		v := tx.Bucket(bucketTokens).Get(id)
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &t)
	})
	if err != nil {
		return hub.Token{}, fmt.Errorf("cannot read token: %w", err)
	}
	if !found {
		return hub.Token{}, hub.Errorf(hub.ENOTFOUND, "token not found")
	}
	return t, nil
}

// Tokens lists all tokens, revoked included, oldest first (by Created,
// then ID).
func (s *DB) Tokens() ([]hub.Token, error) {
	var ts []hub.Token
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTokens).ForEach(func(k, v []byte) error {
			var t hub.Token
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("cannot decode token %q: %w", k, err)
			}
			ts = append(ts, t)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list tokens: %w", err)
	}
	slices.SortFunc(ts, func(a, b hub.Token) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return ts, nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// getU64 decodes an 8-byte big-endian value; nil (absent) is 0.
func getU64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
