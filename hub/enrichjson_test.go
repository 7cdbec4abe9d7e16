package hub

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return v
}

func testMeta() ThingMeta {
	at := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	return ThingMeta{Created: at, Modified: at.Add(time.Minute), Expires: at.Add(time.Hour), TTL: 3600,
		Origin: Origin{Source: SourceHTTP}, Presence: Presence{Status: PresenceOnline, Since: at, Via: SourceMQTT},
		Verified: "did:key:z6MkExample"}
}

// checkSplice compares the spliced JSON with the marshalled enriched map.
func checkSplice(t *testing.T, raw []byte) {
	doc, err := ParseDocument(raw)
	if err != nil {
		return
	}
	th := &Thing{ID: "urn:x", Meta: testMeta()}
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	got := th.AppendEnrichedJSON([]byte("prefix"), raw, now)
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatal("dst not appended to")
	}
	want, err := json.Marshal(th.Enriched(doc, now))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := decodeNumbers(t, got[6:]), decodeNumbers(t, want); !reflect.DeepEqual(g, w) {
		t.Fatalf("splice differs from the enriched map\nraw  %s\ngot  %s\nwant %s", raw, got[6:], want)
	}
}

func TestEnrichedJSONSamples(t *testing.T) {
	files, _ := filepath.Glob("../testdata/tds/*.json")
	if len(files) == 0 {
		t.Fatal("no sample TDs in ../testdata/tds")
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkSplice(t, raw)
		// Member order is the submitted one: @type stays before id.
		out := (&Thing{Meta: testMeta()}).AppendEnrichedJSON(nil, raw, time.Now())
		if bytes.Contains(raw, []byte(`"@type"`)) && bytes.Index(out, []byte(`"@type"`)) > bytes.Index(out, []byte(`"id"`)) {
			t.Errorf("%s: member order changed: %.200s", f, out)
		}
	}
}

func FuzzEnrichedJSON(f *testing.F) {
	files, _ := filepath.Glob("../testdata/tds/*.json")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{`{}`, `{"@context":"https://www.w3.org/2022/wot/td/v1.1"}`,
		`{"\u0040context":["a",{"x":"y"}],"registration":{"ttl":5},"lmos:verified":"did:x","a":[1.0,"}",{"b":"\"{"}]}`,
		`{"a":1,"a":2}`, ` { "n" : -1.5e3 , "s":"é\u00e9\n" } `, `{"lmos:presence":null,"t":true,"f":false,"z":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkSplice(t, raw) })
}
