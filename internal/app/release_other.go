//go:build !linux

package app

// releaseExecutablePages does nothing outside Linux (see release_linux.go).
func releaseExecutablePages() (int64, error) { return 0, nil }
