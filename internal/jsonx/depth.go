package jsonx

import "encoding/json"

// TooDeep reports whether the objects and arrays of raw nest deeper than
// limit levels (the root is level 1) and, if so, the JSON pointer of the
// first container that is too deep. It is one pass over the bytes with a
// stack no deeper than the limit, meant to run before a document is
// decoded (encoding/json nests up to 10,000 levels); it does not check the
// syntax (the decoder does), it only needs to find brackets outside strings.
func TooDeep(raw []byte, limit int) (string, bool) {
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
				return stackPointer(raw, len(stack), func(k int) (bool, int, int, int) {
					l := stack[k]
					return l.object, l.index, l.keyStart, l.keyEnd
				}), true
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
	return "", false
}

// stackPointer builds the JSON pointer of the value being opened below the
// n open containers that at(k) describes.
func stackPointer(raw []byte, n int, at func(k int) (object bool, index, keyStart, keyEnd int)) string {
	ptr := ""
	for k := range n {
		object, index, ks, ke := at(k)
		if !object {
			ptr = PointerIndex(ptr, index)
			continue
		}
		var name string
		if ke <= ks || json.Unmarshal(raw[ks:ke], &name) != nil {
			name = string(raw[ks:ke])
		}
		ptr = PointerAppend(ptr, name)
	}
	return ptr
}
