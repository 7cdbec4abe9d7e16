package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"sync"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// dataSchemaURL names an affordance's data schema while it is compiled; the
// host is reserved (RFC 2606), and nothing is ever fetched from it.
const dataSchemaURL = "https://lmos-hub.invalid/dataschema.json"

// maxDataSchemaErrors bounds the validationErrors of one refused value.
const maxDataSchemaErrors = 16

// dataSchemas caches the compiled data schemas of one Thing version's
// affordances. It lives in the version's Summary, so it is freed with it
// when the Thing changes or goes; each entry also keeps the bytes it was
// compiled from, so a document read in a race with a write is never checked
// against another version's schema.
type dataSchemas struct {
	mu sync.Mutex
	m  map[string]*compiledDataSchema
}

type compiledDataSchema struct {
	src []byte
	// schema is the basic terms of the data schema (basicTerms) when the
	// validator cannot compile the whole (an unresolvable $ref, a pattern
	// Go's regexp refuses, a term whose value draft-07 rules out).
	schema *jsonschema.Schema
}

// checkDataSchema checks v against the TD data schema s with the JSON
// Schema validator, compiled once per Thing version (key names the
// affordance in cache; cache may be nil).
func checkDataSchema(cache *dataSchemas, key string, s map[string]any, v any) error {
	src, err := json.Marshal(s)
	if err != nil {
		src = nil // no compiled form: checked with the basic terms below
	}
	var c *compiledDataSchema
	if cache != nil {
		cache.mu.Lock()
		c = cache.m[key]
		cache.mu.Unlock()
	}
	if c == nil || !bytes.Equal(c.src, src) {
		c = &compiledDataSchema{src: src, schema: compileDataSchema(src)}
		if c.schema == nil {
			c.schema = compileDataSchema(mustJSON(basicTerms(s, 0)))
		}
		if cache != nil {
			cache.mu.Lock()
			if cache.m == nil {
				cache.m = make(map[string]*compiledDataSchema)
			}
			cache.m[key] = c
			cache.mu.Unlock()
		}
	}
	if c.schema == nil {
		return nil // cannot happen: basicTerms keeps only what draft-07 accepts
	}
	err = c.schema.Validate(schemaValue(v))
	if err == nil {
		return nil
	}
	var fields []FieldError
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		var issues []schemaIssue
		collectSchemaErrors(ve, &issues)
		for _, i := range issues {
			if len(fields) == maxDataSchemaErrors {
				break
			}
			// The mapping is shared with TD validation; here the schema is
			// the affordance's.
			i.Description = strings.Replace(i.Description, "the TD 1.1 JSON Schema allows", "the data schema allows", 1)
			fields = append(fields, i.FieldError)
		}
	}
	if len(fields) == 0 {
		fields = []FieldError{{Field: "", Description: "does not match the data schema"}}
	}
	return &Error{Code: EINVALID, Message: "the input does not match the affordance's data schema", Fields: fields}
}

// compileDataSchema compiles a TD data schema as a draft-07 JSON Schema:
// TD 1.1 §5.3.2 takes its terms from JSON Schema, and in draft-07 an
// "items" array is a tuple, as in TD (draft 2020-12 renamed it
// prefixItems). TD-only terms (unit, readOnly, forms, …) are annotations to
// the validator. Nothing is loaded from outside; nil if it does not compile.
func compileDataSchema(src []byte) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		return nil
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(dataSchemaURL, doc); err != nil {
		return nil
	}
	s, err := c.Compile(dataSchemaURL)
	if err != nil {
		return nil
	}
	return s
}

// refuseLoader keeps a data schema's $ref from reaching the network or the
// file system.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("hub: data schemas load nothing (%s)", url)
}

// schemaValue gives v in the number types the validator knows: big
// integers (CBOR) become json.Number. Other values are returned as they are.
func schemaValue(v any) any {
	switch x := v.(type) {
	case *big.Int:
		return json.Number(x.String())
	case []any:
		for i, e := range x {
			x[i] = schemaValue(e)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = schemaValue(e)
		}
	}
	return v
}

