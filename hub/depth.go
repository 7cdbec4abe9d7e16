package hub

import (
	"encoding/json"
	"strconv"
	"sync/atomic"
)

// DefaultMaxDepth is the deepest nesting of objects and arrays a Thing
// Description may have (the root object is level 1). Real TDs stay below
// 10 levels; the CBOR decoder allows the same 32 (codec.go), so a TD is
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
// limit, naming the JSON pointer of the first container that is too deep.
// It is one pass over the bytes with a stack no deeper than the limit, and
// runs before the document is decoded; it does not check the syntax (the
// decoder does), it only needs to find brackets outside strings.
func checkDepth(raw []byte) error { return checkDepthLimit(raw, MaxDepth()) }

// payloadDepthSlack is how much deeper than a TD a decoded JSON payload
// may nest: a WebSocket envelope holds a TD one level down, and a TD that
// is a little too deep should reach ParseDocument, which names where.
const payloadDepthSlack = 8

func checkDepthLimit(raw []byte, limit int) error {
	type level struct {
		object   bool
		index    int // array: index of the current element
		keyStart int // object: the current member name's raw bytes (quotes included)
		keyEnd   int
		wantKey  bool // object: the next string is a member name
	}
	stack := make([]level, 0, min(limit, 64))
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '"':
			start := i
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
				stack[n-1].keyStart, stack[n-1].keyEnd, stack[n-1].wantKey = start, min(i+1, len(raw)), false
			}
		case '{', '[':
			if len(stack) == limit {
				return depthError(stackPointer(raw, len(stack), func(k int) (bool, int, int, int) {
					l := stack[k]
					return l.object, l.index, l.keyStart, l.keyEnd
				}), limit)
			}
			stack = append(stack, level{object: c == '{', wantKey: c == '{'})
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].object {
					stack[n-1].wantKey = true
				} else {
					stack[n-1].index++
				}
			}
		}
	}
	return nil
}

// stackPointer builds the JSON pointer of the value being opened below the
// n open containers that at(k) describes.
func stackPointer(raw []byte, n int, at func(k int) (object bool, index, keyStart, keyEnd int)) string {
	ptr := ""
	for k := range n {
		object, index, ks, ke := at(k)
		if !object {
			ptr = pointerIndex(ptr, index)
			continue
		}
		var name string
		if ke <= ks || json.Unmarshal(raw[ks:ke], &name) != nil {
			name = string(raw[ks:ke])
		}
		ptr = pointerAppend(ptr, name)
	}
	return ptr
}

func depthError(ptr string, limit int) error {
	return &Error{Code: EINVALID, Limit: "registry.maxDepth",
		Message: "the document nests objects and arrays deeper than " + strconv.Itoa(limit) + " levels",
		Fields:  []FieldError{{Field: ptr, Description: "nested deeper than " + strconv.Itoa(limit) + " levels"}}}
}
