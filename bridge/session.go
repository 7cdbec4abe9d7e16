package bridge

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// sessionStore keeps one side of the MQTT session (the QoS 1/2 packets in
// flight) for paho's session state: in memory, and each packet in a file
// of its own so that a restart resends what the upstream had not yet
// acknowledged. paho's own file store syncs every packet to disk before
// it is sent, which capped the bridge at the disk's sync rate (~550
// messages/s here, docs/PERFORMANCE.md "Bridge"); like the outbox
// (queue.go), these files are neither synced nor renamed into place: a
// killed process loses nothing, a power cut may, and a packet cut short
// is dropped by paho as corrupt while its message is still in the
// outbox (removed from there only once sent). Files are named
// {seq}-{packetID}.pkt, so List keeps the order packets were put in.
type sessionStore struct {
	dir  string
	mu   sync.Mutex
	next uint64
	seqs map[uint16]uint64 // packet id → sequence of its file
	data map[uint16][]byte
}

const sessionExt = ".pkt"

// openSessionStore loads what an earlier run left in dir.
func openSessionStore(dir string) (*sessionStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the bridge session %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read the bridge session %s: %w", dir, err)
	}
	s := &sessionStore{dir: dir, seqs: map[uint16]uint64{}, data: map[uint16][]byte{}}
	for _, e := range entries {
		name := e.Name()
		seqText, idText, ok := strings.Cut(strings.TrimSuffix(name, sessionExt), "-")
		seq, err1 := strconv.ParseUint(seqText, 10, 64)
		id, err2 := strconv.ParseUint(idText, 10, 16)
		if !strings.HasSuffix(name, sessionExt) || !ok || err1 != nil || err2 != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("cannot read the bridge session: %w", err)
		}
		if old, dup := s.seqs[uint16(id)]; dup && old > seq {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		s.seqs[uint16(id)], s.data[uint16(id)] = seq, b
		s.next = max(s.next, seq+1)
	}
	return s, nil
}

func (s *sessionStore) path(id uint16, seq uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d-%d%s", seq, id, sessionExt))
}

// Put stores the packet with id (replacing one stored under it).
func (s *sessionStore) Put(id uint16, _ byte, w io.WriterTo) error {
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return fmt.Errorf("cannot encode a session packet: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.next
	if err := os.WriteFile(s.path(id, seq), b.Bytes(), 0o600); err != nil {
		_ = os.Remove(s.path(id, seq))
		return fmt.Errorf("cannot store a session packet: %w", err)
	}
	s.next++
	if old, ok := s.seqs[id]; ok {
		_ = os.Remove(s.path(id, old))
	}
	s.seqs[id], s.data[id] = seq, b.Bytes()
	return nil
}

// Get returns the packet stored under id.
func (s *sessionStore) Get(id uint16) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.data[id]
	if !ok {
		return nil, fmt.Errorf("no session packet %d: %w", id, os.ErrNotExist)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Delete removes the packet stored under id.
func (s *sessionStore) Delete(id uint16) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleteLocked(id)
}

func (s *sessionStore) deleteLocked(id uint16) error {
	seq, ok := s.seqs[id]
	if !ok {
		return nil
	}
	delete(s.seqs, id)
	delete(s.data, id)
	if err := os.Remove(s.path(id, seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot delete a session packet: %w", err)
	}
	return nil
}

// Quarantine drops a packet paho cannot decode.
func (s *sessionStore) Quarantine(id uint16) error { return s.Delete(id) }

// List returns the stored packet ids in the order they were put.
func (s *sessionStore) List() ([]uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]uint16, 0, len(s.seqs))
	for id := range s.seqs {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uint16) int { return cmp.Compare(s.seqs[a], s.seqs[b]) })
	return ids, nil
}

// Reset deletes every stored packet.
func (s *sessionStore) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for id := range s.seqs {
		errs = append(errs, s.deleteLocked(id))
	}
	return errors.Join(errs...)
}