// checkInput checks a written value or an action's input against the data
// schema the TD gives for it (a property's own schema, an action's
// "input"), so that no consumer, whatever its transport, reaches an agent
// with a value the TD rules out.
func checkInput(in Interaction, dec Decoder) error {
	var schema map[string]any
	var key string
	switch in.Op {
	case OpWriteProperty:
		schema, key = in.Affordance, "properties/"+in.Name
	case OpInvokeAction:
		schema, _ = in.Affordance["input"].(map[string]any)
		key = "actions/" + in.Name
	}
	if schema == nil || len(in.Input) == 0 {
		return nil
	}
	v, err := dec.DecodeValue(in.Input, in.ContentType)
	if err != nil {
		return err
	}
	var cache *dataSchemas
	if in.Thing != nil && in.Thing.Summary != nil {
		cache = in.Thing.Summary.schemaCache()
	}
	return checkDataSchema(cache, key, schema, v)
}

// basicTerms is the part of the data schema s the hub checks when the
// whole does not compile: type, const, enum, the numeric and length
// bounds, items (one schema), properties, required and oneOf, each kept
// only when its value is one draft-07 accepts, so the result always
// compiles. Other terms, and terms below maxSchemaDepth, are left out, as a
// consumer ignores what it does not know.
func basicTerms(s map[string]any, depth int) map[string]any {
	out := map[string]any{}
	if depth > maxSchemaDepth {
		return out
	}
	if t, ok := s["type"].(string); ok && slices.Contains(schemaTypes, t) {
		out["type"] = t
	}
	if c, ok := s["const"]; ok {
		out["const"] = c
	}
	if e, ok := s["enum"].([]any); ok {
		// draft-07 wants enum's values unique (by value: 1 and 1.0 are
		// one) and at least one; as a choice of constants the same rule
		// needs neither, and an empty enum allows nothing.
		alts := make([]any, len(e))
		for i, x := range e {
			alts[i] = map[string]any{"const": x}
		}
		if len(alts) == 0 {
			out["not"] = map[string]any{}
		} else {
			out["anyOf"] = alts
		}
	}
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		if _, ok := jsonx.Number(s[k]); ok {
			out[k] = s[k]
		}
	}
	for _, k := range []string{"minLength", "maxLength", "minItems", "maxItems"} {
		if f, ok := jsonx.Number(s[k]); ok && f >= 0 && f == math.Trunc(f) && !math.IsInf(f, 0) {
			out[k] = s[k]
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		out["items"] = basicTerms(items, depth+1)
	}
	if props, ok := s["properties"].(map[string]any); ok {
		p := make(map[string]any, len(props))
		for name, ps := range props {
			if psm, ok := ps.(map[string]any); ok {
				p[name] = basicTerms(psm, depth+1)
			}
		}
		out["properties"] = p
	}
	if req, ok := s["required"].([]any); ok {
		names := []any{}
		for _, r := range req {
			if n, ok := r.(string); ok && !slices.Contains(names, any(n)) {
				names = append(names, n)
			}
		}
		out["required"] = names
	}
	if alts, ok := s["oneOf"].([]any); ok {
		var subs []any
		for _, a := range alts {
			if as, ok := a.(map[string]any); ok {
				subs = append(subs, basicTerms(as, depth+1))
			}
		}
		if len(subs) > 0 {
			out["oneOf"] = subs
		}
	}
	return out
}

// maxSchemaDepth bounds the recursion of basicTerms through nested schemas.
const maxSchemaDepth = 32

// schemaTypes are the JSON Schema type names; another "type" is ignored.
var schemaTypes = []string{"object", "array", "string", "boolean", "null", "number", "integer"}

// mustJSON encodes basic terms, which hold only decoded JSON values.
func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
