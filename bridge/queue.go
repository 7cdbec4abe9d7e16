package bridge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho/queue"
	"github.com/eclipse/paho.golang/packets"
)

// fileQueue is the durable outbox of QoS 1/2 messages for the upstream
// (autopaho's queue.Queue): an append-only log. Messages are appended as
// records to segment files ({first seq}.seg, a new one every segmentMax
// bytes and at each start) and a marker file (done) holds the sequence
// number of the oldest message not yet done; a segment is deleted once
// all its messages are done. A message is done once the upstream
// acknowledged it (QoS 1, linked to its packet in the session by link and
// acked) or once handed to the durable session (QoS 2). Opening reloads
// every record from the marker on, so a restart sends again whatever the
// upstream had not acknowledged. Nothing is synced (an fsync or a rename
// on ext4 costs ~0.4 ms a message here): a killed process loses nothing
// it acknowledged, a power cut may. A record cut short or damaged is set
// aside at load ({segment}.corrupt); one that does not decode is set
// aside when autopaho quarantines it ({seq}.corrupt).
type fileQueue struct {
	dir    string
	mu     sync.Mutex
	recs   []record // from the oldest message not done; recs[i] is seq base+i
	base   uint64
	first  int // recs before it are not queued (a hint for Peek)
	queued int // records waiting to be handed over
	segs   []*segment
	marker *os.File
	cur    int64 // the seq Peek handed out and not yet removed or left, -1: none
	closed bool
	wait   []chan struct{}
	// sent is called for each message handed over to the upstream
	// connection, expired for each dropped because its Message Expiry
	// Interval passed (nil: none).
	sent, expired func()
}

type record struct {
	seg    *segment
	off    int64 // of the data in seg
	n      int
	since  time.Time // when it was queued
	state  uint8
	linked bool // in the session awaiting its acknowledgement
	acked  bool // acknowledged (possibly before autopaho removed it)
	resend bool // its session packet was dropped before autopaho removed it
}

const (
	recQueued   = iota // waiting to be sent
	recInFlight        // sent, awaiting the upstream's acknowledgement
	recDone            // acknowledged, in the durable session, expired or set aside
)

type segment struct {
	first  uint64 // seq of its first record
	count  int    // records in it
	f      *os.File
	size   int64
	active bool // written by this run: appended to until segmentMax
}

const (
	segmentExt  = ".seg"
	markerName  = "done"
	oldQueueExt = ".msg" // one file per message, before the log
	recHeader   = 16     // length, CRC-32 (IEEE) of the data, queued at (unix ns)
	segmentMax  = 1 << 20
)

// openQueue opens (creating it) the queue in dir and loads what an
// earlier run left there.
func openQueue(dir string) (*fileQueue, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the bridge queue %s: %w", dir, err)
	}
	q := &fileQueue{dir: dir, cur: -1}
	var err error
	q.marker, err = os.OpenFile(filepath.Join(dir, markerName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open the bridge queue marker: %w", err)
	}
	var m [8]byte
	if n, _ := q.marker.ReadAt(m[:], 0); n == len(m) {
		q.base = binary.BigEndian.Uint64(m[:])
	}
	if err := q.load(); err != nil {
		q.close()
		return nil, err
	}
	if err := q.migrate(); err != nil {
		q.close()
		return nil, err
	}
	return q, nil
}

// load reads the segments in order, keeping the records from the marker
// on; a damaged tail is copied aside.
func (q *fileQueue) load() error {
	entries, err := os.ReadDir(q.dir)
	if err != nil {
		return fmt.Errorf("cannot read the bridge queue %s: %w", q.dir, err)
	}
	var firsts []uint64
	for _, e := range entries {
		n, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), segmentExt), 10, 64)
		if err == nil && strings.HasSuffix(e.Name(), segmentExt) {
			firsts = append(firsts, n)
		}
	}
	slices.Sort(firsts)
	start := q.base
	for _, first := range firsts {
		if err := q.loadSegment(first, start); err != nil {
			return err
		}
	}
	q.dropSegments()
	return nil
}

