package hub

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"unicode/utf8"
)

// CheckValue checks a JSON data-model value (numbers as json.Number,
// float64, int64 or *big.Int) against a W3C WoT data schema: type, const,
// enum, minimum/maximum (also exclusive), minLength/maxLength,
// minItems/maxItems, items, properties, required, oneOf. Terms it does not
// know are ignored, as a consumer must. A violation is EINVALID with the
// field (JSON pointer into the value) that fails.
func CheckValue(schema map[string]any, v any) error {
	var fields []FieldError
	checkSchema(schema, v, "", &fields, 0)
	if len(fields) == 0 {
		return nil
	}
	return &Error{Code: EINVALID, Message: "the input does not match the affordance's data schema", Fields: fields}
}

// maxSchemaDepth bounds recursion through nested schemas.
const maxSchemaDepth = 32

func checkSchema(s map[string]any, v any, at string, out *[]FieldError, depth int) {
	if depth > maxSchemaDepth || len(*out) >= 16 {
		return
	}
	fail := func(format string, args ...any) {
		*out = append(*out, FieldError{Field: at, Description: fmt.Sprintf(format, args...)})
	}
	if t, ok := s["type"].(string); ok && !schemaType(v, t) {
		fail("must be of type %s", t)
		return
	}
	if c, ok := s["const"]; ok && !sameValue(c, v) {
		fail("must be the constant value")
	}
	if e, ok := s["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || sameValue(x, v)
		}
		if !found {
			fail("must be one of the enumerated values")
		}
	}
	if alts, ok := s["oneOf"].([]any); ok && len(alts) > 0 {
		matches := 0
		for _, a := range alts {
			if as, ok := a.(map[string]any); ok {
				var sub []FieldError
				checkSchema(as, v, at, &sub, depth+1)
				if len(sub) == 0 {
					matches++
				}
			}
		}
		if matches != 1 {
			fail("must match exactly one schema of oneOf")
		}
	}
	switch x := v.(type) {
	case string:
		n := float64(utf8.RuneCountInString(x))
		if m, ok := number(s["minLength"]); ok && n < m {
			fail("must have at least %v characters", m)
		}
		if m, ok := number(s["maxLength"]); ok && n > m {
			fail("must have at most %v characters", m)
		}
	case []any:
		n := float64(len(x))
		if m, ok := number(s["minItems"]); ok && n < m {
			fail("must have at least %v items", m)
		}
		if m, ok := number(s["maxItems"]); ok && n > m {
			fail("must have at most %v items", m)
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range x {
				checkSchema(items, e, at+"/"+strconv.Itoa(i), out, depth+1)
			}
		}
	case map[string]any:
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if name, ok := r.(string); ok {
					if _, has := x[name]; !has {
						*out = append(*out, FieldError{Field: pointerAppend(at, name), Description: "is required"})
					}
				}
			}
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for name, ps := range props {
				psm, ok := ps.(map[string]any)
				e, has := x[name]
				if ok && has {
					checkSchema(psm, e, pointerAppend(at, name), out, depth+1)
				}
			}
		}
	default:
		if f, ok := number(v); ok {
			if m, ok := number(s["minimum"]); ok && f < m {
				fail("must be at least %v", m)
			}
			if m, ok := number(s["maximum"]); ok && f > m {
				fail("must be at most %v", m)
			}
			if m, ok := number(s["exclusiveMinimum"]); ok && f <= m {
				fail("must be more than %v", m)
			}
			if m, ok := number(s["exclusiveMaximum"]); ok && f >= m {
				fail("must be less than %v", m)
			}
		}
	}
}

// schemaType reports whether v is of the data schema type t; unknown types
// pass.
func schemaType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "number":
		_, ok := number(v)
		return ok
	case "integer":
		switch v.(type) {
		case int64, uint64, *big.Int:
			return true
		}
		f, ok := number(v)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	}
	return true
}

// number reads any numeric representation of the JSON data model.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
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

// sameValue compares two data-model values, numbers by value.
func sameValue(a, b any) bool {
	fa, aNum := number(a)
	fb, bNum := number(b)
	if aNum || bNum {
		return aNum && bNum && fa == fb
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
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
			if f, ok := y[k]; !ok || !sameValue(e, f) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}
