//go:build !linux

package store

// ReleaseMapped does nothing outside Linux (see release_linux.go).
func (s *DB) ReleaseMapped() error { return nil }
