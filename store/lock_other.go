//go:build !unix

package store

import (
	"errors"
	"time"
)

// lockFile is not available without flock: restore refuses rather than
// replace a store a hub may hold.
func lockFile(string, time.Duration) (func(), error) {
	return nil, errors.New("restore needs a unix system (flock)")
}
