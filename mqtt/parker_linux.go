package mqtt

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// parker is the broker's epoll set of parked connections (park.go) and
// the goroutine that waits on it.
type parker struct {
	b *Broker
	// fdmu guards the two descriptors: read-held while they are used,
	// taken to close them, after which closed says they are gone (their
	// numbers may belong to other files by then).
	fdmu   sync.RWMutex
	closed bool
	epfd   int
	evfd   int // an eventfd (token 0) that wakes the wait: shutdown, an earlier keep-alive deadline

	mu      sync.Mutex
	byToken map[uint64]*parked
	last    uint64   // the last token handed out
	due     monoTime // no parked keep-alive passes before; 0: none known
	parks   atomic.Uint64
}

// parkerWait is how long the parker waits before trying again when
// epoll_wait fails.
const parkerWait = 5 * time.Second

// parkerEvents is how many ready connections one epoll_wait returns.
const parkerEvents = 128

// newParker creates the broker's epoll set.
func newParker(b *Broker) (*parker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("cannot create the mqtt parker's epoll set: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("cannot create the mqtt parker's eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(evfd)
		unix.Close(epfd)
		return nil, fmt.Errorf("cannot set up the mqtt parker: %w", err)
	}
	return &parker{b: b, epfd: epfd, evfd: evfd, byToken: make(map[uint64]*parked)}, nil
}

// park registers p's socket, readable or closed by the peer, once.
func (pk *parker) park(p *parked) bool {
	c := p.c
	pk.mu.Lock()
	pk.last++
	p.token = pk.last
	pk.byToken[p.token] = p
	earlier := p.due != 0 && (pk.due == 0 || p.due < pk.due)
	if earlier {
		pk.due = p.due
	}
	pk.mu.Unlock()

	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT}
	ev.Fd, ev.Pad = int32(uint32(p.token)), int32(uint32(p.token>>32))
	ok := false
	c.mu.Lock()
	if c.park == nil && !c.dead {
		pk.fdmu.RLock()
		if !pk.closed {
			// Control fails once the connection is closed: then nothing
			// is registered.
			_ = c.lr.raw.Control(func(fd uintptr) {
				ok = unix.EpollCtl(pk.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev) == nil
			})
		}
		pk.fdmu.RUnlock()
		if ok {
			c.park = p
		}
	}
	c.mu.Unlock()
	if !ok {
		pk.forget(p.token)
		return false
	}
	pk.parks.Add(1)
	if earlier {
		pk.kick()
	}
	return true
}

// unregister takes c's socket out of the set (c.mu held, c parked).
func (pk *parker) unregister(c *outConn) {
	pk.fdmu.RLock()
	defer pk.fdmu.RUnlock()
	if pk.closed {
		return // the set is gone, and with it the registration
	}
	// A closed connection left the set with its descriptor.
	_ = c.lr.raw.Control(func(fd uintptr) {
		_ = unix.EpollCtl(pk.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// forget drops token's entry.
func (pk *parker) forget(token uint64) {
	pk.mu.Lock()
	delete(pk.byToken, token)
	pk.mu.Unlock()
}

// count is how many connections are parked.
func (pk *parker) count() int {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return len(pk.byToken)
}

// kick wakes the wait.
func (pk *parker) kick() {
	pk.fdmu.RLock()
	defer pk.fdmu.RUnlock()
	if pk.closed {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(pk.evfd, one[:])
}

// run waits on the set until the broker stops: each ready connection is
// resumed on a goroutine of its own, each one whose keep-alive passed is
// ended.
func (pk *parker) run() {
	b := pk.b
	events := make([]unix.EpollEvent, parkerEvents)
	for {
		n, err := unix.EpollWait(pk.epfd, events, pk.waitMillis())
		select {
		case <-b.stop:
			return
		default:
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			b.log.Error("mqtt parker cannot wait", "err", err)
			// Not a busy loop: the set is not going to recover.
			select {
			case <-b.stop:
				return
			case <-time.After(parkerWait):
			}
			continue
		}
		for _, ev := range events[:n] {
			token := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if token == 0 {
				var buf [8]byte
				_, _ = unix.Read(pk.evfd, buf[:])
				continue
			}
			pk.mu.Lock()
			p := pk.byToken[token]
			pk.mu.Unlock()
			if p != nil && p.c.claim(p) {
				go b.resume(p)
			}
		}
		pk.expire(monoOf(time.Now()))
	}
}

// waitMillis is how long the next wait may last: until the earliest
// keep-alive deadline; with none, until an event (-1). Nothing else needs
// a wake-up: a park with an earlier deadline and the broker's Close kick
// the eventfd, and an idle hub is not woken (issue 16, idle RSS).
func (pk *parker) waitMillis() int {
	pk.mu.Lock()
	due := pk.due
	pk.mu.Unlock()
	if due == 0 {
		return -1
	}
	wait := max(0, due.sub(monoOf(time.Now())))
	return int((wait + time.Millisecond - 1) / time.Millisecond)
}

// expire ends the parked connections whose keep-alive passed by now.
func (pk *parker) expire(now monoTime) {
	pk.mu.Lock()
	if pk.due == 0 || pk.due > now {
		pk.mu.Unlock()
		return
	}
	var ended []*parked
	pk.due = 0
	for _, p := range pk.byToken {
		switch {
		case p.due == 0:
		case p.due <= now:
			ended = append(ended, p)
		case pk.due == 0 || p.due < pk.due:
			pk.due = p.due
		}
	}
	pk.mu.Unlock()
	for _, p := range ended {
		if p.c.claim(p) {
			go pk.b.endParked(p, errKeepAlive)
		}
	}
}

// close closes the set, once run has returned.
func (pk *parker) close() {
	pk.fdmu.Lock()
	defer pk.fdmu.Unlock()
	if pk.closed {
		return
	}
	pk.closed = true
	unix.Close(pk.evfd)
	unix.Close(pk.epfd)
}
