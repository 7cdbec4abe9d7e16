package web

import (
	"net/http"
	"sync"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// streamSlots bounds the event streams each client address holds open.
// Every stream holds a goroutine, a change-feed subscription or an
// interaction with a Thing, and buffers; without a bound one client could
// open them until the hub runs out of memory.
type streamSlots struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

func newStreamSlots(max int) *streamSlots {
	return &streamSlots{max: max, open: make(map[string]int)}
}

// take reserves a slot for addr; false when it holds max streams already.
func (s *streamSlots) take(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[addr] >= s.max {
		return false
	}
	s.open[addr]++
	return true
}

func (s *streamSlots) give(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[addr]--; s.open[addr] <= 0 {
		delete(s.open, addr)
	}
}

// holdStream reserves one of the client's stream slots for the rest of the
// request; when none is free it answers 429 itself and reports false.
func (s *Server) holdStream(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	addr := clientAddr(r)
	if !s.streams.take(addr) {
		s.streamsRefused.Inc()
		w.Header().Set("Retry-After", "5")
		s.writeError(w, r, hub.Errorf(hub.ERATELIMIT,
			"this client already holds %d open event streams, the limit (http.maxStreamsPerClient); close one first", s.streams.max))
		return nil, false
	}
	return func() { s.streams.give(addr) }, true
}
