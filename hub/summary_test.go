package hub

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/theory/jsonpath"
)

func TestRequiredStrings(t *testing.T) {
	cases := []struct {
		query string
		want  need
	}{
		{`$[?@.title=='Lamp'].id`, need{{"Lamp"}}},
		{`$[?'Lamp'==@.title]`, need{{"Lamp"}}},
		{`$[?@.title=='a' && @.x=='b']`, need{{"a"}, {"b"}}},
		{`$[?@.title=='a' || @.title=='b']`, need{{"a", "b"}}},
		{`$[?@['lmos:capabilities'][?@.name=='set temperature']].id`, need{{"lmos:capabilities"}, {"set temperature"}}},
		{`$[?@.actions.toggle]`, need{{"actions"}, {"toggle"}}},
		{`$[?@.title=='say "hi" == x']`, need{{`say "hi" == x`}}},
		// Nothing can be required of these.
		{`$[?@.title=='a' || @.x]`, need{{"a", "x"}}},
		{`$[?@.title=='a' || @.n > 1]`, nil},
		{`$[?!(@.title=='a')]`, nil},
		{`$[?@.title!='a']`, nil},
		{`$[?@.n==1]`, nil},
		{`$[?'a'=='a']`, nil},
		{`$[?match(@.title, 'a')]`, nil},
		{`$[*].title`, nil},
		{`$[?@.a[0,1]]`, need{{"a"}}},
	}
	for _, c := range cases {
		got := requiredStrings(jsonpath.MustParse(c.query))
		if len(got) == 0 && len(c.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: need %q, want %q", c.query, got, c.want)
		}
	}
}

// TestSummaryBloom: every member name and string value of a document is
// reported as possibly present (no false negatives, or the prefilter would
// drop results), and few absent strings are.
func TestSummaryBloom(t *testing.T) {
	files, _ := filepath.Glob("../testdata/tds/*.json")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := ParseDocument(raw)
		if err != nil {
			continue // the invalid samples
		}
		s := summarize(doc)
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case string:
				if !s.mayContain(v) {
					t.Errorf("%s: string value %q missed", f, v)
				}
			case map[string]any:
				for k, e := range v {
					if !s.mayContain(k) {
						t.Errorf("%s: member name %q missed", f, k)
					}
					walk(e)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(doc)
		fp := 0
		for i := range 10000 {
			if s.mayContain(fmt.Sprintf("absent string %d", i)) {
				fp++
			}
		}
		if fp > 300 {
			t.Errorf("%s: %d of 10000 absent strings pass the filter; want under 3 %%", f, fp)
		}
	}
}

func TestSummaryFacts(t *testing.T) {
	doc, err := ParseDocument([]byte(`{"id":"urn:x","title":"Lamp","@type":["lmos:Tool","saref:Light"],
		"properties":{"on":{},"level":{}},"actions":{"toggle":{}},"events":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(doc)
	if s.Title != "Lamp" || !reflect.DeepEqual(s.Types(), []string{"lmos:Tool", "saref:Light"}) {
		t.Errorf("title %q types %q", s.Title, s.Types())
	}
	if !reflect.DeepEqual(s.Affordances("properties"), []string{"level", "on"}) || !s.HasAffordance("actions", "toggle") ||
		s.HasAffordance("events", "toggle") || s.HasAffordance("forms", "x") {
		t.Errorf("affordances %q %q %q", s.Affordances("properties"), s.Affordances("actions"), s.Affordances("events"))
	}
}

// FuzzDecodeSummary: stored summaries are read back at start-up; a damaged
// one must be refused, never crash the hub or index out of range later.
func FuzzDecodeSummary(f *testing.F) {
	for _, td := range []string{
		`{"title":"Lamp","@type":"lmos:Tool","properties":{"on":{"title":"On"}},"actions":{"toggle":{}},
		  "lmos:capabilities":[{"name":"light","examples":["turn on"]}]}`,
		`{"title":""}`,
	} {
		doc, err := ParseDocument([]byte(td))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(EncodeSummary(summarize(doc)))
	}
	f.Add([]byte{summaryVersion})
	f.Add([]byte{summaryVersion, 0, 0, 0, 0, 0, 5, 2, 9, 9, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSummary(b)
		if err != nil {
			return
		}
		s.eachField(func(kind byte, a, c int, text string) { _ = s.fieldPointer(kind, a, c) })
		_ = s.mayContain("x")
		_ = s.HasAffordance("actions", "toggle")
		if again, err := DecodeSummary(EncodeSummary(s)); err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("re-encoding changed the summary: %v", err)
		}
	})
}

// TestBloomKeysAreStable: stored filters are read by later processes, so
// the hash must not depend on the process (a random seed made every stored
// filter useless after a restart). These values are the hash's, fixed.
func TestBloomKeysAreStable(t *testing.T) {
	for s, want := range map[string]bloomKey{
		"":                {0xa9b5e89b, 0xf52a15e9},
		"set temperature": {0x6ed82d3f, 0xa55f0f69},
	} {
		if got := keyOf(s); got != want {
			t.Errorf("keyOf(%q) = %#x, want %#x", s, got, want)
		}
	}
}
