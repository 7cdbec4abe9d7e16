package jsonx

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// decodeJSON decodes any JSON value with UseNumber, as ParseDocument does.
func decodeJSON(t testing.TB, s string) any {
	t.Helper()
	v, err := decodeValue([]byte(s))
	if err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

func decodeValue(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, &json.SyntaxError{}
	}
	return v, nil
}

func asObject(t testing.TB, s string) map[string]any {
	t.Helper()
	m, ok := decodeJSON(t, s).(map[string]any)
	if !ok {
		t.Fatalf("%s is not an object", s)
	}
	return m
}

// RFC 7396 Appendix A, plus the example of section 3.
var rfc7396Examples = []struct{ target, patch, result string }{
	{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
	{`{"a":"b"}`, `{"a":null}`, `{}`},
	{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
	{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
	{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
	{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
	{`["a","b"]`, `["c","d"]`, `["c","d"]`},
	{`{"a":"b"}`, `["c"]`, `["c"]`},
	{`{"a":"foo"}`, `null`, `null`},
	{`{"a":"foo"}`, `"bar"`, `"bar"`},
	{`{"e":null}`, `{"a":1}`, `{"e":null,"a":1}`},
	{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
	{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
	{
		`{"title":"Goodbye!","author":{"givenName":"John","familyName":"Doe"},"tags":["example","sample"],"content":"This will be unchanged"}`,
		`{"title":"Hello!","phoneNumber":"+01-123-456-7890","author":{"familyName":null},"tags":["example"]}`,
		`{"title":"Hello!","author":{"givenName":"John"},"tags":["example"],"content":"This will be unchanged","phoneNumber":"+01-123-456-7890"}`,
	},
}

func TestMergePatchRFC7396(t *testing.T) {
	for _, ex := range rfc7396Examples {
		target, patch := decodeJSON(t, ex.target), decodeJSON(t, ex.patch)
		got := MergePatch(target, patch)
		if want := decodeJSON(t, ex.result); !reflect.DeepEqual(got, want) {
			t.Errorf("MergePatch(%s, %s) = %#v, want %s", ex.target, ex.patch, got, ex.result)
		}
		if !reflect.DeepEqual(target, decodeJSON(t, ex.target)) || !reflect.DeepEqual(patch, decodeJSON(t, ex.patch)) {
			t.Errorf("MergePatch(%s, %s) mutated its inputs", ex.target, ex.patch)
		}
	}
}

// TestMergePatchResultIsOwned checks the Registry may set members of the
// result (it sets "id") without touching the stored document or the patch.
func TestMergePatchResultIsOwned(t *testing.T) {
	target := asObject(t, `{"id":"urn:x","a":{"b":1,"c":{"d":2}},"keep":[1]}`)
	patch := asObject(t, `{"a":{"c":{"d":3}},"n":{"m":1}}`)
	got := MergePatch(target, patch).(map[string]any)
	got["id"] = "changed"
	got["a"].(map[string]any)["b"] = "changed"
	got["a"].(map[string]any)["c"].(map[string]any)["d"] = "changed"
	got["n"].(map[string]any)["m"] = "changed"
	if want := asObject(t, `{"id":"urn:x","a":{"b":1,"c":{"d":2}},"keep":[1]}`); !reflect.DeepEqual(target, want) {
		t.Errorf("target changed: %v", target)
	}
	if want := asObject(t, `{"a":{"c":{"d":3}},"n":{"m":1}}`); !reflect.DeepEqual(patch, want) {
		t.Errorf("patch changed: %v", patch)
	}
	// An empty patch still yields a copy.
	cp := MergePatch(target, map[string]any{}).(map[string]any)
	cp["id"] = "other"
	if target["id"] != "urn:x" {
		t.Error("MergePatch with an empty patch returned target itself")
	}
}

func TestCreateMergePatch(t *testing.T) {
	cases := []struct{ from, to, want string }{
		{`{}`, `{}`, `{}`},
		{`{"a":1,"b":[1,{"c":2}],"d":{"e":"f"}}`, `{"a":1,"b":[1,{"c":2}],"d":{"e":"f"}}`, `{}`},
		{`{"a":1}`, `{}`, `{"a":null}`},
		{`{}`, `{"a":1}`, `{"a":1}`},
		{`{"a":1}`, `{"a":2}`, `{"a":2}`},
		{`{"a":1}`, `{"a":1.0}`, `{"a":1.0}`},
		{`{"a":"1"}`, `{"a":1}`, `{"a":1}`},
		{`{"a":true}`, `{"a":false}`, `{"a":false}`},
		{`{"a":{"b":1,"c":2}}`, `{"a":{"b":1,"c":3}}`, `{"a":{"c":3}}`},
		{`{"a":{"b":1,"c":2}}`, `{"a":{"b":1}}`, `{"a":{"c":null}}`},
		{`{"a":{"b":{"c":{"d":1}}}}`, `{"a":{"b":{"c":{"d":1,"e":2}}}}`, `{"a":{"b":{"c":{"e":2}}}}`},
		{`{"a":[1,2]}`, `{"a":[1,3]}`, `{"a":[1,3]}`},
		{`{"a":[{"b":1}]}`, `{"a":[{"b":1}]}`, `{}`},
		{`{"a":"x"}`, `{"a":{"b":1}}`, `{"a":{"b":1}}`},
		{`{"a":"x"}`, `{"a":{}}`, `{"a":{}}`},
		{`{}`, `{"a":{"b":{}}}`, `{"a":{"b":{}}}`},
		{`{"a":{"b":1}}`, `{"a":"x"}`, `{"a":"x"}`},
		{`{"a":{"b":1}}`, `{"a":[]}`, `{"a":[]}`},
		{`{"a":null}`, `{}`, `{"a":null}`},
		{`{"a":null}`, `{"a":1}`, `{"a":1}`},
		{`{"a":null}`, `{"a":{}}`, `{"a":{}}`},
		// Nulls in to cannot be expressed: they become removals.
		{`{"a":1}`, `{"a":null}`, `{"a":null}`},
		{`{}`, `{"a":null}`, `{}`},
		{`{"a":null}`, `{"a":null}`, `{"a":null}`},
		{`{"a":1}`, `{"a":{"b":null,"c":2}}`, `{"a":{"c":2}}`},
		{`{"a":{"b":null}}`, `{"a":{}}`, `{"a":{"b":null}}`},
	}
	for _, tc := range cases {
		from, to := asObject(t, tc.from), asObject(t, tc.to)
		got := CreateMergePatch(from, to)
		if want := asObject(t, tc.want); !reflect.DeepEqual(got, want) {
			t.Errorf("CreateMergePatch(%s, %s) = %#v, want %s", tc.from, tc.to, got, tc.want)
		}
		if !reflect.DeepEqual(from, asObject(t, tc.from)) || !reflect.DeepEqual(to, asObject(t, tc.to)) {
			t.Errorf("CreateMergePatch(%s, %s) mutated its inputs", tc.from, tc.to)
		}
		checkRoundTrip(t, from, to, got)
	}
	if p := CreateMergePatch(nil, nil); p == nil || len(p) != 0 {
		t.Errorf("CreateMergePatch(nil, nil) = %#v, want an empty non-nil map", p)
	}
}

// checkRoundTrip checks that patch, applied directly and after a trip
// through JSON (as the change feed sends it), turns from into to with its
// null members dropped.
func checkRoundTrip(t testing.TB, from, to, patch map[string]any) {
	t.Helper()
	want := dropNullMembers(to)
	if got := MergePatch(from, patch); !reflect.DeepEqual(got, want) {
		t.Fatalf("MergePatch(from, CreateMergePatch(from, to)) = %#v, want %#v\nfrom %#v\npatch %#v", got, want, from, patch)
	}
	b, err := json.Marshal(patch)
	if err != nil {
		t.Fatalf("marshal patch: %v", err)
	}
	wire, err := decodeValue(b)
	if err != nil {
		t.Fatalf("decode patch %s: %v", b, err)
	}
	if got := MergePatch(from, wire); !reflect.DeepEqual(got, want) {
		t.Fatalf("patch %s after JSON gives %#v, want %#v", b, got, want)
	}
}

// dropNullMembers removes null members of objects, recursing through objects
// only: array elements are values a patch replaces wholesale.
func dropNullMembers(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch v := v.(type) {
		case nil:
		case map[string]any:
			out[k] = dropNullMembers(v)
		default:
			out[k] = v
		}
	}
	return out
}

// baseTD has nested objects, arrays and numbers, as a TD does.
const baseTD = `{
  "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
  "id": "urn:uuid:9e4f1d2c-3b6a-4f8e-8c71-0a2b3c4d5e03",
  "title": "Base agent",
  "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
  "security": ["nosec_sc"],
  "properties": {"temp": {"type": "number", "forms": [{"href": "https://x.example/temp"}]}},
  "actions": {"chat": {"forms": [{"href": "ws://x.example/ws", "op": "invokeaction"}]}},
  "registration": {"ttl": 60, "expires": "2030-01-02T03:04:05Z"},
  "lmos:metadata": 42
}`

func TestCreateMergePatchSampleTDs(t *testing.T) {
	docs := map[string]map[string]any{"base": asObject(t, baseTD)}
	samples, err := tdgen.Samples("../../testdata/tds")
	if err != nil || len(samples) == 0 {
		t.Fatalf("no sample TDs in testdata/tds: %v", err)
	}
	for name, raw := range samples {
		docs[name] = asObject(t, string(raw))
	}
	for fromName, from := range docs {
		for toName, to := range docs {
			patch := CreateMergePatch(from, to)
			if fromName == toName && len(patch) != 0 {
				t.Errorf("%s → itself: patch %v, want {}", fromName, patch)
			}
			checkRoundTrip(t, from, to, patch)
		}
	}
	// A typical update: a small change gives a small patch.
	from := asObject(t, baseTD)
	to := asObject(t, baseTD)
	to["title"] = "Renamed"
	to["registration"].(map[string]any)["ttl"] = json.Number("120")
	delete(to["actions"].(map[string]any), "chat")
	want := asObject(t, `{"title":"Renamed","registration":{"ttl":120},"actions":{"chat":null}}`)
	if got := CreateMergePatch(from, to); !reflect.DeepEqual(got, want) {
		t.Errorf("patch = %#v, want %#v", got, want)
	}
}

func hasNullMember(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if e == nil || hasNullMember(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasNullMember(e) {
				return true
			}
		}
	}
	return false
}

func FuzzMergePatch(f *testing.F) {
	for _, ex := range rfc7396Examples {
		f.Add(ex.target, ex.patch)
	}
	f.Add(`{"a":{"b":[1,{"c":null}],"d":1.50},"e":"x"}`, `{"a":{"b":[1],"d":1.5,"f":{}},"g":null}`)
	f.Add(baseTD, `{"title":"x","actions":{"chat":{"forms":[]}},"security":null}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		av, err := decodeValue([]byte(a))
		if err != nil {
			return
		}
		bv, err := decodeValue([]byte(b))
		if err != nil {
			return
		}
		// Decoding is deterministic, so fresh copies serve as snapshots.
		aSnap, _ := decodeValue([]byte(a))
		bSnap, _ := decodeValue([]byte(b))

		merged := MergePatch(av, bv)
		if !reflect.DeepEqual(av, aSnap) || !reflect.DeepEqual(bv, bSnap) {
			t.Fatal("MergePatch mutated its inputs")
		}
		// RFC 7396 patches are idempotent.
		if again := MergePatch(merged, bv); !reflect.DeepEqual(again, merged) {
			t.Fatalf("applying the patch twice: %#v, once: %#v", again, merged)
		}

		from, ok1 := av.(map[string]any)
		to, ok2 := bv.(map[string]any)
		if !ok1 || !ok2 {
			return
		}
		patch := CreateMergePatch(from, to)
		if !reflect.DeepEqual(av, aSnap) || !reflect.DeepEqual(bv, bSnap) {
			t.Fatal("CreateMergePatch mutated its inputs")
		}
		if !hasNullMember(to) {
			if got := MergePatch(from, patch); !reflect.DeepEqual(got, to) {
				t.Fatalf("round trip: got %#v, want %#v (patch %#v)", got, to, patch)
			}
		}
		checkRoundTrip(t, from, to, patch)
		if !reflect.DeepEqual(av, aSnap) || !reflect.DeepEqual(bv, bSnap) {
			t.Fatal("applying the created patch mutated its inputs")
		}
	})
}
