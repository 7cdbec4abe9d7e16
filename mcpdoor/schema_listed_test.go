package mcpdoor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestInputSchemaKeepsJSONSchema2020Keywords lists the tools of an agent
// whose action inputs use $schema, $defs and $ref (JSON Schema 2020-12, as
// the MCP conformance scenario json-schema-2020-12 checks, SEP-1613): the
// listed inputSchema keeps them, resolves as JSON Schema, and so refuses
// what the hub refuses when the tool is called. A $ref outside the schema
// is not listed (a client would have to fetch it).
func TestInputSchemaKeepsJSONSchema2020Keywords(t *testing.T) {
	const dialect = "https://json-schema.org/draft/2020-12/schema"
	h := startHub(t, nil)
	address := map[string]any{"type": "object", "properties": map[string]any{"street": map[string]any{"type": "string"}, "city": map[string]any{"type": "string"}}}
	actions := map[string]any{
		"register": map[string]any{"description": "Register a person", "input": map[string]any{
			"$schema": dialect, "type": "object",
			"$defs":                map[string]any{"address": address},
			"properties":           map[string]any{"name": map[string]any{"type": "string"}, "address": map[string]any{"$ref": "#/$defs/address"}},
			"additionalProperties": false,
		}},
		// Not an object: wrapped under "input", its references still resolve.
		"pick": map[string]any{"description": "Pick a slot", "input": map[string]any{
			"$defs": map[string]any{"slot": map[string]any{"type": "integer", "minimum": 1}},
			"$ref":  "#/$defs/slot",
		}},
		// Wrapped, a reference to the whole schema follows it down.
		"nest": map[string]any{"description": "Nested lists", "input": map[string]any{
			"oneOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "array", "items": map[string]any{"$ref": "#"}}},
		}},
		// A reference to nothing (a typo) is left out: the list must compile.
		"typo": map[string]any{"description": "Typo", "input": map[string]any{
			"type": "object", "properties": map[string]any{"a": map[string]any{"$ref": "#/$defs/missing"}},
		}},
		"fetch": map[string]any{"description": "Fetch", "input": map[string]any{
			"type": "object", "properties": map[string]any{"what": map[string]any{"$ref": "https://example.com/what.json"}},
		}},
	}
	connectAgent(t, h, mqttURL(h), agentTD("urn:test:people", "People", actions), func(a *agent.Agent) {
		for name := range actions {
			a.HandleAction(name, func(context.Context, agent.Input) (any, error) { return "ok", nil })
		}
	})
	c := connect(t, h, v2025, "", "")
	tools := c.waitTools(t, "list the agent", func(m map[string]*mcp.Tool) bool { return m["people__fetch"] != nil })

	reg := schemaOf(t, tools["people__register"])
	if reg["$schema"] != dialect || reg["additionalProperties"] != false {
		t.Errorf("register: $schema or additionalProperties lost: %s", mustJSON(reg))
	}
	if defs, _ := reg["$defs"].(map[string]any); defs["address"] == nil {
		t.Errorf("register: $defs.address lost: %s", mustJSON(reg))
	}
	checkListed(t, reg, `{"name":"Ada","address":{"street":"Main St"}}`, `{"name":"Ada","address":{"street":1}}`)
	pick := schemaOf(t, tools["people__pick"])
	checkListed(t, pick, `{"input":2}`, `{"input":0}`)
	checkListed(t, schemaOf(t, tools["people__nest"]), `{"input":[1,[2,[3]]]}`, `{"input":[1,["x"]]}`)
	checkListed(t, schemaOf(t, tools["people__typo"]), `{"a":1}`, `[]`)
	if fetch := mustJSON(schemaOf(t, tools["people__fetch"])); strings.Contains(fetch, "example.com") {
		t.Errorf("fetch: a $ref to another document is listed: %s", fetch)
	}

	// The hub refuses what the listed schemas refuse.
	if res := c.call(t, "people__register", map[string]any{"name": "Ada", "address": map[string]any{"street": 1}}); !res.IsError {
		t.Errorf("register with a bad address: not refused: %s", text(res))
	}
	if res := c.call(t, "people__pick", map[string]any{"input": 0}); !res.IsError {
		t.Errorf("pick 0: not refused: %s", text(res))
	}
	if res := c.call(t, "people__nest", map[string]any{"input": []any{1, []any{"x"}}}); !res.IsError {
		t.Errorf("nest with a string: not refused: %s", text(res))
	}
	if res := c.call(t, "people__pick", map[string]any{"input": 2}); res.IsError {
		t.Errorf("pick 2: refused: %s", text(res))
	}
}

func schemaOf(t *testing.T, tl *mcp.Tool) map[string]any {
	t.Helper()
	if tl == nil {
		t.Fatal("tool not listed")
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(mustJSON(tl.InputSchema)), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkListed compiles a listed schema as JSON Schema 2020-12, loading
// nothing from outside, and checks it accepts good and refuses bad.
func checkListed(t *testing.T, s map[string]any, good, bad string) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(mustJSON(s)))
	if err != nil {
		t.Fatal(err)
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	if err := comp.AddResource("mem:///in.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := comp.Compile("mem:///in.json")
	if err != nil {
		t.Fatalf("listed schema does not compile: %v\n%s", err, mustJSON(s))
	}
	for _, c := range []struct {
		v  string
		ok bool
	}{{good, true}, {bad, false}} {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(c.v)))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); (err == nil) != c.ok {
			t.Errorf("listed schema %s: %s valid=%v, want %v", mustJSON(s), c.v, err == nil, c.ok)
		}
	}
}

// TestInputSchemaKeepsNumericBounds lists an action whose input bounds a
// number and a string: the bounds reach the listed inputSchema (the
// registry's documents hold numbers as json.Number).
func TestInputSchemaKeepsNumericBounds(t *testing.T) {
	h := startHub(t, nil)
	actions := map[string]any{"setTarget": map[string]any{"description": "Set the target", "input": map[string]any{
		"type": "object", "required": []any{"celsius"},
		"properties": map[string]any{
			"celsius": map[string]any{"type": "number", "minimum": 5, "maximum": 30.5, "multipleOf": 0.5},
			"room":    map[string]any{"type": "string", "minLength": 1, "maxLength": 40},
		},
	}}}
	connectAgent(t, h, mqttURL(h), agentTD("urn:test:bounds", "Thermostat", actions), func(a *agent.Agent) {
		a.HandleAction("setTarget", func(context.Context, agent.Input) (any, error) { return nil, nil })
	})
	c := connect(t, h, v2026, "", "")
	tools := c.waitTools(t, "list the agent", func(m map[string]*mcp.Tool) bool { return m["thermostat__setTarget"] != nil })
	got := mustJSON(schemaOf(t, tools["thermostat__setTarget"])["properties"])
	want := `{"celsius":{"maximum":30.5,"minimum":5,"multipleOf":0.5,"type":"number"},"room":{"maxLength":40,"minLength":1,"type":"string"}}`
	if got != want {
		t.Errorf("listed properties\n got %s\nwant %s", got, want)
	}
}