func (q *fileQueue) segPath(first uint64) string {
	return filepath.Join(q.dir, fmt.Sprintf("%020d%s", first, segmentExt))
}

func (q *fileQueue) loadSegment(first, start uint64) error {
	path := q.segPath(first)
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cannot read the bridge queue: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("cannot open the bridge queue: %w", err)
	}
	s := &segment{first: first, f: f, size: int64(len(data))}
	q.segs = append(q.segs, s)
	off := 0
	for off < len(data) {
		n, ok := readRecord(data[off:])
		if !ok {
			// Cut short or damaged (a power cut): kept aside, not sent.
			_ = os.WriteFile(path+".corrupt", data[off:], 0o600)
			break
		}
		seq := first + uint64(s.count)
		s.count++
		if seq >= start {
			if len(q.recs) == 0 {
				q.base = seq
			}
			for q.base+uint64(len(q.recs)) < seq { // lost with a damaged segment
				q.recs = append(q.recs, record{state: recDone})
			}
			since := time.Unix(0, int64(binary.BigEndian.Uint64(data[off+8:])))
			q.recs = append(q.recs, record{seg: s, off: int64(off + recHeader), n: n, since: since})
			q.queued++
		}
		off += recHeader + n
	}
	if s.count == 0 { // nothing readable: its name is free again
		_ = f.Close()
		_ = os.Remove(path)
		q.segs = q.segs[:len(q.segs)-1]
	}
	return nil
}

// readRecord checks the record at the start of b and returns the length
// of its data.
func readRecord(b []byte) (int, bool) {
	if len(b) < recHeader {
		return 0, false
	}
	n := int(binary.BigEndian.Uint32(b))
	if n > len(b)-recHeader || crc32.ChecksumIEEE(b[recHeader:recHeader+n]) != binary.BigEndian.Uint32(b[4:]) {
		return 0, false
	}
	return n, true
}

// migrate moves the messages of the one-file-per-message outbox of
// earlier versions into the log, oldest first.
func (q *fileQueue) migrate() error {
	old, _ := filepath.Glob(filepath.Join(q.dir, "*"+oldQueueExt))
	slices.Sort(old) // zero-padded sequence numbers
	for _, path := range old {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("cannot read the bridge queue: %w", err)
		}
		since := time.Now()
		if info, err := os.Stat(path); err == nil {
			since = info.ModTime()
		}
		if err := q.appendLocked(data, since); err != nil {
			return err
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("cannot remove a migrated bridge queue file: %w", err)
		}
	}
	return nil
}

func (q *fileQueue) close() {
	for _, s := range q.segs {
		_ = s.f.Close()
	}
	q.segs = nil
	if q.marker != nil {
		_ = q.marker.Close()
	}
}

// Close closes the queue's files.
func (q *fileQueue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.close()
	q.closed = true
}

var errQueueClosed = errors.New("the bridge queue is closed")

// Len is the number of messages not yet done: queued or awaiting the
// upstream's acknowledgement.
func (q *fileQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.recs)
}

// Oldest is when the oldest message not yet done was queued (zero: none).
func (q *fileQueue) Oldest() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.recs) == 0 {
		return time.Time{}
	}
	return q.recs[0].since
}

// Wait returns a channel closed once the queue holds something to send.
func (q *fileQueue) Wait() chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := make(chan struct{})
	if q.queued > 0 {
		close(c)
		return c
	}
	q.wait = append(q.wait, c)
	return c
}

