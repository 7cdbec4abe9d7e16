package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// ReleaseMapped drops this process's mappings of the database pages it has
// read, so they stop counting towards its resident memory. The pages are
// clean and stay in the kernel's page cache; a later read maps them again
// (a minor fault). Start-up calls it after loading the registry, whose
// walk of the whole store is not repeated.
//
// It runs inside a read transaction, which holds bbolt's mmap lock: the
// mapping cannot be replaced (and its address reused) while it is advised.
func (s *DB) ReleaseMapped() error {
	err := s.db.View(func(tx *bolt.Tx) error {
		data := s.db.Info().Data
		size := uintptr(tx.Size())
		if data == 0 || size == 0 {
			return nil
		}
		// A raw syscall: the mapping is bbolt's, reachable only as an
		// address, and MADV_DONTNEED on a shared read-only file mapping
		// discards nothing but page-table entries.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, data, size, unix.MADV_DONTNEED); errno != 0 {
			return errno
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot release the store's mapped pages: %w", err)
	}
	return nil
}
