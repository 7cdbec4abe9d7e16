package mcpdoor_test

import (
	"context"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSchemasKeepNumericKeywords: the numbers of a TD's data schemas
// (minimum, maximum, multipleOf, lengths, counts) reach the tool's
// inputSchema and outputSchema, and the door checks outputs against them.
// The registry decodes TDs with UseNumber; the door once dropped every
// such keyword, so a model saw no bounds and out-of-range outputs passed.
func TestSchemasKeepNumericKeywords(t *testing.T) {
	h := startHub(t, nil)
	set := map[string]any{
		"input": map[string]any{"type": "object", "properties": map[string]any{
			"celsius": map[string]any{"type": "number", "minimum": 5, "maximum": 30.5, "multipleOf": 0.5},
			"label":   map[string]any{"type": "string", "minLength": 1, "maxLength": 64},
			"zones":   map[string]any{"type": "array", "items": map[string]any{"type": "integer", "exclusiveMinimum": 0}, "minItems": 1, "maxItems": 4},
		}, "required": []any{"celsius"}},
		"output": map[string]any{"type": "object", "properties": map[string]any{
			"level": map[string]any{"type": "integer", "maximum": 10},
		}, "required": []any{"level"}},
	}
	connectAgent(t, h, mqttURL(h), agentTD("urn:test:numbers", "Numbers", map[string]any{"set": set}), func(a *agent.Agent) {
		a.HandleAction("set", func(_ context.Context, in agent.Input) (any, error) {
			var v struct{ Celsius float64 }
			if err := in.Decode(&v); err != nil {
				return nil, err
			}
			return map[string]any{"level": int(v.Celsius)}, nil // above 10 breaks the output schema
		})
	})
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := connect(t, h, v, "", "")
			tools := c.waitTools(t, "list numbers__set", func(m map[string]*mcp.Tool) bool { return m["numbers__set"] != nil })
			tl := tools["numbers__set"]
			in := mustJSON(tl.InputSchema)
			for _, want := range []string{`"minimum":5`, `"maximum":30.5`, `"multipleOf":0.5`, `"minLength":1`, `"maxLength":64`,
				`"exclusiveMinimum":0`, `"minItems":1`, `"maxItems":4`} {
				if !strings.Contains(in, want) {
					t.Errorf("inputSchema lacks %s: %s", want, in)
				}
			}
			if out := mustJSON(tl.OutputSchema); !strings.Contains(out, `"maximum":10`) {
				t.Errorf("outputSchema lacks the maximum: %s", out)
			}
			if res := c.call(t, "numbers__set", map[string]any{"celsius": 8}); res.IsError || mustJSON(res.StructuredContent) != `{"level":8}` {
				t.Errorf("level 8: error=%v %s", res.IsError, text(res))
			}
			res := c.call(t, "numbers__set", map[string]any{"celsius": 12})
			if !res.IsError || res.StructuredContent != nil || !strings.Contains(text(res), "does not match the output schema") {
				t.Errorf("level 12 passed the output schema's maximum 10: error=%v structured=%v %s", res.IsError, res.StructuredContent, text(res))
			}
		})
	}
}
