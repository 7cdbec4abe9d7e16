package jsonx

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// DuplicateMember returns the JSON pointer of the first member name that
// occurs twice in one object of raw, which must be valid JSON. Parsers
// disagree on which duplicate wins, so a document that has them could be
// validated as one thing and read by a consumer as another.
func DuplicateMember(raw []byte) (string, bool) {
	var path []string // member names and indexes down to the duplicate
	if _, dup := scanDupes(raw, SkipWS(raw, 0), &path); !dup {
		return "", false
	}
	var b strings.Builder
	for i := len(path) - 1; i >= 0; i-- { // path is collected innermost first
		b.WriteByte('/')
		b.WriteString(EscapePointer(path[i]))
	}
	return b.String(), true
}

// scanDupes walks the value at b[i] and returns the index after it. It
// allocates only for escaped keys and, on a duplicate, for its path: the
// scan runs on every write.
func scanDupes(b []byte, i int, path *[]string) (int, bool) {
	switch b[i] {
	case '{':
		// Most objects are small, where a slice beats a map; a large one
		// moves to a set, so the check stays linear in the member count
		// (a hostile 1 MB object has ~100k members).
		var seen [][]byte
		var set map[string]struct{}
		i = SkipWS(b, i+1)
		if b[i] == '}' {
			return i + 1, false
		}
		for {
			ks := i
			ke, _ := SkipString(b, ks)
			key := b[ks+1 : ke-1]
			if bytes.IndexByte(key, '\\') >= 0 {
				var k string
				_ = json.Unmarshal(b[ks:ke], &k)
				key = []byte(k)
			}
			if seenBefore(&seen, &set, key) {
				*path = append(*path, string(key))
				return 0, true
			}
			i = SkipWS(b, ke)
			i = SkipWS(b, i+1) // past ':'
			end, dup := scanDupes(b, i, path)
			if dup {
				*path = append(*path, string(key))
				return 0, true
			}
			i = SkipWS(b, end)
			if b[i] == '}' {
				return i + 1, false
			}
			i = SkipWS(b, i+1) // past ','
		}
	case '[':
		i = SkipWS(b, i+1)
		if b[i] == ']' {
			return i + 1, false
		}
		for n := 0; ; n++ {
			end, dup := scanDupes(b, i, path)
			if dup {
				*path = append(*path, strconv.Itoa(n))
				return 0, true
			}
			i = SkipWS(b, end)
			if b[i] == ']' {
				return i + 1, false
			}
			i = SkipWS(b, i+1)
		}
	default:
		end, _ := SkipValue(b, i)
		return end, false
	}
}

// smallObject is the member count up to which a linear scan of the names
// seen so far is cheaper than a map.
const smallObject = 16

// seenBefore reports whether key is in the names seen so far, and adds it.
func seenBefore(seen *[][]byte, set *map[string]struct{}, key []byte) bool {
	if *set == nil {
		if slices.ContainsFunc(*seen, func(s []byte) bool { return bytes.Equal(s, key) }) {
			return true
		}
		if len(*seen) < smallObject {
			*seen = append(*seen, key)
			return false
		}
		*set = make(map[string]struct{}, 2*smallObject)
		for _, s := range *seen {
			(*set)[string(s)] = struct{}{}
		}
		*seen = nil
	}
	if _, ok := (*set)[string(key)]; ok {
		return true
	}
	(*set)[string(key)] = struct{}{}
	return false
}
