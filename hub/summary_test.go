package hub

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/internal/tdgen"

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
	odd := summaryParts{title: "T", names: [3][]string{{"a", "b"}, nil, nil}}
	odd.search = string(appendField(nil, fieldAffordanceTitle, 0, 1, []byte("thermostat \xf8\xffx temperature")))
	f.Add(odd.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSummary(b)
		if err != nil {
			return
		}
		var buf []byte
		s.eachField(&buf, func(kind byte, a, c int, text []byte) { _ = s.fieldPointer(kind, a, c) })
		_ = s.mayContain("x")
		_ = s.HasAffordance("actions", "toggle")
		if again, err := DecodeSummary(EncodeSummary(s)); err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("re-encoding changed the summary: %v", err)
		}
		// What the Summary reads is what was stored.
		ref := storedView(t, b)
		if got, want := fieldsOf(s), rawFieldsOf(ref); !reflect.DeepEqual(got, want) {
			t.Fatalf("fields %+v, want %+v", got, want)
		}
		if s.Title != ref.Title || !reflect.DeepEqual(s.Types(), ref.Types()) || s.enc[s.bloomAt:] != ref.enc[ref.bloomAt:] {
			t.Fatalf("title, types or filter differ from what was stored")
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

// storedView reads a stored summary as it is, search fields in plain text:
// the reference the in-memory Summary is checked against.
func storedView(t testing.TB, enc []byte) *Summary {
	t.Helper()
	p := &Summary{enc: string(enc[1:])}
	if _, ok := p.locate(); !ok {
		t.Fatalf("stored summary does not decode")
	}
	return p
}

type fieldText struct {
	kind byte
	a, c int
	text string
}

// rawFieldsOf reads the search fields of a stored view as they are.
func rawFieldsOf(s *Summary) []fieldText {
	var out []fieldText
	s.eachRawField(func(kind byte, a, c int, text string) { out = append(out, fieldText{kind, a, c, text}) })
	return out
}

func fieldsOf(s *Summary) []fieldText {
	var out []fieldText
	var buf []byte
	s.eachField(&buf, func(kind byte, a, c int, text []byte) {
		out = append(out, fieldText{kind, a, c, string(text)})
	})
	return out
}

// TestSummaryCodedFields: the Summary keeps its search fields with their
// words coded (words.go); everything read from it must be what the stored
// summary says, and a text search must score it exactly as the plain
// fields. Also checks that coding saves memory on the benchmark TDs.
func TestSummaryCodedFields(t *testing.T) {
	var docs []map[string]any
	samples, err := tdgen.Samples("../testdata/tds")
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range samples {
		if doc, err := ParseDocument(raw); err == nil {
			docs = append(docs, doc)
		}
	}
	for _, td := range tdgen.Generate(300) {
		doc, err := ParseDocument(td.Raw)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, doc)
	}
	var encs [][]byte
	for _, doc := range docs {
		_, enc := summarizeEncoded(doc)
		encs = append(encs, enc)
	}
	// A field with bytes that are codes' in memory (possible in a document
	// decoded without UTF-8 checks) and non-ASCII words.
	odd := summaryParts{title: "Größe", types: []string{"x"}, names: [3][]string{{"a\xfb"}, nil, nil}}
	odd.search = string(appendField(appendField(appendField(nil, fieldDescription, 0, 0, []byte("grösse \xf8\xff thermostat\xfftemperature té")),
		fieldTitle, 0, 0, []byte("thermostat living-room x")),
		fieldAffordanceName, 0, 0, []byte("\xfb")))
	encs = append(encs, odd.encode())
	queries := [][]string{{"temperature"}, {"therm", "set"}, {"room", "agent"}, {"grösse"}, {"té"}, {"1"}, {"the"},
		{"garden", "lamp"}, {"thermostat"}, {"thermostattemperature"}, {"stat", "ure"}, {"living", "room", "set", "temperature"}, {"x"}}
	coded, plain := 0, 0
	for i, enc := range encs {
		s, err := DecodeSummary(enc)
		if err != nil {
			t.Fatalf("summary %d: %v", i, err)
		}
		ref := storedView(t, enc)
		if got := EncodeSummary(s); !bytes.Equal(got, enc) {
			t.Fatalf("summary %d: re-encoded differs:\n%q\n%q", i, got, enc)
		}
		if got, want := fieldsOf(s), rawFieldsOf(ref); !reflect.DeepEqual(got, want) {
			t.Fatalf("summary %d: fields\n%+v\nwant\n%+v", i, got, want)
		}
		if s.Title != ref.Title || !reflect.DeepEqual(s.Types(), ref.Types()) || s.Secured() != ref.Secured() {
			t.Fatalf("summary %d: title/types/secured differ", i)
		}
		for _, m := range affordanceMembers {
			names := ref.Affordances(m)
			if !reflect.DeepEqual(s.Affordances(m), names) {
				t.Fatalf("summary %d: %s %q, want %q", i, m, s.Affordances(m), names)
			}
			for _, n := range names {
				if !s.HasAffordance(m, n) || s.HasAffordance(m, n+"x") {
					t.Fatalf("summary %d: HasAffordance(%s, %s)", i, m, n)
				}
			}
		}
		if s.enc[s.bloomAt:] != ref.enc[ref.bloomAt:] {
			t.Fatalf("summary %d: Bloom filter differs", i)
		}
		for _, q := range queries {
			a, aok := newScorer(q).score(&Thing{ID: "x", Summary: s})
			b, bok := referenceScore(ref, q)
			if aok != bok || !reflect.DeepEqual(a, b) {
				t.Fatalf("summary %d, query %q: %v %v, want %v %v", i, q, a, aok, b, bok)
			}
		}
		if i < len(docs) {
			coded += int(s.searchEnd - s.searchAt)
			plain += int(ref.searchEnd - ref.searchAt)
		}
	}
	if coded*3 > plain*2 {
		t.Errorf("coded search fields take %d bytes of %d plain; want under two thirds", coded, plain)
	}
}

