package hub

import (
	"encoding/json"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/internal/tdindex"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// TestCheckDataSchema checks values the way checkInput does (the JSON
// Schema validator, see checkDataSchema).
func TestCheckDataSchema(t *testing.T) {
	schema := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	value := func(s string) any {
		v, err := Decoder{}.DecodeValue([]byte(s), lmos.MediaJSON)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	obj := `{"type":"object","required":["a"],"properties":{"a":{"type":"integer","minimum":0,"maximum":10},
		"s":{"type":"string","minLength":2,"enum":["ab","cd"]},"l":{"type":"array","maxItems":2,"items":{"type":"boolean"}}}}`
	for _, tc := range []struct {
		schema, value string
		ok            bool
		field         string // the first failing member, when checked
	}{
		{obj, `{"a":3}`, true, ""},
		{obj, `{"a":3,"s":"ab","l":[true,false],"other":1}`, true, ""},
		{obj, `{}`, false, "/a"},
		{obj, `{"a":3.5}`, false, "/a"},
		{obj, `{"a":11}`, false, "/a"},
		{obj, `{"a":-1}`, false, "/a"},
		{obj, `{"a":1,"s":"x"}`, false, "/s"},
		{obj, `{"a":1,"s":"zz"}`, false, "/s"},
		{obj, `{"a":1,"l":[1]}`, false, "/l/0"},
		{obj, `{"a":1,"l":[true,true,true]}`, false, "/l"},
		{obj, `[1]`, false, ""},
		{`{"type":"number","exclusiveMinimum":0}`, `0`, false, ""},
		{`{"const":"x"}`, `"x"`, true, ""},
		{`{"const":"x"}`, `"y"`, false, ""},
		{`{"oneOf":[{"type":"string"},{"type":"number"}]}`, `1`, true, ""},
		{`{"oneOf":[{"type":"string"},{"type":"number"}]}`, `true`, false, ""},
		{`{"type":"null"}`, `null`, true, ""},
		{`{"unknownTerm":1,"type":"integer"}`, `1e2`, true, ""},
		{`{"type":"object","properties":{"a~/b":{"type":"string"}}}`, `{"a~/b":1}`, false, "/a~0~1b"},
		// TD 1.1 §5.3.2 terms the hand-written checker ignored (issue 11,
		// point 10): pattern, multipleOf and tuple items.
		{`{"type":"string","pattern":"^[0-9]+$"}`, `"123"`, true, ""},
		{`{"type":"string","pattern":"^[0-9]+$"}`, `"ABC123"`, false, ""},
		{`{"type":"object","properties":{"code":{"type":"string","pattern":"^[0-9]+$"}}}`, `{"code":"ABC123"}`, false, "/code"},
		{`{"type":"integer","multipleOf":5}`, `10`, true, ""},
		{`{"type":"integer","multipleOf":5}`, `7`, false, ""},
		{`{"type":"number","multipleOf":0.5}`, `1.5`, true, ""},
		{`{"type":"array","items":[{"type":"string"},{"type":"integer"}]}`, `["a",1]`, true, ""},
		{`{"type":"array","items":[{"type":"string"},{"type":"integer"}]}`, `["a","b"]`, false, "/1"},
		{`{"type":"array","items":[{"type":"string"},{"type":"integer"}]}`, `[1,2]`, false, "/0"},
		{`{"type":"string","format":"date-time"}`, `"2026-11-23T23:00:00Z"`, true, ""},
		{`{"type":"string","format":"date-time"}`, `"yesterday"`, false, ""},
		// TD-only terms are annotations.
		{`{"type":"number","unit":"om:degree_Celsius","readOnly":true,"forms":[{"href":"x"}]}`, `21.5`, true, ""},
		// A big CBOR/JSON integer is a number to the validator too.
		{`{"type":"integer","maximum":10}`, `123456789012345678901234567890`, false, ""},
		// A schema the validator cannot compile (a $ref it may not load)
		// falls back to the basic terms.
		{`{"type":"string","items":{"$ref":"https://example.invalid/x"}}`, `"x"`, true, ""},
		{`{"type":"string","items":{"$ref":"https://example.invalid/x"}}`, `1`, false, ""},
		// So does a pattern Go's regexp refuses; terms whose values draft-07
		// rules out are left out of the basic terms, the others still hold.
		{`{"type":"object","properties":{"a":{"type":"string","pattern":"(?<=x)y"}},"required":["a","a",1]}`, `{"a":"z"}`, true, ""},
		{`{"type":"object","properties":{"a":{"type":"string","pattern":"(?<=x)y"}},"required":["a","a",1]}`, `{"a":1}`, false, "/a"},
		{`{"type":"object","properties":{"a":{"type":"string","pattern":"(?<=x)y"}},"required":["a","a",1]}`, `{}`, false, ""},
		{`{"type":"string","minLength":2.5,"maxLength":-1,"pattern":"(?<=x)y","enum":["ab","c"]}`, `"c"`, true, ""},
		{`{"type":"string","minLength":2.5,"maxLength":-1,"pattern":"(?<=x)y","enum":["ab","c"]}`, `"d"`, false, ""},
		{`{"type":"wat","pattern":"(?<=x)y","oneOf":[{"type":"string"},{"type":"number"},7]}`, `true`, false, ""},
		{`{"type":"wat","pattern":"(?<=x)y","oneOf":[{"type":"string"},{"type":"number"},7]}`, `"s"`, true, ""},
		{`{"type":"integer","pattern":"(?<=x)y","minimum":"0","maximum":10}`, `11`, false, ""},
		{`{"type":"integer","pattern":"(?<=x)y","minimum":"0","maximum":10}`, `-1`, true, ""},
		{`{"type":"object","pattern":"(?<=x)y","required":[1]}`, `[]`, false, ""},
		{`{"enum":[],"pattern":"(?<=x)y"}`, `"x"`, false, ""},
		{`{"enum":[1,1.0,"x"],"const":"x","pattern":"(?<=x)y"}`, `"x"`, true, ""},
		{`{"enum":[1,1.0,"x"],"pattern":"(?<=x)y"}`, `1`, true, ""},
		{`{"enum":[1,1.0,"x"],"pattern":"(?<=x)y"}`, `2`, false, ""},
		{`{"type":"object","required":["a","a"],"pattern":"(?<=x)y"}`, `{}`, false, "/a"},
	} {
		err := checkDataSchema(nil, "", schema(tc.schema), value(tc.value))
		if tc.ok {
			if err != nil {
				t.Errorf("%s %s: %v", tc.schema, tc.value, err)
			}
			continue
		}
		if ErrorCode(err) != EINVALID {
			t.Errorf("%s %s: %v, want an invalid error", tc.schema, tc.value, err)
			continue
		}
		if f := ErrorFields(err); tc.field != "" && (len(f) == 0 || f[0].Field != tc.field) {
			t.Errorf("%s %s: fields %v, want %s", tc.schema, tc.value, f, tc.field)
		}
	}
}

// TestCheckInput: the router checks an action's "input" schema and a
// property's own schema; an action without one takes anything.
func TestCheckInput(t *testing.T) {
	doc, err := ParseDocument([]byte(`{"actions":{"go":{"input":{"type":"string"}},"stop":{}},"properties":{"p":{"type":"number"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	aff := func(member, name string) map[string]any { return doc[member].(map[string]any)[name].(map[string]any) }
	for _, c := range []struct {
		op      Op
		member  string
		name    string
		input   string
		invalid bool
	}{
		{OpInvokeAction, "actions", "go", `"north"`, false},
		{OpInvokeAction, "actions", "go", `7`, true},
		{OpInvokeAction, "actions", "stop", `7`, false},
		{OpWriteProperty, "properties", "p", `7`, false},
		{OpWriteProperty, "properties", "p", `"x"`, true},
	} {
		err := checkInput(Interaction{Op: c.op, Name: c.name, Input: []byte(c.input), ContentType: lmos.MediaJSON, Affordance: aff(c.member, c.name)}, Decoder{})
		if (ErrorCode(err) == EINVALID) != c.invalid || (err != nil && !c.invalid) {
			t.Errorf("%s %s %s: %v", c.op, c.name, c.input, err)
		}
	}
}

// summarize is the Summary a registry makes of doc.
func summarize(doc map[string]any) *Summary {
	s, _ := (&Registry{searchIndex: tdindex.New()}).summarize(doc)
	return s
}

// TestCheckInputCompilesOnce: an affordance's schema is compiled once per
// Thing version and kept in its Summary; a new version compiles its own.
func TestCheckInputCompilesOnce(t *testing.T) {
	raw := []byte(`{"actions":{"go":{"input":{"type":"string","pattern":"^[0-9]+$"}}}}`)
	doc, err := ParseDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	th := Thing{Summary: summarize(doc)}
	in := Interaction{Op: OpInvokeAction, Name: "go", ContentType: lmos.MediaJSON, Thing: &th,
		Affordance: doc["actions"].(map[string]any)["go"].(map[string]any)}
	in.Input = []byte(`"ABC123"`)
	if err := checkInput(in, Decoder{}); ErrorCode(err) != EINVALID {
		t.Fatalf("ABC123: %v, want invalid", err)
	}
	first := th.Summary.schemas.Load().m["actions/go"]
	if first == nil || first.schema == nil {
		t.Fatalf("schema not cached: %+v", first)
	}
	in.Input = []byte(`"123"`)
	if err := checkInput(in, Decoder{}); err != nil {
		t.Fatalf("123: %v", err)
	}
	if th.Summary.schemas.Load().m["actions/go"] != first {
		t.Error("the schema was compiled again for the same Thing version")
	}
	// A document read in a race with a write (another schema under the
	// same Summary) is checked against its own schema, not the cached one.
	in.Affordance = map[string]any{"input": map[string]any{"type": "string", "pattern": "^[A-Z0-9]+$"}}
	in.Input = []byte(`"ABC123"`)
	if err := checkInput(in, Decoder{}); err != nil {
		t.Fatalf("new schema: %v", err)
	}
}

// BenchmarkCheckInput measures one action input check against a cached,
// compiled schema (the path of every invocation after the first).
func BenchmarkCheckInput(b *testing.B) {
	doc, err := ParseDocument([]byte(`{"actions":{"order":{"input":{"type":"object","required":["code"],"properties":{
		"code":{"type":"string","pattern":"^[0-9]+$"},"qty":{"type":"integer","multipleOf":5,"minimum":0},
		"at":{"type":"array","items":[{"type":"number"},{"type":"number"}]}}}}}}`))
	if err != nil {
		b.Fatal(err)
	}
	th := Thing{Summary: summarize(doc)}
	in := Interaction{Op: OpInvokeAction, Name: "order", ContentType: lmos.MediaJSON, Thing: &th,
		Affordance: doc["actions"].(map[string]any)["order"].(map[string]any), Input: []byte(`{"code":"123","qty":10,"at":[1.5,2]}`)}
	for b.Loop() {
		if err := checkInput(in, Decoder{}); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzBasicTermsCompile: whatever data schema a TD holds, its basic terms
// compile, so a value is never let through unchecked because the fallback
// failed too.
func FuzzBasicTermsCompile(f *testing.F) {
	for _, s := range []string{`{"type":"wat","enum":[],"required":[1,"a","a"],"minLength":2.5}`,
		`{"enum":[1,1.0],"oneOf":[],"items":{"maxItems":-1},"properties":{"a":{"minimum":"0"}}}`,
		`{"type":"string","minLength":2.0,"maxLength":1e400,"const":{"a":[1]}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		doc, err := ParseDocument([]byte(`{"s":` + s + `}`))
		if err != nil {
			return
		}
		schema, ok := doc["s"].(map[string]any)
		if !ok {
			return
		}
		if compileDataSchema(mustJSON(basicTerms(schema, 0))) == nil {
			t.Fatalf("basic terms of %s do not compile: %s", s, mustJSON(basicTerms(schema, 0)))
		}
	})
}
