package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
)

// SkipWS returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index after the string starting at b[i] == '"';
// false when it does not end.
func SkipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// SkipValue returns the index after the JSON value starting at b[i]. It
// matches brackets outside strings and does not check the syntax inside.
func SkipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := SkipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j, j > i
	}
}

// AppendCompact appends src without whitespace outside strings.
func AppendCompact(dst, src []byte) []byte {
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			end, ok := SkipString(src, i)
			if !ok {
				return append(dst, src[i:]...)
			}
			dst = append(dst, src[i:end]...)
			i = end - 1
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

// Member is one member of a JSON object found by Members: offsets into the
// scanned bytes.
type Member struct {
	Key        []byte // the decoded name (shares the input unless escaped)
	Start      int    // the opening quote of the name
	ValueStart int
	End        int // just after the value
}

// ErrNotObject is Members' answer to bytes that do not scan as an object.
var ErrNotObject = errors.New("not a JSON object")

// Members finds the members of the JSON object raw without decoding their
// values.
func Members(raw []byte) ([]Member, error) {
	i := SkipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, ErrNotObject
	}
	i = SkipWS(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil, nil
	}
	var out []Member
	for {
		if i >= len(raw) || raw[i] != '"' {
			return nil, ErrNotObject
		}
		ks := i
		ke, ok := SkipString(raw, i)
		if !ok {
			return nil, ErrNotObject
		}
		// Only a few key names matter to callers; copying every key into a
		// string would be most of the scan's cost, so keys stay bytes.
		key := raw[ks+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 { // escaped key: let encoding/json decode it
			var k string
			if json.Unmarshal(raw[ks:ke], &k) != nil {
				return nil, ErrNotObject
			}
			key = []byte(k)
		}
		i = SkipWS(raw, ke)
		if i >= len(raw) || raw[i] != ':' {
			return nil, ErrNotObject
		}
		vs := SkipWS(raw, i+1)
		ve, ok := SkipValue(raw, vs)
		if !ok {
			return nil, ErrNotObject
		}
		out = append(out, Member{Key: key, Start: ks, ValueStart: vs, End: ve})
		i = SkipWS(raw, ve)
		if i >= len(raw) {
			return nil, ErrNotObject
		}
		switch raw[i] {
		case ',':
			i = SkipWS(raw, i+1)
		case '}':
			return out, nil
		default:
			return nil, ErrNotObject
		}
	}
}