// referenceScore is the text search's scoring read from a stored summary's
// plain fields: what the scorer does on coded fields must equal it.
func referenceScore(stored *Summary, terms []string) (TextHit, bool) {
	score := 0.0
	var matches []string
	found := make([]bool, len(terms))
	for _, f := range rawFieldsOf(stored) {
		hit := false
		for i, term := range terms {
			at := strings.Index(f.text, term)
			if at < 0 {
				continue
			}
			found[i], hit = true, true
			w := fieldWeights[f.kind]
			if wholeWordAt(f.text, term, at) {
				w *= 1.5
			}
			score += w
		}
		if hit {
			matches = append(matches, stored.fieldPointer(f.kind, f.a, f.c))
		}
	}
	for _, f := range found {
		if !f {
			return TextHit{}, false
		}
	}
	slices.Sort(matches)
	matches = slices.Compact(matches)
	return TextHit{ID: "x", Title: stored.Title, Score: math.Round(score*100) / 100, Matches: matches}, true
}

// TestDecodeSummaryAllocatesWhatItKeeps: decoding a stored summary makes
// the Summary and its string and nothing else (once its words are in the
// dictionary): start-up decodes 10k in a row, and transient copies
// interleaved with the kept strings fragmented the heap.
func TestDecodeSummaryAllocatesWhatItKeeps(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations (sync.Pool drops items)")
	}
	td := tdgen.Generate(1)[0]
	doc, err := ParseDocument(td.Raw)
	if err != nil {
		t.Fatal(err)
	}
	_, enc := summarizeEncoded(doc)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := DecodeSummary(enc); err != nil {
			t.Fatal(err)
		}
	}); n != 2 {
		t.Errorf("DecodeSummary makes %v allocations, want 2", n)
	}
}

// TestWordDictionaryBounded: once a dictionary is full, new words stay
// plain text and every field still reads back whole. (A dictionary of its
// own: the process's would stay full for the other tests.)
func TestWordDictionaryBounded(t *testing.T) {
	var d wordDict
	word := func(i int) string {
		b := []byte("zzq")
		for ; i > 0; i /= 26 {
			b = append(b, byte('a'+i%26))
		}
		return string(b)
	}
	var text strings.Builder
	for i := range maxWordCodes + 10 {
		text.WriteString(word(i) + " ")
	}
	coded := d.compress(nil, text.String())
	if d.n.Load() != maxWordCodes {
		t.Fatalf("dictionary holds %d words, want its bound %d", d.n.Load(), maxWordCodes)
	}
	if got := string(d.expand(nil, string(coded))); got != text.String() {
		t.Fatalf("a full dictionary lost text")
	}
	if _, ok := d.code(word(maxWordCodes + 100)); ok {
		t.Fatalf("a full dictionary coded a new word")
	}
}

// TestWordDictionaryConcurrent: writers coding texts with new words while
// others read them back, as concurrent PUTs and searches do (run with
// -race).
func TestWordDictionaryConcurrent(t *testing.T) {
	var d wordDict
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				text := fmt.Sprintf("shared words %s and %s, then more", strings.Repeat("ab", 2+i%7), strings.Repeat("cd", 2+(g*i)%9))
				if got := string(d.expand(nil, string(d.compress(nil, text)))); got != text {
					t.Errorf("%q came back as %q", text, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

// FuzzCodedText: coding a field's text and expanding it gives it back,
// whatever its bytes.
func FuzzCodedText(f *testing.F) {
	f.Add("keeps the living room thermostat at a target temperature")
	f.Add("grösse \xf8\xff thermostat\xfftemperature")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		if got := string(expandText(nil, string(compressText(nil, text)))); got != text {
			t.Fatalf("%q came back as %q", text, got)
		}
	})
}
