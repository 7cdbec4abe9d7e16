package mqtt

import (
	"net"
	"sync"
)

// connSet tracks the connections a broker serves outside mochi's own
// sweep. mochi's shutdown disconnects the clients it has registered and
// then waits for every connection; one still in its handshake, registered
// after the sweep, or served through ServeConn would hold the shutdown up
// for as long as its client stayed. Closing the set ends them all.
//
// It also counts its connections in mochi's exported wait group for its
// listeners' clients (wg, Listeners.ClientsWg), from add to remove, so that
// mochi's shutdown waits for a connection whose CONNECT the hub is reading
// (readConnect) as for the ones mochi serves: none reaches the hooks after
// the store closed. add counts under the lock close takes, so no
// connection is counted after close has returned (an Add concurrent with
// Wait would be a race).
type connSet struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     *sync.WaitGroup // nil: none
}

// add tracks c; once the set is closed it closes c instead and reports
// false.
func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	if s.conns == nil {
		s.conns = make(map[net.Conn]struct{})
	}
	s.conns[c] = struct{}{}
	if s.wg != nil {
		s.wg.Add(1)
	}
	return true
}

// remove stops tracking c, which add tracked.
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if s.wg != nil {
		s.wg.Done()
	}
}

// close refuses new connections and closes the tracked ones.
func (s *connSet) close() {
	s.mu.Lock()
	s.closed = true
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
