package web

import (
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// stuckWriter is a client that never reads: its first Write blocks until
// a write deadline in the past ends it, as a connection's would.
type stuckWriter struct {
	http.ResponseWriter
	once    sync.Once
	expired chan struct{}
}

func (w *stuckWriter) Write([]byte) (int, error) {
	<-w.expired
	return 0, os.ErrDeadlineExceeded
}

func (w *stuckWriter) Flush() {}

func (w *stuckWriter) SetWriteDeadline(t time.Time) error {
	if !t.After(time.Now()) {
		w.once.Do(func() { close(w.expired) })
	}
	return nil
}

// An unread stream of small frames is cut off after a bounded number of
// them, not after a megabyte of 60-byte frames (~17,000 references held
// by each of up to a thousand streams).
func TestUnreadStreamOfSmallFramesCutOff(t *testing.T) {
	db, err := store.Open(t.TempDir()+"/hub.db", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	reg, err := hub.NewRegistry(db, hub.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	s := New(reg, nil, Config{SSEWriteTimeout: time.Hour})
	w := &stuckWriter{ResponseWriter: httptest.NewRecorder(), expired: make(chan struct{})}
	r := httptest.NewRequest(http.MethodGet, "/api/events", nil)
	q := s.startFrameQueue(r, w, http.NewResponseController(w), "test")
	frame := []byte("event: presence\ndata: {\"id\":\"urn:x\",\"status\":\"online\"}\n\n")
	accepted := 0
	for accepted <= 1<<20 && q.push(frame) {
		accepted++
	}
	if limit := DefaultMaxStreamQueueBytes / minFrameCharge; accepted > limit {
		t.Fatalf("an unread stream took %d frames of %d bytes before it was cut off, want at most %d", accepted, len(frame), limit)
	}
	if accepted < DefaultMaxStreamQueueBytes/minFrameCharge-1 {
		t.Fatalf("cut off after %d frames, before its bound", accepted)
	}
	if got := s.sse.Get(); got != 1 {
		t.Errorf("lmos_sse_dropped_total %d, want 1", got)
	}
}
