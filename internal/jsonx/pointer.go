package jsonx

import (
	"strconv"
	"strings"
)

// PointerAppend appends one reference token to a JSON pointer (RFC 6901 §3
// escaping).
func PointerAppend(base, token string) string {
	return base + "/" + EscapePointer(token)
}

// PointerIndex appends an array index to a JSON pointer.
func PointerIndex(base string, i int) string {
	return base + "/" + strconv.Itoa(i)
}

// EscapePointer escapes one reference token: "~" as "~0", "/" as "~1".
func EscapePointer(token string) string {
	if !strings.ContainsAny(token, "~/") {
		return token
	}
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}
