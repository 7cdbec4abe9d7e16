package mqtt

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"

	"github.com/eclipse-lmos/lmos-hub/internal/brokerstate"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// wakeThing joins a Thing and returns its credentials and the topic of
// one of its properties.
func wakeThing(t *testing.T, e *env, id string) (*credentials, string) {
	return e.thing(t, id), lmos.ThingsPrefix + lmos.TopicKey(id) + "/properties/state"
}

// mosquittoRetain publishes payload retained on topic at QoS 1 with
// mosquitto_pub (MQTT 5) as the Thing of cred, failing on a non-zero exit.
func mosquittoRetain(t *testing.T, e *env, cred *credentials, topic, payload string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(e.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, requireBin(t, "mosquitto_pub"), "-h", host, "-p", port, "-V", "mqttv5",
		"-u", cred.Username, "-P", cred.Password, "-q", "1", "-r", "-t", topic, "-m", payload).CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, out)
	}
}

// storedRetained is the payload of the retained message on topic in db
// ("" for none).
func storedRetained(t *testing.T, db brokerstate.Store, topic string) string {
	t.Helper()
	var got string
	err := db.LoadBroker(recRetained, func(key string, value []byte) error {
		if key != topic {
			return nil
		}
		var m storage.Message
		if err := m.UnmarshalBinary(value); err != nil {
			return err
		}
		got = string(m.Payload)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// housekeeping returns the stacks of goroutines in the broker's periodic
// housekeeping: the persistence flush (persist.go).
func housekeeping() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "/mqtt/persist.go:") {
			found = append(found, g)
		}
	}
	return found
}

// timersArmed reports whether the persistence flush timer is armed.
func timersArmed(b *Broker) bool {
	b.state.mu.Lock()
	flush := b.state.timer != nil
	b.state.mu.Unlock()
	return flush
}

// TestIdleBrokerHousekeepsNothing: once a client has connected, left state
// to write (a retained message) and gone, and the flush interval has
// passed, the broker keeps no goroutine and no timer for
// its housekeeping: an idle hub is not woken (issue 16).
func TestIdleBrokerHousekeepsNothing(t *testing.T) {
	e := newEnv(t, nil)
	cred, topic := wakeThing(t, e, "urn:wake:idle")
	mosquittoRetain(t, e, cred, topic, "on")
	var last []string
	defer func() {
		if t.Failed() {
			t.Logf("housekeeping goroutines:\n%s", strings.Join(last, "\n\n"))
		}
	}()
	// It goes quiet after writing, not instead of it: the write is waited
	// for first (a flush in progress has disarmed its timer already).
	testwait.Eventually(t, 10*time.Second, "the retained message stored", func() bool {
		return storedRetained(t, e.db, topic) == "on"
	})
	testwait.Eventually(t, 10*time.Second, "no housekeeping goroutine or timer", func() bool {
		last = housekeeping()
		return len(last) == 0 && !timersArmed(e.b)
	})
}

// TestPersistWritesWithoutClose: a change is written by the timer its
// batch armed, with the broker running (not by Close), and a change after
// that flush arms the timer again.
func TestPersistWritesWithoutClose(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.FlushInterval = 50 * time.Millisecond })
	cred, topic := wakeThing(t, e, "urn:wake:flush")
	for _, msg := range []string{"one", "two"} {
		mosquittoRetain(t, e, cred, topic, msg)
		testwait.Eventually(t, 5*time.Second, "retained "+msg+" written", func() bool {
			return storedRetained(t, e.db, topic) == msg
		})
	}
}

// flakyStore is a real store whose ApplyBroker fails while fails is
// positive and can be held (hold) to see what runs meanwhile.
type flakyStore struct {
	brokerstate.Store
	t       testing.TB
	fails   atomic.Int32
	calls   atomic.Int32
	running atomic.Int32
	closed  atomic.Bool // persistence.close returned: no call may come
	hold    chan struct{}
	entered chan struct{}
}

func (s *flakyStore) ApplyBroker(recs []brokerstate.Record) error {
	s.calls.Add(1)
	if s.running.Add(1) > 1 {
		s.t.Error("two flushes at once")
	}
	defer s.running.Add(-1)
	if s.closed.Load() {
		s.t.Error("a flush after close returned")
	}
	if s.hold != nil {
		s.entered <- struct{}{}
		<-s.hold
	}
	if s.fails.Add(-1) >= 0 {
		return errors.New("disk full")
	}
	return s.Store.ApplyBroker(recs)
}

func newFlakyStore(t *testing.T) (*flakyStore, *store.DB) {
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &flakyStore{Store: db, t: t}, db
}

func retainedMsg(topic, payload string) *storage.Message {
	return &storage.Message{ID: topic, T: storage.RetainedKey, TopicName: topic, Payload: []byte(payload)}
}

// TestPersistRetriesFailedFlush: a timed flush that fails is retried
// after another interval until it succeeds, with no further change to arm
// it.
func TestPersistRetriesFailedFlush(t *testing.T) {
	fs, db := newFlakyStore(t)
	fs.fails.Store(2)
	log := slog.New(slog.NewTextHandler(testLog{t}, nil))
	p := newPersistence(fs, log, 20*time.Millisecond)
	p.start()
	p.set(recRetained, "wake/retry", retainedMsg("wake/retry", "v"))
	testwait.Eventually(t, 5*time.Second, "written after two failures", func() bool {
		return storedRetained(t, db, "wake/retry") == "v"
	})
	if n := fs.calls.Load(); n != 3 {
		t.Fatalf("%d writes, want 2 failed and 1 done", n)
	}
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	if n := fs.calls.Load(); n != 3 {
		t.Fatalf("close wrote again with nothing pending (%d writes)", n)
	}
}

// TestPersistCloseWaitsForTimedFlush: close, called while a timed flush is
// writing, waits for it and then writes what changed meanwhile; nothing is
// written after close returns (the store may be closed next) and never
// two batches at once (an older one could land after a newer one).
func TestPersistCloseWaitsForTimedFlush(t *testing.T) {
	fs, db := newFlakyStore(t)
	fs.hold, fs.entered = make(chan struct{}), make(chan struct{}, 2)
	p := newPersistence(fs, slog.New(slog.NewTextHandler(testLog{t}, nil)), time.Millisecond)
	p.start()
	p.set(recRetained, "wake/close", retainedMsg("wake/close", "old"))
	<-fs.entered // the timed flush is writing
	p.set(recRetained, "wake/close", retainedMsg("wake/close", "new"))
	closed := make(chan error, 1)
	go func() {
		err := p.close()
		fs.closed.Store(true)
		closed <- err
	}()
	testwait.Eventually(t, 5*time.Second, "close begun", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.closed
	})
	close(fs.hold)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := storedRetained(t, db, "wake/close"); got != "new" {
		t.Fatalf("stored %q after close, want the newer change", got)
	}
	if n := fs.calls.Load(); n != 2 {
		t.Fatalf("%d writes, want the timed one and close's", n)
	}
	// A timer armed by a change after close would write now.
	p.set(recRetained, "wake/close", retainedMsg("wake/close", "late"))
	p.mu.Lock()
	armed := p.timer != nil
	p.mu.Unlock()
	if armed {
		t.Fatal("a change after close armed a flush")
	}
	if got := storedRetained(t, db, "wake/close"); got != "new" {
		t.Fatal("a change after close was written")
	}
}
