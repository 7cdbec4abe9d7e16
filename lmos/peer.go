package lmos

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// PeerProblem reads the problem object a Thing or peer sent (an agent's
// failure, an error message over WebSocket), keeping only well-typed
// members, cut to bounded lengths: a peer's text is passed on to consumers
// and logs. status may be a number (from JSON or CBOR) or, as kotlin-wot
// sends it, a string; 0 when absent or not a status.
func PeerProblem(obj map[string]any) Problem {
	get := func(k string, n int) string {
		s, _ := obj[k].(string)
		return Truncate(s, n)
	}
	p := Problem{Type: get("type", 512), Title: get("title", 512), Detail: get("detail", 4096), Instance: get("instance", 512)}
	switch s := obj["status"].(type) {
	case string:
		p.Status, _ = strconv.Atoi(s)
	default:
		// JSON and CBOR decoders give a number as float64, json.Number,
		// (u)int64 or *big.Int: their text is the number. Anything beyond
		// any status (1e400 reads as +Inf), and any other type, is none.
		if f, err := strconv.ParseFloat(fmt.Sprint(s), 64); err == nil && math.Abs(f) < 1e9 {
			p.Status = int(f)
		}
	}
	return p
}

// Truncate cuts s to at most n bytes without splitting a character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
