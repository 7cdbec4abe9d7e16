package jsonx

import (
	"encoding/json"
	"reflect"
)

// Equal reports whether two decoded JSON values are equal. Two json.Numbers
// compare by their text, so a number rewritten in another form (1 → 1.0)
// is a change, which is what a merge patch must carry; other numeric
// representations (built by hand or by the CBOR decoder) compare by value.
func Equal(a, b any) bool {
	if an, ok := a.(json.Number); ok {
		bn, ok := b.(json.Number)
		return ok && an == bn
	}
	if _, ok := b.(json.Number); ok {
		return false
	}
	fa, aNum := Number(a)
	fb, bNum := Number(b)
	if aNum || bNum {
		return aNum && bNum && fa == fb
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			if f, ok := y[k]; !ok || !Equal(e, f) {
				return false
			}
		}
		return true
	}
	// Values built by hand rather than decoded (typed slices…).
	return reflect.DeepEqual(a, b)
}
