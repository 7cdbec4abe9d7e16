package hub

import (
	"strconv"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
)

// DefaultMaxDepth is the deepest nesting of objects and arrays a Thing
// Description may have (the root object is level 1). Real TDs stay below
// 10 levels; the CBOR decoder allows the same 32 (package lmos), so a TD is
// refused alike whichever encoding carried it. Deep documents make every
// later step (decoding, schema validation, JSONPath descendant segments)
// cost more per byte, so the limit comes first.
const DefaultMaxDepth = 32

// Decoder parses the documents and decodes the payloads that reach the
// hub, refusing any that nest deeper than MaxDepth (registry.maxDepth).
// Every door decodes with its Registry's Decoder (Registry.Decoder), so
// the limit is the same on each; the zero Decoder has DefaultMaxDepth.
type Decoder struct {
	// MaxDepth is the deepest nesting of a TD (DefaultMaxDepth when <= 0).
	MaxDepth int
}

// limit returns the nesting limit of a TD.
func (d Decoder) limit() int {
	if d.MaxDepth <= 0 {
		return DefaultMaxDepth
	}
	return d.MaxDepth
}

// ParseDocument is the package's ParseDocument with d's nesting limit.
func (d Decoder) ParseDocument(raw []byte) (map[string]any, error) {
	return parseDocument(raw, d.limit())
}

// payloadDepthSlack is how much deeper than a TD a decoded JSON payload
// may nest: a WebSocket envelope holds a TD one level down, and a TD that
// is a little too deep should reach ParseDocument, which names where.
const payloadDepthSlack = 8

func checkDepthLimit(raw []byte, limit int) error {
	if ptr, deep := jsonx.TooDeep(raw, limit); deep {
		return depthError(ptr, limit)
	}
	return nil
}

func depthError(ptr string, limit int) error {
	return &Error{Code: EINVALID, Limit: "registry.maxDepth",
		Message: "the document nests objects and arrays deeper than " + strconv.Itoa(limit) + " levels",
		Fields:  []FieldError{{Field: ptr, Description: "nested deeper than " + strconv.Itoa(limit) + " levels"}}}
}
