//go:build !otel

package app

// TracingBuilt reports whether this binary can export OpenTelemetry
// spans: only one built with the otel tag (go build -tags otel), which
// adds the OTLP exporter's megabytes the default Pi binary must not carry.
const TracingBuilt = false

// openTracing does nothing in a binary built without the otel tag.
func (m *Main) openTracing() error { return nil }
