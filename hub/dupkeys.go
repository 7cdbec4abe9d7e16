package hub

import (
	"encoding/json"
	"slices"
	"strings"
)

// duplicateMember returns the JSON pointer of the first member name that
// occurs twice in one object of raw, which must be valid JSON. Parsers
// disagree on which duplicate wins, so a document that has them could be
// validated as one thing and read by a consumer as another.
func duplicateMember(raw []byte) (string, bool) {
	_, ptr, dup := scanDupes(raw, skipWS(raw, 0), "")
	return ptr, dup
}

// scanDupes walks the value at b[i] and returns the index after it.
func scanDupes(b []byte, i int, ptr string) (int, string, bool) {
	switch b[i] {
	case '{':
		var seen []string // objects are small: a slice beats a map here
		i = skipWS(b, i+1)
		if b[i] == '}' {
			return i + 1, "", false
		}
		for {
			ks := i
			ke, _ := skipString(b, ks)
			key := string(b[ks+1 : ke-1])
			if strings.IndexByte(key, '\\') >= 0 {
				_ = json.Unmarshal(b[ks:ke], &key)
			}
			member := ptr + "/" + escapePointer(key)
			if slices.Contains(seen, key) {
				return 0, member, true
			}
			seen = append(seen, key)
			i = skipWS(b, ke)
			i = skipWS(b, i+1) // past ':'
			end, p, dup := scanDupes(b, i, member)
			if dup {
				return 0, p, true
			}
			i = skipWS(b, end)
			if b[i] == '}' {
				return i + 1, "", false
			}
			i = skipWS(b, i+1) // past ','
		}
	case '[':
		i = skipWS(b, i+1)
		if b[i] == ']' {
			return i + 1, "", false
		}
		for n := 0; ; n++ {
			end, p, dup := scanDupes(b, i, ptr+"/"+itoa(n))
			if dup {
				return 0, p, true
			}
			i = skipWS(b, end)
			if b[i] == ']' {
				return i + 1, "", false
			}
			i = skipWS(b, i+1)
		}
	default:
		end, _ := skipValue(b, i)
		return end, "", false
	}
}
