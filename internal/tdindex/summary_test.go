package tdindex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// parse decodes a JSON document as the registry's parser does for what a
// summary reads (objects, arrays, strings).
func parse(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// summarize is Summarize for a document that needs no security.
func summarize(ix *Index, doc map[string]any) *Summary {
	s, _ := ix.Summarize(doc, false)
	return &s
}

// TestSummaryBloom: every member name and string value of a document is
// reported as possibly present (no false negatives, or the prefilter would
// drop results), and few absent strings are.
func TestSummaryBloom(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/tds/*.json")
	if len(files) == 0 {
		t.Fatal("no sample TDs")
	}
	ix := New()
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc := parse(t, raw)
		s := summarize(ix, doc)
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
	ix := New()
	doc := parse(t, []byte(`{"id":"urn:x","title":"Lamp","@type":["lmos:Tool","saref:Light"],
		"properties":{"on":{},"level":{}},"actions":{"toggle":{}},"events":{}}`))
	s := summarize(ix, doc)
	if s.Title != "Lamp" || !reflect.DeepEqual(s.Types(), []string{"lmos:Tool", "saref:Light"}) {
		t.Errorf("title %q types %q", s.Title, s.Types())
	}
	if !s.AnyType(func(t string) bool { return t == "saref:Light" }) || s.AnyType(func(t string) bool { return t == "Light" }) {
		t.Errorf("AnyType does not see the types %q", s.Types())
	}
	if !reflect.DeepEqual(s.Affordances("properties"), []string{"level", "on"}) || !s.HasAffordance("actions", "toggle") ||
		s.HasAffordance("events", "toggle") || s.HasAffordance("forms", "x") {
		t.Errorf("affordances %q %q %q", s.Affordances("properties"), s.Affordances("actions"), s.Affordances("events"))
	}
	if s.Secured() {
		t.Errorf("a summary made as not secured reads as secured")
	}
}

// TestSummarySecuredStored: the secured flag the caller gives is stored
// with the summary and read back after a restart (another Index).
func TestSummarySecuredStored(t *testing.T) {
	doc := parse(t, []byte(`{"title":"Lock","actions":{"open":{}}}`))
	for _, secured := range []bool{false, true} {
		s, enc := New().Summarize(doc, secured)
		if s.Secured() != secured {
			t.Fatalf("Summarize(secured %v) reads %v", secured, s.Secured())
		}
		again, err := New().Decode(enc)
		if err != nil || again.Secured() != secured {
			t.Fatalf("decoded: secured %v, err %v; want %v", again.Secured(), err, secured)
		}
	}
}

// TestSummaryStoredFormat: the encoding the store holds is byte for byte
// what the hub wrote before this package existed (version 3, recorded from
// that code): a hub upgraded in place decodes the summaries it stored. A
// change of format needs a new summaryVersion, which makes the registry
// rebuild every stored summary from its document.
func TestSummaryStoredFormat(t *testing.T) {
	doc := parse(t, []byte(`{"title":"Lamp","@type":"lmos:Tool","description":"A lamp",
		"securityDefinitions":{"b":{"scheme":"basic"}},"security":"b",
		"properties":{"on":{"title":"On"}},"actions":{"setLevel":{}},
		"lmos:capabilities":[{"name":"light","examples":["turn on"]}]}`))
	const stored = "\x03" + // version
		"\x04Lamp" + // title
		"\x01\x09lmos:Tool" + // @type
		"\x01\x02on" + "\x01\x08setLevel" + "\x00" + // properties, actions, events
		"\x3f" + // the search fields' length, then each: kind, a, c, text
		"\x00\x00\x00\x04lamp" +
		"\x01\x00\x00\x06a lamp" +
		"\x02\x00\x00\x02on" +
		"\x03\x00\x00\x02on" +
		"\x02\x01\x00\x09set level" +
		"\x05\x00\x00\x05light" +
		"\x08\x00\x00\x07turn on" +
		"\x01" + // secured
		"\x04" + // the Bloom filter's 64-bit words, little-endian
		"\xe5b\x8d%\x9b\x12 \x9bA\xb1lj\x16 \xa3\xb4\xc1\x1b\xb0N\xc1z\b\xa6\f$\x7f\x1d\x83\xba\x0e\x8c"
	ix := New()
	s, enc := ix.Summarize(doc, true)
	if string(enc) != stored {
		t.Fatalf("stored summary\n%q\nwant\n%q", enc, stored)
	}
	// Read back by another Index (a restarted hub), it says what the
	// document says and encodes to the same bytes.
	again, err := New().Decode([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	if again.Title != "Lamp" || !again.Secured() || !again.HasAffordance("actions", "setLevel") || !again.mayContain("turn on") ||
		!reflect.DeepEqual(again.Types(), s.Types()) || string(ix.Encode(&s)) != stored {
		t.Fatalf("the stored summary reads back as %+v", again)
	}
}

// FuzzDecodeSummary: stored summaries are read back at start-up; a damaged
// one must be refused, never crash the hub or index out of range later.
func FuzzDecodeSummary(f *testing.F) {
	ix := New()
	for _, td := range []string{
		`{"title":"Lamp","@type":"lmos:Tool","properties":{"on":{"title":"On"}},"actions":{"toggle":{}},
		  "lmos:capabilities":[{"name":"light","examples":["turn on"]}]}`,
		`{"title":""}`,
	} {
		f.Add(ix.Encode(summarize(ix, parse(f, []byte(td)))))
	}
	f.Add([]byte{summaryVersion})
	f.Add([]byte{summaryVersion, 0, 0, 0, 0, 0, 5, 2, 9, 9, 0, 0, 0})
	odd := summaryParts{title: "T", names: [3][]string{{"a", "b"}, nil, nil}}
	odd.search = string(appendField(nil, fieldAffordanceTitle, 0, 1, []byte("thermostat \xf8\xffx temperature")))
	f.Add(odd.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ix.Decode(b)
		if err != nil {
			return
		}
		var buf []byte
		ix.eachField(&s, &buf, func(kind byte, a, c int, text []byte) { _ = s.fieldPointer(kind, a, c) })
		_ = s.mayContain("x")
		_ = s.HasAffordance("actions", "toggle")
		if again, err := ix.Decode(ix.Encode(&s)); err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("re-encoding changed the summary: %v", err)
		}
		// What the Summary reads is what was stored.
		ref := storedView(t, b)
		if got, want := fieldsOf(ix, &s), rawFieldsOf(ref); !reflect.DeepEqual(got, want) {
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
	l, ok := locate(enc[1:])
	if !ok {
		t.Fatalf("stored summary does not decode")
	}
	p := &Summary{enc: string(enc[1:]), namesAt: l.namesAt, searchAt: l.searchAt, searchEnd: l.searchEnd, bloomAt: l.bloomAt}
	p.Title = p.enc[l.titleAt : l.titleAt+l.titleLen]
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
	eachFieldIn(s.enc[s.searchAt:s.searchEnd], func(kind byte, a, c int, text string) { out = append(out, fieldText{kind, a, c, text}) })
	return out
}

func fieldsOf(ix *Index, s *Summary) []fieldText {
	var out []fieldText
	var buf []byte
	ix.eachField(s, &buf, func(kind byte, a, c int, text []byte) {
		out = append(out, fieldText{kind, a, c, string(text)})
	})
	return out
}

// TestSummaryCodedFields: the Summary keeps its search fields with their
// words coded (dictionary.go); everything read from it must be what the
// stored summary says, and a text search must score it exactly as the
// plain fields. Also checks that coding saves memory on the benchmark TDs.
func TestSummaryCodedFields(t *testing.T) {
	ix := New()
	var docs []map[string]any
	samples, err := tdgen.Samples("../../testdata/tds")
	if err != nil || len(samples) == 0 {
		t.Fatalf("samples: %d, %v", len(samples), err)
	}
	for _, raw := range samples {
		docs = append(docs, parse(t, raw))
	}
	for _, td := range tdgen.Generate(300) {
		docs = append(docs, parse(t, td.Raw))
	}
	var encs [][]byte
	for _, doc := range docs {
		_, enc := ix.Summarize(doc, false)
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
		s, err := ix.Decode(enc)
		if err != nil {
			t.Fatalf("summary %d: %v", i, err)
		}
		ref := storedView(t, enc)
		if got := ix.Encode(&s); !bytes.Equal(got, enc) {
			t.Fatalf("summary %d: re-encoded differs:\n%q\n%q", i, got, enc)
		}
		if got, want := fieldsOf(ix, &s), rawFieldsOf(ref); !reflect.DeepEqual(got, want) {
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
			a := matchOf(ix.Matcher(q), &s)
			b := referenceMatch(ref, q)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("summary %d, query %q: %+v, want %+v", i, q, a, b)
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

// TestDecodeSummaryAllocatesWhatItKeeps: decoding a stored summary makes
// the Summary's string and nothing else (once its words are in the
// dictionary): start-up decodes 10k in a row, and transient copies
// interleaved with the kept strings fragmented the heap.
func TestDecodeSummaryAllocatesWhatItKeeps(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations (sync.Pool drops items)")
	}
	ix := New()
	_, enc := ix.Summarize(parse(t, tdgen.Generate(1)[0].Raw), false)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ix.Decode(enc); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("Decode makes %v allocations, want 1", n)
	}
}

// BenchmarkSummaryDecode is start-up's work per stored Thing: check a
// stored summary and code its search fields (the dictionary already holds
// their words, as after the first few Things).
func BenchmarkSummaryDecode(b *testing.B) {
	ix := New()
	tds := tdgen.Generate(64)
	encs := make([][]byte, len(tds))
	for i, td := range tds {
		_, encs[i] = ix.Summarize(parse(b, td.Raw), false)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := ix.Decode(encs[i%len(encs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
