package hub

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
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
	if c, ok := s["const"]; ok && !jsonx.Equal(c, v) {
		fail("must be the constant value")
	}
	if e, ok := s["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || jsonx.Equal(x, v)
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
		if m, ok := jsonx.Number(s["minLength"]); ok && n < m {
			fail("must have at least %v characters", m)
		}
		if m, ok := jsonx.Number(s["maxLength"]); ok && n > m {
			fail("must have at most %v characters", m)
		}
	case []any:
		n := float64(len(x))
		if m, ok := jsonx.Number(s["minItems"]); ok && n < m {
			fail("must have at least %v items", m)
		}
		if m, ok := jsonx.Number(s["maxItems"]); ok && n > m {
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
						*out = append(*out, FieldError{Field: jsonx.PointerAppend(at, name), Description: "is required"})
					}
				}
			}
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for name, ps := range props {
				psm, ok := ps.(map[string]any)
				e, has := x[name]
				if ok && has {
					checkSchema(psm, e, jsonx.PointerAppend(at, name), out, depth+1)
				}
			}
		}
	default:
		if f, ok := jsonx.Number(v); ok {
			if m, ok := jsonx.Number(s["minimum"]); ok && f < m {
				fail("must be at least %v", m)
			}
			if m, ok := jsonx.Number(s["maximum"]); ok && f > m {
				fail("must be at most %v", m)
			}
			if m, ok := jsonx.Number(s["exclusiveMinimum"]); ok && f <= m {
				fail("must be more than %v", m)
			}
			if m, ok := jsonx.Number(s["exclusiveMaximum"]); ok && f >= m {
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
		_, ok := jsonx.Number(v)
		return ok
	case "integer":
		switch v.(type) {
		case int64, uint64, *big.Int:
			return true
		}
		f, ok := jsonx.Number(v)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	}
	return true
}
