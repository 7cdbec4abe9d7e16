//go:build !linux

package mqtt

import "sync/atomic"

// parker is the broker's epoll set of parked connections, Linux only
// (parker_linux.go): elsewhere connections wait in their goroutines.
type parker struct{ parks atomic.Uint64 }

// newParker returns none: nothing is parked.
func newParker(*Broker) (*parker, error) { return nil, nil }

func (*parker) park(*parked) bool   { return false }
func (*parker) unregister(*outConn) {}
func (*parker) forget(uint64)       {}
func (*parker) count() int          { return 0 }
func (*parker) kick()               {}
func (*parker) run()                {}
func (*parker) close()              {}
