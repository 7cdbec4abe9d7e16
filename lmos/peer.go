package lmos

import (
	"encoding/json"
	"math"
	"math/big"
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
		// A status beyond any int (1e400 reads as +Inf) is no status.
		if f, ok := number(s); ok && !math.IsInf(f, 0) && !math.IsNaN(f) && math.Abs(f) < 1e9 {
			p.Status = int(f)
		}
	}
	return p
}

// number reads the numbers JSON and CBOR decoders produce.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		return f, err == nil
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case int:
		return float64(x), true
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f, true
	}
	return 0, false
}

// Truncate cuts s to at most n bytes without splitting a character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
