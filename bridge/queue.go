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
	"time"

	"github.com/eclipse/paho.golang/autopaho/queue"
	"github.com/eclipse/paho.golang/packets"
)

// fileQueue is the durable outbox of QoS 1/2 messages for the upstream
// (autopaho's queue.Queue): one file per message in a directory, named by
// a sequence number, so it is taken in the order it was put. autopaho's
// own file queue orders by modification time, which the file system
// records at a coarse resolution: a burst of messages queued within one
// tick would go out in any order. Files are neither synced nor written
// under a temporary name and renamed (on ext4 a rename forces the data
// out, ~0.4 ms a message here): a killed process loses nothing it
// acknowledged, a power cut may. A message cut short by a crash was never
// acknowledged to its publisher; it fails to decode and is set aside
// (Quarantine, *.corrupt).
type fileQueue struct {
	dir  string
	mu   sync.Mutex
	seqs []uint64 // queued, oldest first
	// since is when each message of seqs was queued (its file's
	// modification time after a restart).
	since []time.Time
	next  uint64
	wait  []chan struct{}
	// sent is called for each message removed once sent, expired for
	// each dropped because its Message Expiry Interval passed (nil: none).
	sent, expired func()
}

const queueExt = ".msg"

// openQueue opens (creating it) the queue in dir and counts what an
// earlier run left there.
func openQueue(dir string) (*fileQueue, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the bridge queue %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read the bridge queue %s: %w", dir, err)
	}
	q := &fileQueue{dir: dir}
	for _, e := range entries {
		name := e.Name()
		n, err := strconv.ParseUint(strings.TrimSuffix(name, queueExt), 10, 64)
		if err != nil || !strings.HasSuffix(name, queueExt) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		q.seqs = append(q.seqs, n)
		q.since = append(q.since, info.ModTime())
		q.next = max(q.next, n+1)
	}
	order := make([]int, len(q.seqs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(q.seqs[a], q.seqs[b]) })
	seqs, since := make([]uint64, len(order)), make([]time.Time, len(order))
	for i, j := range order {
		seqs[i], since[i] = q.seqs[j], q.since[j]
	}
	q.seqs, q.since = seqs, since
	return q, nil
}

func (q *fileQueue) path(seq uint64) string {
	return filepath.Join(q.dir, fmt.Sprintf("%020d%s", seq, queueExt))
}

// Len is the number of queued messages.
func (q *fileQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.seqs)
}

// Oldest is when the oldest queued message was queued (zero: none).
func (q *fileQueue) Oldest() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.since) == 0 {
		return time.Time{}
	}
	return q.since[0]
}

// Wait returns a channel closed once the queue holds something.
func (q *fileQueue) Wait() chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := make(chan struct{})
	if len(q.seqs) > 0 {
		close(c)
		return c
	}
	q.wait = append(q.wait, c)
	return c
}

// Enqueue writes p as the newest message.
func (q *fileQueue) Enqueue(p io.Reader) error {
	data, err := io.ReadAll(p)
	if err != nil {
		return fmt.Errorf("cannot read a message to queue: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	seq := q.next
	if err := os.WriteFile(q.path(seq), data, 0o600); err != nil {
		_ = os.Remove(q.path(seq))
		return fmt.Errorf("cannot queue a message: %w", err)
	}
	q.next++
	q.seqs = append(q.seqs, seq)
	q.since = append(q.since, time.Now())
	for _, c := range q.wait {
		close(c)
	}
	q.wait = nil
	return nil
}

// Peek returns the oldest message, queue.ErrEmpty when there is none.
func (q *fileQueue) Peek() (queue.Entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.seqs) > 0 {
		seq := q.seqs[0]
		data, err := os.ReadFile(q.path(seq))
		if errors.Is(err, os.ErrNotExist) {
			q.seqs, q.since = q.seqs[1:], q.since[1:]
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cannot read the bridge queue: %w", err)
		}
		data, live := expire(data, time.Since(q.since[0]))
		if !live {
			_ = os.Remove(q.path(seq))
			q.seqs, q.since = q.seqs[1:], q.since[1:]
			if q.expired != nil {
				q.expired()
			}
			continue
		}
		return &queueEntry{q: q, seq: seq, data: data}, nil
	}
	return nil, queue.ErrEmpty
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

// remove deletes message seq (renamed aside first when quarantined).
func (q *fileQueue) remove(seq uint64, quarantine bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var err error
	if quarantine {
		err = os.Rename(q.path(seq), q.path(seq)+".corrupt")
	} else {
		err = os.Remove(q.path(seq))
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot remove a message from the bridge queue: %w", err)
	}
	if i := slices.Index(q.seqs, seq); i >= 0 {
		q.seqs = slices.Delete(q.seqs, i, i+1)
		q.since = slices.Delete(q.since, i, i+1)
		if !quarantine && q.sent != nil {
			q.sent()
		}
	}
	if len(q.seqs) == 0 {
		return queue.ErrEmpty
	}
	return nil
}

type queueEntry struct {
	q    *fileQueue
	seq  uint64
	data []byte
}

func (e *queueEntry) Reader() (io.Reader, error) { return bytes.NewReader(e.data), nil }
func (e *queueEntry) Leave() error               { return nil }
func (e *queueEntry) Remove() error              { return e.q.remove(e.seq, false) }
func (e *queueEntry) Quarantine() error          { return e.q.remove(e.seq, true) }
