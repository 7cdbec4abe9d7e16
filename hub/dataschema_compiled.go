package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"

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
	// schema is nil when the validator cannot compile the schema (an
	// unresolvable $ref, a pattern Go's regexp refuses): such a value is
	// checked with CheckValue's basic terms instead.
	schema *jsonschema.Schema
}

// checkDataSchema checks v against the TD data schema s with the JSON
// Schema validator, compiled once per Thing version (key names the
// affordance in cache; cache may be nil).
func checkDataSchema(cache *dataSchemas, key string, s map[string]any, v any) error {
	src, err := json.Marshal(s)
	if err != nil {
		return CheckValue(s, v)
	}
	var c *compiledDataSchema
	if cache != nil {
		cache.mu.Lock()
		c = cache.m[key]
		cache.mu.Unlock()
	}
	if c == nil || !bytes.Equal(c.src, src) {
		c = &compiledDataSchema{src: src, schema: compileDataSchema(src)}
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
		return CheckValue(s, v)
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
func checkInput(in Interaction) error {
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
	v, err := DecodeValue(in.Input, in.ContentType)
	if err != nil {
		return err
	}
	var cache *dataSchemas
	if in.Thing != nil && in.Thing.Summary != nil {
		cache = in.Thing.Summary.schemas
	}
	return checkDataSchema(cache, key, schema, v)
}
