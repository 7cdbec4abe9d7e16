package mcpdoor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A TD's data schemas (WoT TD §5.3.2) are close to JSON Schema but not the
// same: they carry TD terms (unit, @type, forms), may give "items" as an
// array (prefixItems in 2020-12), and need not describe an object, which an
// MCP tool's inputSchema and outputSchema must. jsonSchema keeps what JSON
// Schema 2020-12 defines, in the form it defines, and drops the rest.

// wrapKey is the one property of the object a non-object schema is
// wrapped in.
const wrapKey = "input"

// resultKey is the one property of the object a non-object output is
// wrapped in.
const resultKey = "result"

// maxSchemaDepth bounds the nesting jsonSchema follows; the registry
// bounds a TD's depth already, this keeps the conversion bounded on its
// own.
const maxSchemaDepth = 32

var simpleTypes = map[string]bool{"null": true, "boolean": true, "object": true, "array": true, "number": true, "string": true, "integer": true}

// dialect2020 is the $schema of JSON Schema 2020-12, MCP's default
// dialect; a TD's other $schema values are dropped, since the conversion
// gives 2020-12 forms (prefixItems).
const dialect2020 = "https://json-schema.org/draft/2020-12/schema"

// jsonSchema converts a TD data schema to a JSON Schema 2020-12 object.
func jsonSchema(ds map[string]any) map[string]any {
	return convert(ds, 0)
}

// convertAll converts each schema of a map (properties, $defs).
func convertAll(v any, sub func(any) (map[string]any, bool)) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	out := map[string]any{}
	for name, p := range m {
		if s, ok := sub(p); ok {
			out[name] = s
		}
	}
	return out, true
}

func convert(ds map[string]any, depth int) map[string]any {
	out := map[string]any{}
	if depth > maxSchemaDepth {
		return out
	}
	sub := func(v any) (map[string]any, bool) {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		return convert(m, depth+1), true
	}
	for k, v := range ds {
		switch k {
		case "type":
			switch t := v.(type) {
			case string:
				if simpleTypes[t] {
					out[k] = t
				}
			case []any:
				var ts []any
				for _, e := range t {
					if s, ok := e.(string); ok && simpleTypes[s] {
						ts = append(ts, s)
					}
				}
				if len(ts) > 0 {
					out[k] = ts
				}
			}
		case "title", "description", "format", "pattern", "contentEncoding", "contentMediaType", "$comment":
			if s, ok := v.(string); ok {
				out[k] = s
			}
		case "const", "default":
			out[k] = v
		case "enum", "examples":
			if a, ok := v.([]any); ok && (k == "examples" || len(a) > 0) {
				out[k] = a
			}
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			if f, ok := number(v); ok {
				out[k] = f
			}
		case "multipleOf":
			if f, ok := number(v); ok && f > 0 {
				out[k] = f
			}
		case "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties":
			if f, ok := number(v); ok && f >= 0 && f == math.Trunc(f) {
				out[k] = f
			}
		case "uniqueItems", "readOnly", "writeOnly":
			if b, ok := v.(bool); ok {
				out[k] = b
			}
		case "required":
			if a, ok := v.([]any); ok {
				var names []any
				seen := map[string]bool{}
				for _, e := range a {
					if s, ok := e.(string); ok && !seen[s] {
						seen[s] = true
						names = append(names, s)
					}
				}
				if names != nil {
					out[k] = names
				}
			}
		case "properties", "$defs", "definitions":
			// definitions: draft-07's $defs, which its $refs name.
			if m, ok := convertAll(v, sub); ok {
				out[k] = m
			}
		case "$ref":
			// Only within the schema: a client must not fetch anything.
			if r, ok := v.(string); ok && localRef(r) {
				out[k] = r
			}
		case "$schema":
			if depth == 0 && v == dialect2020 {
				out[k] = v
			}
		case "additionalProperties":
			if b, ok := v.(bool); ok {
				out[k] = b
			} else if s, ok := sub(v); ok {
				out[k] = s
			}
		case "items":
			if s, ok := sub(v); ok {
				out[k] = s
			} else if a, ok := v.([]any); ok {
				// TD 1.1 allows a list of schemas: 2020-12 names that
				// prefixItems.
				var items []any
				for _, e := range a {
					if s, ok := sub(e); ok {
						items = append(items, s)
					}
				}
				if items != nil {
					out["prefixItems"] = items
				}
			}
		case "oneOf", "anyOf", "allOf":
			if a, ok := v.([]any); ok {
				var all []any
				for _, e := range a {
					if s, ok := sub(e); ok {
						all = append(all, s)
					}
				}
				if all != nil {
					out[k] = all
				}
			}
		case "not":
			if s, ok := sub(v); ok {
				out[k] = s
			}
		}
	}
	// A TD's unit is the one TD term a model needs to call correctly.
	if unit, ok := ds["unit"].(string); ok && unit != "" {
		if d, _ := out["description"].(string); d != "" {
			out["description"] = fmt.Sprintf("%s (unit: %s)", d, unit)
		} else {
			out["description"] = "unit: " + unit
		}
	}
	return out
}

