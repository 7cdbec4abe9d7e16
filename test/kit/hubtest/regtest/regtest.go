// Package regtest opens the real parts an adapter's own tests stand on: a
// bbolt store in the test's temp dir and a registry over it, closed when
// the test ends. It imports only hub and store, so the in-package tests
// of web, web/ws and mdns can use it (test/kit/hubtest starts the whole
// app, which imports those adapters).
package regtest

import (
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// Open returns a registry with opts over a fresh store, and the store.
func Open(tb testing.TB, opts hub.RegistryOptions) (*hub.Registry, *store.DB) {
	tb.Helper()
	db, err := store.Open(tb.TempDir(), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	reg, err := hub.NewRegistry(db, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { reg.Close() })
	return reg, db
}
