package bridge

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/eclipse/paho.golang/packets"
)

// sessionStore keeps the durable part of one side of the MQTT session
// for paho's session state: the QoS 2 packets in flight (a QoS 2
// PUBLISH, then its PUBREL; the PUBRECs of incoming QoS 2 messages), in
// memory and each in a file of its own, so that a restart completes what
// the upstream had not yet acknowledged. QoS 1 messages never reach it
// (clientSession keeps them in memory; the outbox holds them until
// acknowledged). paho's own file store syncs every packet to disk before
// it is sent; these files are neither synced nor renamed into place: a
// killed process loses nothing, a power cut may. Files are named
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
	return inOrder(s.seqs), nil
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

// clientSession is the client side of the session (packets sent to the
// upstream): a QoS 1 PUBLISH sent from the outbox is kept in memory only,
// tied to its outbox message (fileQueue.link), which stays there until
// the PUBACK deletes the packet; so after a restart the outbox sends it
// again and no file is written per packet. Every other packet (QoS 2)
// goes to the durable store, whose packet identifiers the upstream still
// holds after a restart.
type clientSession struct {
	q    *fileQueue
	disk *sessionStore
	mu   sync.Mutex
	next uint64
	// order is when each stored id was put (List's order), mem the
	// packets kept in memory and seq their outbox messages.
	order map[uint16]uint64
	mem   map[uint16][]byte
	seq   map[uint16]uint64
}

func newClientSession(q *fileQueue, disk *sessionStore) (*clientSession, error) {
	c := &clientSession{q: q, disk: disk, order: map[uint16]uint64{}, mem: map[uint16][]byte{}, seq: map[uint16]uint64{}}
	ids, err := disk.List()
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		c.order[id] = c.next
		c.next++
	}
	return c, nil
}

// Put stores the packet with id (replacing one stored under it).
func (c *clientSession) Put(id uint16, typ byte, w io.WriterTo) error {
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return fmt.Errorf("cannot encode a session packet: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A PUBLISH's first byte holds its QoS in bits 1-2.
	if typ == packets.PUBLISH && b.Len() > 0 && (b.Bytes()[0]>>1)&3 == 1 {
		if seq, ok := c.q.link(); ok {
			if err := c.disk.Delete(id); err != nil {
				return err
			}
			c.mem[id], c.seq[id] = b.Bytes(), seq
			c.order[id] = c.next
			c.next++
			return nil
		}
	}
	if err := c.disk.Put(id, typ, &b); err != nil {
		return err
	}
	delete(c.mem, id)
	delete(c.seq, id)
	c.order[id] = c.next
	c.next++
	return nil
}

// Get returns the packet stored under id.
func (c *clientSession) Get(id uint16) (io.ReadCloser, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.mem[id]; ok {
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	return c.disk.Get(id)
}

// Delete removes the packet stored under id: the upstream acknowledged
// it, so its outbox message is done.
func (c *clientSession) Delete(id uint16) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq, ok := c.forget(id); ok {
		c.q.acked(seq)
		return nil
	}
	return c.disk.Delete(id)
}

// forget drops id from the session; for a QoS 1 packet kept in memory it
// returns its outbox sequence (ok), else the packet is on disk. c.mu is held.
func (c *clientSession) forget(id uint16) (seq uint64, ok bool) {
	delete(c.order, id)
	if seq, ok = c.seq[id]; ok {
		delete(c.mem, id)
		delete(c.seq, id)
	}
	return seq, ok
}

// Quarantine drops a packet paho cannot decode; one kept in memory goes
// again from the outbox.
func (c *clientSession) Quarantine(id uint16) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq, ok := c.forget(id); ok {
		c.q.requeue([]uint64{seq})
		return nil
	}
	return c.disk.Quarantine(id)
}

// List returns the stored packet ids in the order they were put.
func (c *clientSession) List() ([]uint16, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return inOrder(c.order), nil
}

// Reset forgets every packet: the upstream has no session (any more), so
// the QoS 1 messages in flight go again from the outbox, in order.
func (c *clientSession) Reset() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	seqs := make([]uint64, 0, len(c.seq))
	for _, seq := range c.seq {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	c.q.requeue(seqs)
	c.order, c.mem, c.seq = map[uint16]uint64{}, map[uint16][]byte{}, map[uint16]uint64{}
	return c.disk.Reset()
}

// inOrder returns the packet ids of order sorted by when each was put.
func inOrder(order map[uint16]uint64) []uint16 {
	ids := slices.Collect(maps.Keys(order))
	slices.SortFunc(ids, func(a, b uint16) int { return cmp.Compare(order[a], order[b]) })
	return ids
}