// Enqueue appends p as the newest message.
func (q *fileQueue) Enqueue(p io.Reader) error {
	data, err := io.ReadAll(p)
	if err != nil {
		return fmt.Errorf("cannot read a message to queue: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.appendLocked(data, time.Now()); err != nil {
		return err
	}
	for _, c := range q.wait {
		close(c)
	}
	q.wait = nil
	return nil
}

// appendLocked writes a record at the end of the newest segment (a new
// one at start and when it is full).
func (q *fileQueue) appendLocked(data []byte, since time.Time) error {
	if q.closed {
		return fmt.Errorf("cannot queue a message: %w", errQueueClosed)
	}
	seq := q.base + uint64(len(q.recs))
	var s *segment
	if n := len(q.segs); n > 0 && q.segs[n-1].active && q.segs[n-1].size < segmentMax {
		s = q.segs[n-1]
	} else {
		f, err := os.OpenFile(q.segPath(seq), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("cannot queue a message: %w", err)
		}
		s = &segment{first: seq, f: f, active: true}
		q.segs = append(q.segs, s)
	}
	buf := make([]byte, recHeader+len(data))
	binary.BigEndian.PutUint32(buf, uint32(len(data)))
	binary.BigEndian.PutUint32(buf[4:], crc32.ChecksumIEEE(data))
	binary.BigEndian.PutUint64(buf[8:], uint64(since.UnixNano()))
	copy(buf[recHeader:], data)
	if _, err := s.f.WriteAt(buf, s.size); err != nil {
		return fmt.Errorf("cannot queue a message: %w", err)
	}
	q.recs = append(q.recs, record{seg: s, off: s.size + recHeader, n: len(data), since: since})
	s.size += int64(len(buf))
	s.count++
	q.queued++
	return nil
}

// Peek returns the oldest message waiting to be sent, queue.ErrEmpty when
// there is none.
func (q *fileQueue) Peek() (queue.Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		i := q.first
		for i < len(q.recs) && q.recs[i].state != recQueued {
			i++
		}
		q.first = i
		if i == len(q.recs) {
			return nil, queue.ErrEmpty
		}
		if q.closed {
			return nil, fmt.Errorf("cannot read the bridge queue: %w", errQueueClosed)
		}
		r := &q.recs[i]
		data := make([]byte, r.n)
		if _, err := r.seg.f.ReadAt(data, r.off); err != nil {
			return nil, fmt.Errorf("cannot read the bridge queue: %w", err)
		}
		seq := q.base + uint64(i)
		data, live := expire(data, time.Since(r.since))
		if !live {
			q.finish(seq) // moves q.first with the records
			if q.expired != nil {
				q.expired()
			}
			continue
		}
		q.cur = int64(seq)
		return &queueEntry{q: q, seq: seq, data: data}, nil
	}
}

// rec returns the record of seq (nil: done and gone).
func (q *fileQueue) rec(seq uint64) *record {
	if seq < q.base || seq-q.base >= uint64(len(q.recs)) {
		return nil
	}
	return &q.recs[seq-q.base]
}

// finish marks seq done and moves the marker past the oldest messages
// done, deleting the segments that hold nothing else.
func (q *fileQueue) finish(seq uint64) {
	r := q.rec(seq)
	if r == nil || r.state == recDone {
		return
	}
	if r.state == recQueued {
		q.queued--
	}
	r.state = recDone
	q.trim()
}

func (q *fileQueue) trim() {
	k := 0
	for k < len(q.recs) && q.recs[k].state == recDone {
		k++
	}
	if k == 0 {
		return
	}
	q.recs = q.recs[k:] // append copies only what is left when it grows
	if len(q.recs) == 0 {
		q.recs = nil
	}
	q.base += uint64(k)
	q.first = max(q.first-k, 0)
	var m [8]byte
	binary.BigEndian.PutUint64(m[:], q.base)
	if q.marker != nil {
		_, _ = q.marker.WriteAt(m[:], 0)
	}
	q.dropSegments()
}

// dropSegments deletes the oldest segments once every message in them is
// done (the one being appended to only when full).
func (q *fileQueue) dropSegments() {
	for len(q.segs) > 0 {
		s := q.segs[0]
		if s.first+uint64(s.count) > q.base || (s.active && s.size < segmentMax && len(q.segs) == 1) {
			break
		}
		_ = s.f.Close()
		_ = os.Remove(q.segPath(s.first))
		q.segs = q.segs[1:]
	}
}

