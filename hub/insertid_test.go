package hub

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzInsertID checks the splice behind anonymous creation: for any object
// the hub accepts, the result is that object plus "id", and nothing else.
func FuzzInsertID(f *testing.F) {
	for _, s := range []string{`{}`, ` { } `, `{"title":"x"}`, "\n{\n  \"a\": [1, {\"b\": null}]\n}\n", `{"a":"{"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc, err := ParseDocument(raw)
		if err != nil {
			return
		}
		if _, has := doc["id"]; has {
			return // Create refuses these before splicing
		}
		out, err := insertID(raw, "urn:uuid:00000000-0000-4000-8000-000000000000")
		if err != nil {
			t.Fatalf("insertID(%q): %v", raw, err)
		}
		got, err := ParseDocument(out)
		if err != nil {
			t.Fatalf("spliced %q does not parse: %v", out, err)
		}
		if got["id"] != "urn:uuid:00000000-0000-4000-8000-000000000000" {
			t.Fatalf("id = %v", got["id"])
		}
		delete(got, "id")
		if !reflect.DeepEqual(got, doc) {
			a, _ := json.Marshal(doc)
			b, _ := json.Marshal(got)
			t.Fatalf("members changed: %s → %s", a, b)
		}
	})
}
