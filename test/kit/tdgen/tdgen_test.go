package tdgen_test

import (
	"encoding/json"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

func TestGeneratedTDsAreValidAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, td := range tdgen.Generate(500) {
		doc, err := hub.ParseDocument(td.Raw)
		if err != nil {
			t.Fatalf("%s: %v", td.ID, err)
		}
		if err := hub.Validate(doc); err != nil {
			t.Fatalf("%s: %v %v", td.ID, err, hub.ErrorFields(err))
		}
		if doc["id"] != td.ID || doc["title"] != td.Title || seen[td.ID] || seen[td.Title] {
			t.Fatalf("%s: id/title wrong or repeated", td.ID)
		}
		seen[td.ID], seen[td.Title] = true, true
	}
}

func TestNested(t *testing.T) {
	var v any
	if err := json.Unmarshal([]byte(tdgen.Nested(3, 4)), &v); err != nil {
		t.Fatal(err)
	}
	depth := 0
	for m, ok := v.(map[string]any); ok; m, ok = m["c"].(map[string]any) {
		depth++
		if n := m["n"].([]any); len(n) != 4 {
			t.Fatalf("level %d has %d numbers, want 4", depth, len(n))
		}
	}
	if depth != 3 {
		t.Fatalf("%d levels, want 3", depth)
	}
}

func TestMakeTDIsValid(t *testing.T) {
	const id = "urn:uuid:6b0e2a3c-0000-4000-8000-000000000001"
	doc, err := hub.ParseDocument(tdgen.MakeTD(id, "Small"))
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.Validate(doc); err != nil {
		t.Fatalf("%v %v", err, hub.ErrorFields(err))
	}
	if doc["id"] != id || doc["title"] != "Small" || doc["@type"] != "lmos:Tool" {
		t.Fatalf("id, title or @type wrong: %v", doc)
	}
}