// number reads a TD's numeric term: the registry's documents hold
// json.Number, the CBOR decoder's other types.
func number(v any) (float64, bool) {
	f, ok := jsonx.Number(v)
	return f, ok && !math.IsNaN(f) && !math.IsInf(f, 0)
}

// isObject reports whether a converted schema describes only objects.
func isObject(s map[string]any) bool {
	return s["type"] == "object"
}

// inputSchema is a tool's inputSchema for an action's input schema (nil:
// the action takes no input) and whether the input is wrapped in an
// object under wrapKey.
func inputSchema(input map[string]any) (map[string]any, bool) {
	if input == nil {
		return map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false}, false
	}
	s := jsonSchema(input)
	wrap := !isObject(s)
	if wrap {
		s = wrapped(wrapKey, s, "The action's input.")
	}
	return resolvable(s), wrap
}

// outputSchema is a tool's outputSchema for an action's output schema
// (nil: none declared, so none is given) and whether the output is
// wrapped in an object under resultKey.
func outputSchema(output map[string]any) (map[string]any, bool) {
	if output == nil {
		return nil, false
	}
	s := jsonSchema(output)
	wrap := !isObject(s)
	if wrap {
		s = wrapped(resultKey, s, "The action's output.")
	}
	return resolvable(s), wrap
}

// wrapped is the object schema with s as its one property key. A
// schema's $schema and definitions belong at the root, so they move up;
// its other references, into s, now point below properties/key.
func wrapped(key string, s map[string]any, desc string) map[string]any {
	if _, ok := s["description"]; !ok {
		s["description"] = desc
	}
	w := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{key: s},
		"required":             []any{key},
		"additionalProperties": false,
	}
	for _, k := range []string{"$schema", "$defs", "definitions"} {
		if v, ok := s[k]; ok {
			w[k] = v
			delete(s, k)
		}
	}
	eachSchema(w, func(m map[string]any) {
		r, ok := m["$ref"].(string)
		if ok && !strings.HasPrefix(r, "#/$defs/") && !strings.HasPrefix(r, "#/definitions/") {
			m["$ref"] = "#/properties/" + pointerToken(key) + strings.TrimPrefix(r, "#")
		}
	})
	return w
}

// localRef reports whether a $ref is a JSON pointer into the schema itself
// ("#" or "#/..."); anchors are not kept, so "#name" is not.
func localRef(r string) bool {
	return r == "#" || strings.HasPrefix(r, "#/")
}

func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// eachSchema calls fn on s and on every schema below it, following the
// keywords convert keeps (not const, default or enum, whose values are
// data).
func eachSchema(s map[string]any, fn func(map[string]any)) {
	fn(s)
	for k, v := range s {
		switch k {
		case "properties", "$defs", "definitions":
			m, _ := v.(map[string]any)
			for _, e := range m {
				if sub, ok := e.(map[string]any); ok {
					eachSchema(sub, fn)
				}
			}
		case "prefixItems", "oneOf", "anyOf", "allOf":
			a, _ := v.([]any)
			for _, e := range a {
				if sub, ok := e.(map[string]any); ok {
					eachSchema(sub, fn)
				}
			}
		case "items", "additionalProperties", "not":
			if sub, ok := v.(map[string]any); ok {
				eachSchema(sub, fn)
			}
		}
	}
}

// resolvable returns s, without its $refs if one of them points nowhere
// (a TD's typo): a listed schema must compile for the client, and the hub
// itself then checks the input with the TD's other terms alone.
func resolvable(s map[string]any) map[string]any {
	refs := false
	eachSchema(s, func(m map[string]any) { refs = refs || m["$ref"] != nil })
	if !refs || compiles(s) {
		return s
	}
	eachSchema(s, func(m map[string]any) { delete(m, "$ref") })
	return s
}

// compiles reports whether s compiles as JSON Schema 2020-12, loading
// nothing.
func compiles(s map[string]any) bool {
	b, err := json.Marshal(s)
	if err != nil {
		return false
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return false
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const url = "mem:///tool-schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return false
	}
	_, err = c.Compile(url)
	return err == nil
}

// noLoader loads no schema from anywhere.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("mcpdoor: tool schemas load nothing (%s)", url)
}

// conversational reports whether an action's input is a conversation:
// an object whose required "messages" are objects with a "content" (the
// LMOS chat shape, {"messages":[{"role","content"}]}). Its tool takes one
// message instead (PROTOCOL §11.2).
func conversational(input map[string]any) bool {
	if input == nil || input["type"] != "object" {
		return false
	}
	props, _ := input["properties"].(map[string]any)
	msgs, _ := props["messages"].(map[string]any)
	items, _ := msgs["items"].(map[string]any)
	itemProps, _ := items["properties"].(map[string]any)
	if msgs["type"] != "array" || itemProps["content"] == nil {
		return false
	}
	for name := range props {
		if name != "messages" {
			if req, _ := input["required"].([]any); containsString(req, name) {
				return false // another member the one message cannot fill
			}
		}
	}
	return true
}

func containsString(list []any, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// messageSchema is the inputSchema of a conversational action's tool.
func messageSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"message": map[string]any{"type": "string", "minLength": 1, "description": "What to say to the agent, in words."},
		},
		"required":             []any{"message"},
		"additionalProperties": false,
	}
}
