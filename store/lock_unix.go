//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// lockFile takes the exclusive flock bbolt takes on the store at path
// (what a running hub holds), retrying for timeout, so that it works on a
// store bbolt could not open; berrors.ErrTimeout while it is held. A
// missing file is nothing to lock: no hub runs on it.
func lockFile(path string, timeout time.Duration) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open the store to lock it: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, berrors.ErrTimeout
			}
			return nil, fmt.Errorf("cannot lock the store: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
