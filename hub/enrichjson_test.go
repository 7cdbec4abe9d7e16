package hub

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
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
	samples, err := tdgen.Samples("../testdata/tds")
	if err != nil || len(samples) == 0 {
		t.Fatalf("no sample TDs in ../testdata/tds: %v", err)
	}
	for f, raw := range samples {
		checkSplice(t, raw)
		// Member order is the submitted one: @type stays before id.
		out := (&Thing{Meta: testMeta()}).AppendEnrichedJSON(nil, raw, time.Now())
		if bytes.Contains(raw, []byte(`"@type"`)) && bytes.Index(out, []byte(`"@type"`)) > bytes.Index(out, []byte(`"id"`)) {
			t.Errorf("%s: member order changed: %.200s", f, out)
		}
	}
}

func FuzzEnrichedJSON(f *testing.F) {
	samples, _ := tdgen.Samples("../testdata/tds")
	for _, b := range samples {
		f.Add(b)
	}
	for _, s := range []string{`{}`, `{"@context":"https://www.w3.org/2022/wot/td/v1.1"}`,
		`{"\u0040context":["a",{"x":"y"}],"registration":{"ttl":5},"lmos:verified":"did:x","a":[1.0,"}",{"b":"\"{"}]}`,
		`{"a":1,"a":2}`, ` { "n" : -1.5e3 , "s":"é\u00e9\n" } `, `{"lmos:presence":null,"t":true,"f":false,"z":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkSplice(t, raw) })
}

// TestTDD_context_injection_lmos: next to the discovery context W3C WoT
// Discovery tdd-context-injection asks for, the enriched TD carries the lmos prefix for the lmos:*
// members the hub adds, so a JSON-LD processor can expand them; a context
// that already defines lmos keeps its own, and nothing is added twice. Both
// the map and the spliced bytes are checked.
func TestTDD_context_injection_lmos(t *testing.T) {
	lmos := `{"lmos":"` + ContextLMOS + `"}`
	for _, c := range []struct{ in, want string }{
		{`"` + ContextTD11 + `"`, `["` + ContextTD11 + `","` + ContextDiscovery + `",` + lmos + `]`},
		{`["` + ContextTD11 + `"]`, `["` + ContextTD11 + `","` + ContextDiscovery + `",` + lmos + `]`},
		{`["` + ContextTD11 + `",{"x":"https://ex.org/"}]`,
			`["` + ContextTD11 + `","` + ContextDiscovery + `",{"x":"https://ex.org/"},` + lmos + `]`},
		{`["` + ContextTD11 + `",` + lmos + `]`, `["` + ContextTD11 + `","` + ContextDiscovery + `",` + lmos + `]`},
		{`["` + ContextTD11 + `","` + ContextDiscovery + `",{"lmos":"https://ex.org/own#","y":"z"}]`,
			`["` + ContextTD11 + `","` + ContextDiscovery + `",{"lmos":"https://ex.org/own#","y":"z"}]`},
		{`["` + ContextTD11 + `","` + ContextDiscovery + `"]`, `["` + ContextTD11 + `","` + ContextDiscovery + `",` + lmos + `]`},
	} {
		raw := []byte(`{"@context":` + c.in + `,"id":"urn:x","title":"x"}`)
		doc, err := ParseDocument(raw)
		if err != nil {
			t.Fatal(err)
		}
		th := &Thing{ID: "urn:x", Meta: testMeta()}
		now := time.Now()
		want := decodeNumbers(t, []byte(c.want))
		m, _ := json.Marshal(th.Enriched(doc, now)["@context"])
		if got := decodeNumbers(t, m); !reflect.DeepEqual(got, want) {
			t.Errorf("Enriched @context of %s = %s, want %s", c.in, m, c.want)
		}
		var spliced map[string]json.RawMessage
		if err := json.Unmarshal(th.AppendEnrichedJSON(nil, raw, now), &spliced); err != nil {
			t.Fatal(err)
		}
		if got := decodeNumbers(t, spliced["@context"]); !reflect.DeepEqual(got, want) {
			t.Errorf("spliced @context of %s = %s, want %s", c.in, spliced["@context"], c.want)
		}
		checkSplice(t, raw)
	}
}

// TestEnrichedContextCacheIsBounded: @context values are client input; the
// cache of their enriched form stops at ctxCacheEntries, and a value it
// does not hold (or one too long to keep) is still enriched correctly.
func TestEnrichedContextCacheIsBounded(t *testing.T) {
	long := `"https://example.org/` + string(bytes.Repeat([]byte("x"), ctxCacheKeyMax)) + `"`
	for i := 0; i < 2*ctxCacheEntries; i++ {
		raw := []byte(`{"@context":["` + ContextTD11 + `",{"v":"https://ex.org/` + strconv.Itoa(i) + `"}],"id":"urn:x","title":"x"}`)
		checkSplice(t, raw)
		checkSplice(t, []byte(`{"@context":["`+ContextTD11+`",`+long+`],"id":"urn:x","title":"x"}`))
	}
	ctxCache.RLock()
	n := len(ctxCache.m)
	for k := range ctxCache.m {
		if len(k) > ctxCacheKeyMax {
			t.Errorf("cached a %d-byte @context", len(k))
		}
	}
	ctxCache.RUnlock()
	if n > ctxCacheEntries {
		t.Errorf("%d cached @context values, limit %d", n, ctxCacheEntries)
	}
}
