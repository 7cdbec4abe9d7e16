package tdgen_test

import (
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/tdgen"
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
