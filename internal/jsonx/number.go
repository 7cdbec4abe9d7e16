package jsonx

import (
	"encoding/json"
	"errors"
	"math/big"
	"strconv"
)

// Number reads any numeric representation of the JSON data model:
// json.Number (encoding/json with UseNumber), float64 (without it), and the
// integer and float types the CBOR decoder yields. A json.Number too large
// for float64 comes back as ±Inf with the right sign and true: it is a
// number, just not a finite one. Anything else is not a number.
func Number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			var ne *strconv.NumError
			return f, errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange)
		}
		return f, true
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
