package jsonx

import (
	"encoding/json"
	"reflect"
)

// Equal reports whether two data-model values are equal with numbers
// compared by value, whatever their representation (1, 1.0 and 1e0 are
// equal): what JSON Schema's const and enum mean.
func Equal(a, b any) bool { return equal(a, b, false) }

// Identical reports whether two decoded JSON values are equal with two
// json.Numbers compared by their text, so a number rewritten in another
// form (1 → 1.0) is a change: what a merge patch must carry.
func Identical(a, b any) bool { return equal(a, b, true) }

// equal is the one walk both answers share; byText only decides how two
// json.Numbers compare.
func equal(a, b any, byText bool) bool {
	if byText {
		if an, ok := a.(json.Number); ok {
			bn, ok := b.(json.Number)
			return ok && an == bn
		}
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
			if !equal(x[i], y[i], byText) {
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
			if f, ok := y[k]; !ok || !equal(e, f, byText) {
				return false
			}
		}
		return true
	}
	// Values built by hand rather than decoded (typed slices…).
	return reflect.DeepEqual(a, b)
}