// link ties the message Peek handed out to the session packet autopaho
// stores for it (a QoS 1 PUBLISH): the message stays in the outbox until
// acked. false: no message is being sent.
func (q *fileQueue) link() (uint64, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cur < 0 {
		return 0, false
	}
	r := q.rec(uint64(q.cur))
	if r == nil {
		return 0, false
	}
	r.linked, r.acked, r.resend = true, false, false
	return uint64(q.cur), true
}

// acked notes the upstream's acknowledgement of seq.
func (q *fileQueue) acked(seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.rec(seq)
	if r == nil {
		return
	}
	if r.state == recQueued { // before autopaho removed it
		r.acked = true
		return
	}
	q.finish(seq)
}

// requeue sends seqs again, in order: the session that held them in
// flight is gone (the upstream lost it).
func (q *fileQueue) requeue(seqs []uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, seq := range seqs {
		r := q.rec(seq)
		switch {
		case r == nil || r.acked:
		case r.state == recInFlight:
			r.state, r.linked = recQueued, false
			q.queued++
			q.first = min(q.first, int(seq-q.base))
		case r.state == recQueued && r.linked: // still autopaho's: kept by remove
			r.linked, r.resend = false, true
		}
	}
	if q.queued > 0 {
		for _, c := range q.wait {
			close(c)
		}
		q.wait = nil
	}
}

// expire applies a queued PUBLISH's Message Expiry Interval after age in
// the queue: an expired message is not sent (live false), another goes
// with what is left of its interval, as a server forwards it (MQTT 5
// §3.3.2.3.3). What does not decode is left to autopaho (Quarantine).
func expire(data []byte, age time.Duration) (out []byte, live bool) {
	cp, err := packets.ReadPacket(bytes.NewReader(data))
	if err != nil {
		return data, true
	}
	pub, ok := cp.Content.(*packets.Publish)
	if !ok || pub.Properties == nil || pub.Properties.MessageExpiry == nil {
		return data, true
	}
	left := int64(*pub.Properties.MessageExpiry) - int64(age/time.Second)
	if left <= 0 {
		return nil, false
	}
	if left == int64(*pub.Properties.MessageExpiry) {
		return data, true
	}
	e := uint32(left)
	pub.Properties.MessageExpiry = &e
	var b bytes.Buffer
	if _, err := pub.ToControlPacket().WriteTo(&b); err != nil {
		return data, true
	}
	return b.Bytes(), true
}

// remove ends autopaho's hold on seq: sent (in flight until acked when
// linked, else done), or set aside when quarantined.
func (q *fileQueue) remove(seq uint64, quarantine bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cur == int64(seq) {
		q.cur = -1
	}
	r := q.rec(seq)
	if r != nil && r.state == recQueued && r.resend && !quarantine {
		r.resend = false // stays queued: sent again
		return nil
	}
	if r != nil && r.state == recQueued {
		switch {
		case quarantine:
			data := make([]byte, r.n)
			_, _ = r.seg.f.ReadAt(data, r.off)
			if err := os.WriteFile(filepath.Join(q.dir, fmt.Sprintf("%020d.corrupt", seq)), data, 0o600); err != nil {
				return fmt.Errorf("cannot set a message of the bridge queue aside: %w", err)
			}
			q.finish(seq)
		case r.linked && !r.acked:
			r.state = recInFlight
			q.queued--
		default:
			q.finish(seq)
		}
		if !quarantine && q.sent != nil {
			q.sent()
		}
	}
	if q.queued == 0 {
		return queue.ErrEmpty
	}
	return nil
}

// leave puts seq back for the next Peek.
func (q *fileQueue) leave(seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cur == int64(seq) {
		q.cur = -1
	}
}

type queueEntry struct {
	q    *fileQueue
	seq  uint64
	data []byte
}

func (e *queueEntry) Reader() (io.Reader, error) { return bytes.NewReader(e.data), nil }
func (e *queueEntry) Leave() error               { e.q.leave(e.seq); return nil }
func (e *queueEntry) Remove() error              { return e.q.remove(e.seq, false) }
func (e *queueEntry) Quarantine() error          { return e.q.remove(e.seq, true) }
