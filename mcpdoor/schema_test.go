package mcpdoor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compileSchema compiles s as JSON Schema 2020-12, which checks it
// against the 2020-12 meta-schema.
func compileSchema(t testing.TB, s map[string]any) error {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("mem:///s.json", doc); err != nil {
		return err
	}
	_, err = c.Compile("mem:///s.json")
	return err
}

// toolSchemas are the inputSchema and outputSchema of every action of doc.
func toolSchemas(t testing.TB, doc map[string]any) []map[string]any {
	t.Helper()
	ts := thingSpecsOf(hub.Thing{ID: "urn:x"}, doc)
	var out []map[string]any
	for _, s := range ts.specs {
		out = append(out, decode(t, s.in))
		if s.out != nil {
			out = append(out, decode(t, s.out))
		}
	}
	return out
}

var tricky = `{"title":"Tricky","actions":{
 "none":{},
 "str":{"input":{"type":"string","enum":["a","b"],"unit":"m"},"output":{"type":"number","unit":"degree Celsius","minimum":0}},
 "tuple":{"input":{"type":"array","items":[{"type":"string"},{"type":"integer"}],"minItems":2}},
 "choice":{"input":{"oneOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"type":"null"}]}},
 "nested":{"input":{"type":"object","properties":{"x":{"type":"object","properties":{"y":{"type":"array","items":{"type":"object","readOnly":true,"properties":{"z":{"type":"string","format":"date-time","@type":"saref:Time","forms":[]}}}}}}},"required":["x","x"]}},
 "bad":{"input":{"type":"objekt","required":"x","minimum":"1","maxLength":-1,"multipleOf":0,"enum":[],"properties":{"p":5},"additionalProperties":{"type":"string"}}},
 "tdonly":{"input":{"type":"object","properties":{"t":{"type":"string","contentMediaType":"text/plain","contentEncoding":"base64","const":"x","default":"x"}},"writeOnly":true}}
}}`

// TestEveryGeneratedSchemaIsJSONSchema: the tools of the sample TDs, a
// generated one and a tricky one have schemas that compile as JSON Schema
// 2020-12 and describe objects, as MCP requires.
func TestEveryGeneratedSchemaIsJSONSchema(t *testing.T) {
	var docs []map[string]any
	files, _ := filepath.Glob("../testdata/tds/*.json") // the repository's sample TDs
	for _, f := range append(files, "testdata-tricky") {
		var b []byte
		if f == "testdata-tricky" {
			b = []byte(tricky)
		} else {
			var err error
			if b, err = os.ReadFile(f); err != nil {
				t.Fatal(err)
			}
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		docs = append(docs, doc)
	}
	var gen map[string]any
	_ = json.Unmarshal(tdgen.MakeTD("urn:g", "Generated"), &gen)
	docs = append(docs, gen)
	n := 0
	for _, doc := range docs {
		for _, s := range toolSchemas(t, doc) {
			n++
			if err := compileSchema(t, s); err != nil {
				t.Errorf("%s: %s does not compile: %v", doc["title"], mustJSON(s), err)
			}
			if s["type"] != "object" {
				t.Errorf("%s: %s is not an object schema", doc["title"], mustJSON(s))
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d schemas checked", n)
	}
	// The tuple's items became prefixItems; the unit reached the model.
	ts := thingSpecsOf(hub.Thing{ID: "urn:x"}, mustDoc(tricky))
	got := map[string]string{}
	for _, s := range ts.specs {
		got[s.action] = string(s.in) + " " + string(s.out)
	}
	for action, want := range map[string]string{
		"tuple": `"prefixItems":[{"type":"string"},{"type":"integer"}]`,
		"str":   `"description":"unit: degree Celsius"`,
		"none":  `{"additionalProperties":false,"properties":{},"type":"object"} `,
	} {
		if !strings.Contains(got[action], want) {
			t.Errorf("%s: %s lacks %s", action, got[action], want)
		}
	}
}

func decode(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustDoc(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzSchemaConversion: whatever data schema a TD holds, the tool's
// schemas compile as JSON Schema 2020-12 and describe objects.
func FuzzSchemaConversion(f *testing.F) {
	f.Add(`{"type":"string"}`)
	f.Add(`{"type":"object","properties":{"a":{"type":"array","items":[{"type":"x"}]}},"required":["a",1]}`)
	f.Add(`{"oneOf":[{"not":{"type":"null"}},5],"anyOf":"x","minimum":1e400}`)
	f.Add(`{"type":["string","null"],"additionalProperties":{"items":{"items":{}}}}`)
	f.Fuzz(func(t *testing.T, in string) {
		// Numbers as the registry holds them (json.Number).
		var ds map[string]any
		dec := json.NewDecoder(strings.NewReader(in))
		dec.UseNumber()
		if dec.Decode(&ds) != nil {
			return
		}
		for _, s := range []map[string]any{must(inputSchema(ds)), must(outputSchema(ds))} {
			if err := compileSchema(t, s); err != nil {
				t.Fatalf("%s → %s: %v", in, mustJSON(s), err)
			}
			if s["type"] != "object" {
				t.Fatalf("%s → %s: not an object schema", in, mustJSON(s))
			}
		}
	})
}

func must(s map[string]any, _ bool) map[string]any { return s }
