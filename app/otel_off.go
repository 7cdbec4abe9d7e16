//go:build !otel

package app

// openTracing does nothing in a binary built without the otel tag.
func (m *Main) openTracing() error { return nil }
