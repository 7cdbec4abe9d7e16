package hub

import (
	"strconv"
	"sync/atomic"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
)

// DefaultMaxDepth is the deepest nesting of objects and arrays a Thing
// Description may have (the root object is level 1). Real TDs stay below
// 10 levels; the CBOR decoder allows the same 32 (package lmos), so a TD is
// refused alike whichever encoding carried it. Deep documents make every
// later step (decoding, schema validation, JSONPath descendant segments)
// cost more per byte, so the limit comes first.
const DefaultMaxDepth = 32

var maxDepth atomic.Int64

func init() { maxDepth.Store(DefaultMaxDepth) }

// SetMaxDepth sets the nesting limit every incoming document passes
// (registry.maxDepth); n <= 0 restores the default. It is a process-wide
// setting because every door parses TDs through ParseDocument.
func SetMaxDepth(n int) {
	if n <= 0 {
		n = DefaultMaxDepth
	}
	maxDepth.Store(int64(n))
}

// MaxDepth returns the current nesting limit.
func MaxDepth() int { return int(maxDepth.Load()) }

// checkDepth refuses raw when its objects and arrays nest deeper than the
// limit, naming the JSON pointer of the first container that is too deep
// (jsonx.TooDeep); it runs before the document is decoded.
func checkDepth(raw []byte) error { return checkDepthLimit(raw, MaxDepth()) }

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
