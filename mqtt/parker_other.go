//go:build !linux

package mqtt

import (
	"errors"
	"sync/atomic"
)

// parker is the broker's epoll set of parked connections, Linux only
// (parker_linux.go): elsewhere connections wait in their goroutines.
type parker struct{ parks atomic.Uint64 }

func newParker(*Broker) (*parker, error) {
	return nil, errors.New("mqtt: parking idle connections needs Linux")
}

func (*parker) park(*parked) bool   { return false }
func (*parker) unregister(*outConn) {}
func (*parker) forget(uint64)       {}
func (*parker) count() int          { return 0 }
func (*parker) kick()               {}
func (*parker) run()                {}
func (*parker) close()              {}
