package hub

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// duplicateMember returns the JSON pointer of the first member name that
// occurs twice in one object of raw, which must be valid JSON. Parsers
// disagree on which duplicate wins, so a document that has them could be
// validated as one thing and read by a consumer as another.
func duplicateMember(raw []byte) (string, bool) {
	var path []string // member names and indexes down to the duplicate
	if _, dup := scanDupes(raw, skipWS(raw, 0), &path); !dup {
		return "", false
	}
	var b strings.Builder
	for i := len(path) - 1; i >= 0; i-- { // path is collected innermost first
		b.WriteByte('/')
		b.WriteString(escapePointer(path[i]))
	}
	return b.String(), true
}

// scanDupes walks the value at b[i] and returns the index after it. It
// allocates only for escaped keys and, on a duplicate, for its path: the
// scan runs on every write.
func scanDupes(b []byte, i int, path *[]string) (int, bool) {
	switch b[i] {
	case '{':
		var seen [][]byte // objects are small: a slice beats a map here
		i = skipWS(b, i+1)
		if b[i] == '}' {
			return i + 1, false
		}
		for {
			ks := i
			ke, _ := skipString(b, ks)
			key := b[ks+1 : ke-1]
			if bytes.IndexByte(key, '\\') >= 0 {
				var k string
				_ = json.Unmarshal(b[ks:ke], &k)
				key = []byte(k)
			}
			if slices.ContainsFunc(seen, func(s []byte) bool { return bytes.Equal(s, key) }) {
				*path = append(*path, string(key))
				return 0, true
			}
			seen = append(seen, key)
			i = skipWS(b, ke)
			i = skipWS(b, i+1) // past ':'
			end, dup := scanDupes(b, i, path)
			if dup {
				*path = append(*path, string(key))
				return 0, true
			}
			i = skipWS(b, end)
			if b[i] == '}' {
				return i + 1, false
			}
			i = skipWS(b, i+1) // past ','
		}
	case '[':
		i = skipWS(b, i+1)
		if b[i] == ']' {
			return i + 1, false
		}
		for n := 0; ; n++ {
			end, dup := scanDupes(b, i, path)
			if dup {
				*path = append(*path, itoa(n))
				return 0, true
			}
			i = skipWS(b, end)
			if b[i] == ']' {
				return i + 1, false
			}
			i = skipWS(b, i+1)
		}
	default:
		end, _ := skipValue(b, i)
		return end, false
	}
}
