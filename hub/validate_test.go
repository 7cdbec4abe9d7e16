package hub

import (
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// sampleTDDirs hold the sample Thing Descriptions: the repository's copy
// first, then the shared one it was taken from. Tests that need them skip
// when neither exists rather than fail on a machine without them.
var sampleTDDirs = []string{"../testdata/tds", "/work/shared/testdata/tds"}

func sampleTDFiles() []string {
	for _, dir := range sampleTDDirs {
		if files, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(files) > 0 {
			return files
		}
	}
	return nil
}

// baseTD exercises every member Validate looks at, so each table case below
// breaks exactly one thing.
const baseTD = `{
  "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}, "https://example.com/ctx"],
  "@type": ["lmos:Agent", "Thing"],
  "id": "urn:uuid:9e4f1d2c-3b6a-4f8e-8c71-0a2b3c4d5e03",
  "title": "Base agent",
  "description": "Used by the validation tests",
  "titles": {"en": "Base agent", "de": "Basisagent"},
  "descriptions": {"en": "Used by the validation tests"},
  "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}, "basic_sc": {"scheme": "basic", "in": "header"}},
  "security": ["nosec_sc", "basic_sc"],
  "properties": {"temp": {"type": "number", "forms": [{"href": "https://x.example/temp"}]}},
  "actions": {"chat": {"forms": [{"href": "ws://x.example/ws", "op": "invokeaction"}, {"href": "https://x.example/chat"}]}},
  "events": {"alarm": {"forms": [{"href": "mqtt://x.example/alarm"}]}},
  "forms": [{"href": "https://x.example/all", "op": "readallproperties"}],
  "links": [{"href": "https://x.example/doc", "rel": "describedby"}],
  "registration": {"ttl": 60, "expires": "2030-01-02T03:04:05Z"},
  "lmos:capabilities": [{"id": "urn:x:cap", "name": "chat"}],
  "lmos:metadata": 42
}`

func mustParse(t testing.TB, s string) map[string]any {
	t.Helper()
	doc, err := ParseDocument([]byte(s))
	if err != nil {
		t.Fatalf("ParseDocument(%q): %v", s, err)
	}
	return doc
}

// jv decodes one JSON value literal the way ParseDocument does.
func jv(t testing.TB, s string) any {
	t.Helper()
	doc := mustParse(t, `{"v":`+s+`}`)
	return doc["v"]
}

// member walks a JSON pointer-ish path of object keys and returns the object
// holding the last key, so cases can edit nested members.
func member(t testing.TB, doc map[string]any, path ...string) map[string]any {
	t.Helper()
	cur := doc
	for _, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			t.Fatalf("no object at %v", path)
		}
		cur = next
	}
	return cur
}

func fieldNames(err error) []string {
	var names []string
	for _, f := range ErrorFields(err) {
		names = append(names, f.Field)
	}
	return names
}

func TestValidateRules(t *testing.T) {
	type doc = map[string]any
	cases := []struct {
		name string
		edit func(t *testing.T, d doc)
		want []string // expected Field pointers, sorted; nil means valid
	}{
		{"base is valid", func(*testing.T, doc) {}, nil},

		// @context
		{"context missing", func(_ *testing.T, d doc) { delete(d, "@context") }, []string{"/@context"}},
		{"context TD 1.1 string", func(t *testing.T, d doc) { d["@context"] = ContextTD11 }, nil},
		{"context TD 1.0 string", func(t *testing.T, d doc) { d["@context"] = ContextTD10 }, nil},
		{"context TD 1.0 first in array", func(t *testing.T, d doc) { d["@context"] = jv(t, `["`+ContextTD10+`", {"x": "y"}]`) }, nil},
		{"context other string", func(t *testing.T, d doc) { d["@context"] = "https://example.com/ctx" }, []string{"/@context"}},
		{"context not string or array", func(t *testing.T, d doc) { d["@context"] = jv(t, `{"td": "x"}`) }, []string{"/@context"}},
		{"context null", func(t *testing.T, d doc) { d["@context"] = nil }, []string{"/@context"}},
		{"context empty array", func(t *testing.T, d doc) { d["@context"] = jv(t, `[]`) }, []string{"/@context"}},
		{"context TD not first", func(t *testing.T, d doc) {
			d["@context"] = jv(t, `[{"lmos": "https://eclipse.dev/lmos/protocol/v1"}, "`+ContextTD11+`"]`)
		}, []string{"/@context/0"}},
		{"context bad extra entries", func(t *testing.T, d doc) { d["@context"] = jv(t, `["`+ContextTD11+`", "x", 5, null, ["y"]]`) },
			[]string{"/@context/2", "/@context/3", "/@context/4"}},

		// @type
		{"type missing", func(_ *testing.T, d doc) { delete(d, "@type") }, nil},
		{"type string", func(t *testing.T, d doc) { d["@type"] = "lmos:Tool" }, nil},
		{"type array with non-string", func(t *testing.T, d doc) { d["@type"] = jv(t, `["lmos:Tool", 3]`) }, []string{"/@type/1"}},
		{"type object", func(t *testing.T, d doc) { d["@type"] = jv(t, `{}`) }, []string{"/@type"}},

		// id
		{"id missing", func(_ *testing.T, d doc) { delete(d, "id") }, nil},
		{"id did:key", func(_ *testing.T, d doc) { d["id"] = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK" }, nil},
		{"id number", func(t *testing.T, d doc) { d["id"] = jv(t, `7`) }, []string{"/id"}},
		{"id relative", func(_ *testing.T, d doc) { d["id"] = "foo" }, []string{"/id"}},
		{"id empty", func(_ *testing.T, d doc) { d["id"] = "" }, []string{"/id"}},
		{"id control char", func(_ *testing.T, d doc) { d["id"] = "urn:x:\x01" }, []string{"/id"}},

		// title, description, titles, descriptions
		{"title missing", func(_ *testing.T, d doc) { delete(d, "title") }, []string{"/title"}},
		{"title empty", func(_ *testing.T, d doc) { d["title"] = "" }, []string{"/title"}},
		{"title number", func(t *testing.T, d doc) { d["title"] = jv(t, `1`) }, []string{"/title"}},
		{"title null", func(_ *testing.T, d doc) { d["title"] = nil }, []string{"/title"}},
		{"description missing", func(_ *testing.T, d doc) { delete(d, "description") }, nil},
		{"description not string", func(t *testing.T, d doc) { d["description"] = jv(t, `["x"]`) }, []string{"/description"}},
		{"titles not object", func(_ *testing.T, d doc) { d["titles"] = "x" }, []string{"/titles"}},
		{"titles entry not string", func(t *testing.T, d doc) { d["titles"] = jv(t, `{"en": "ok", "de": 1, "a/b": null}`) },
			[]string{"/titles/a~1b", "/titles/de"}},
		{"descriptions not object", func(t *testing.T, d doc) { d["descriptions"] = jv(t, `[]`) }, []string{"/descriptions"}},
		{"descriptions entry not string", func(t *testing.T, d doc) { d["descriptions"] = jv(t, `{"fr": {}}`) }, []string{"/descriptions/fr"}},

		// securityDefinitions
		{"securityDefinitions missing", func(_ *testing.T, d doc) { delete(d, "securityDefinitions") }, []string{"/securityDefinitions"}},
		{"securityDefinitions not object", func(t *testing.T, d doc) { d["securityDefinitions"] = jv(t, `["nosec_sc"]`) },
			[]string{"/securityDefinitions"}},
		{"securityDefinitions empty", func(t *testing.T, d doc) { d["securityDefinitions"] = jv(t, `{}`) },
			[]string{"/security/0", "/security/1", "/securityDefinitions"}},
		{"securityDefinitions entry not object", func(t *testing.T, d doc) { member(t, d, "securityDefinitions")["basic_sc"] = "basic" },
			[]string{"/securityDefinitions/basic_sc"}},
		{"scheme missing", func(t *testing.T, d doc) { delete(member(t, d, "securityDefinitions", "basic_sc"), "scheme") },
			[]string{"/securityDefinitions/basic_sc/scheme"}},
		{"scheme not string", func(t *testing.T, d doc) { member(t, d, "securityDefinitions", "basic_sc")["scheme"] = jv(t, `true`) },
			[]string{"/securityDefinitions/basic_sc/scheme"}},
		{"scheme empty", func(t *testing.T, d doc) { member(t, d, "securityDefinitions", "nosec_sc")["scheme"] = "" },
			[]string{"/securityDefinitions/nosec_sc/scheme"}},
		{"definition name escaped", func(t *testing.T, d doc) { member(t, d, "securityDefinitions")["a/b~c"] = jv(t, `{}`) },
			[]string{"/securityDefinitions/a~1b~0c/scheme"}},

		// security
		{"security missing", func(_ *testing.T, d doc) { delete(d, "security") }, []string{"/security"}},
		{"security defined string", func(_ *testing.T, d doc) { d["security"] = "basic_sc" }, nil},
		{"security undefined string", func(_ *testing.T, d doc) { d["security"] = "oauth_sc" }, []string{"/security"}},
		{"security empty array", func(t *testing.T, d doc) { d["security"] = jv(t, `[]`) }, []string{"/security"}},
		{"security array undefined and non-string", func(t *testing.T, d doc) { d["security"] = jv(t, `["nosec_sc", "oauth_sc", 5]`) },
			[]string{"/security/1", "/security/2"}},
		{"security object", func(t *testing.T, d doc) { d["security"] = jv(t, `{"nosec_sc": {}}`) }, []string{"/security"}},
		{"security and definitions missing", func(_ *testing.T, d doc) {
			delete(d, "security")
			delete(d, "securityDefinitions")
		}, []string{"/security", "/securityDefinitions"}},
		{"security names unchecked without definitions object", func(t *testing.T, d doc) {
			d["securityDefinitions"] = "nosec"
			d["security"] = "whatever"
		}, []string{"/securityDefinitions"}},

		// affordances
		{"properties not object", func(t *testing.T, d doc) { d["properties"] = jv(t, `[]`) }, []string{"/properties"}},
		{"actions not object", func(_ *testing.T, d doc) { d["actions"] = "chat" }, []string{"/actions"}},
		{"events not object", func(t *testing.T, d doc) { d["events"] = jv(t, `1`) }, []string{"/events"}},
		{"empty affordance maps", func(t *testing.T, d doc) {
			d["properties"], d["actions"], d["events"] = jv(t, `{}`), jv(t, `{}`), jv(t, `{}`)
		}, nil},
		{"affordance not object", func(t *testing.T, d doc) { member(t, d, "actions")["chat"] = jv(t, `[]`) }, []string{"/actions/chat"}},
		{"forms missing", func(t *testing.T, d doc) { delete(member(t, d, "actions", "chat"), "forms") }, []string{"/actions/chat/forms"}},
		{"forms not array", func(t *testing.T, d doc) { member(t, d, "events", "alarm")["forms"] = jv(t, `{"href": "x"}`) },
			[]string{"/events/alarm/forms"}},
		{"forms empty", func(t *testing.T, d doc) { member(t, d, "properties", "temp")["forms"] = jv(t, `[]`) },
			[]string{"/properties/temp/forms"}},
		{"form not object", func(t *testing.T, d doc) { member(t, d, "actions", "chat")["forms"] = jv(t, `["https://x"]`) },
			[]string{"/actions/chat/forms/0"}},
		{"form href missing", func(t *testing.T, d doc) {
			member(t, d, "actions", "chat")["forms"] = jv(t, `[{"op": "invokeaction"}]`)
		},
			[]string{"/actions/chat/forms/0/href"}},
		{"form href empty and not string", func(t *testing.T, d doc) {
			member(t, d, "actions", "chat")["forms"] = jv(t, `[{"href": "https://x"}, {"href": ""}, {"href": 1}]`)
		}, []string{"/actions/chat/forms/1/href", "/actions/chat/forms/2/href"}},
		{"affordance name escaped", func(t *testing.T, d doc) { member(t, d, "properties")["a/b"] = jv(t, `{"type": "string"}`) },
			[]string{"/properties/a~1b/forms"}},

		// top-level forms and links
		{"top forms missing", func(_ *testing.T, d doc) { delete(d, "forms") }, nil},
		// The TD 1.1 JSON Schema requires at least one form where forms is given.
		{"top forms empty", func(t *testing.T, d doc) { d["forms"] = jv(t, `[]`) }, []string{"/forms"}},
		{"top forms not array", func(t *testing.T, d doc) { d["forms"] = jv(t, `{}`) }, []string{"/forms"}},
		{"top form bad entries", func(t *testing.T, d doc) { d["forms"] = jv(t, `[5, {"op": "readallproperties"}]`) },
			[]string{"/forms/0", "/forms/1/href"}},
		{"links not array", func(_ *testing.T, d doc) { d["links"] = "https://x" }, []string{"/links"}},
		{"link href missing", func(t *testing.T, d doc) { d["links"] = jv(t, `[{"href": "https://x"}, {"rel": "item"}]`) },
			[]string{"/links/1/href"}},
		{"link href not string", func(t *testing.T, d doc) { d["links"] = jv(t, `[{"href": ["https://x"]}]`) }, []string{"/links/0/href"}},

		// registration
		{"registration missing", func(_ *testing.T, d doc) { delete(d, "registration") }, nil},
		{"registration not object", func(t *testing.T, d doc) { d["registration"] = jv(t, `60`) }, []string{"/registration"}},
		{"registration empty", func(t *testing.T, d doc) { d["registration"] = jv(t, `{}`) }, nil},
		{"ttl zero", func(t *testing.T, d doc) { member(t, d, "registration")["ttl"] = jv(t, `0`) }, []string{"/registration/ttl"}},
		{"ttl fractional", func(t *testing.T, d doc) { member(t, d, "registration")["ttl"] = jv(t, `1.5e2`) }, nil},
		{"ttl huge", func(t *testing.T, d doc) { member(t, d, "registration")["ttl"] = jv(t, `1e300`) }, []string{"/registration/ttl"}},
		{"ttl beyond float", func(t *testing.T, d doc) { member(t, d, "registration")["ttl"] = jv(t, `1e999`) }, []string{"/registration/ttl"}},
		{"ttl negative", func(t *testing.T, d doc) { member(t, d, "registration")["ttl"] = jv(t, `-1`) }, []string{"/registration/ttl"}},
		{"ttl negative float64", func(t *testing.T, d doc) { member(t, d, "registration")["ttl"] = -0.5 }, []string{"/registration/ttl"}},
		{"ttl string", func(t *testing.T, d doc) { member(t, d, "registration")["ttl"] = "60" }, []string{"/registration/ttl"}},
		{"ttl null", func(t *testing.T, d doc) { member(t, d, "registration")["ttl"] = nil }, []string{"/registration/ttl"}},
		{"expires with offset and fraction", func(t *testing.T, d doc) {
			member(t, d, "registration")["expires"] = "2030-01-02T03:04:05.123+02:00"
		}, nil},
		{"expires not RFC 3339", func(t *testing.T, d doc) { member(t, d, "registration")["expires"] = "2030-01-02 03:04:05" },
			[]string{"/registration/expires"}},
		{"expires number", func(t *testing.T, d doc) { member(t, d, "registration")["expires"] = jv(t, `1893553445`) },
			[]string{"/registration/expires"}},

		// lmos:*
		{"lmos:capabilities not array", func(t *testing.T, d doc) { d["lmos:capabilities"] = jv(t, `{"id": "x"}`) },
			[]string{"/lmos:capabilities"}},
		{"lmos:capabilities of anything", func(t *testing.T, d doc) { d["lmos:capabilities"] = jv(t, `[1, "x", null]`) }, nil},
		{"other lmos terms unchecked", func(t *testing.T, d doc) { d["lmos:whatever"] = nil; d["unknown"] = jv(t, `[{}]`) }, nil},

		// the W3C TD 1.1 JSON Schema (tdd-validation-jsonschema): each
		// error at the member at fault, one per anyOf/oneOf
		{"schema: data type unknown", func(t *testing.T, d doc) { member(t, d, "properties", "temp")["type"] = "bogus" },
			[]string{"/properties/temp/type"}},
		{"schema: op unknown", func(t *testing.T, d doc) {
			member(t, d, "actions", "chat")["forms"] = jv(t, `[{"href": "https://x", "op": "explode"}]`)
		},
			[]string{"/actions/chat/forms/0/op"}},
		{"schema: basic in unknown", func(t *testing.T, d doc) { member(t, d, "securityDefinitions", "basic_sc")["in"] = "nowhere" },
			[]string{"/securityDefinitions/basic_sc/in"}},
		{"schema: scheme unknown", func(t *testing.T, d doc) { member(t, d, "securityDefinitions", "basic_sc")["scheme"] = "nonsense" },
			[]string{"/securityDefinitions/basic_sc/scheme"}},
		{"schema: prefixed scheme allowed", func(t *testing.T, d doc) {
			member(t, d, "securityDefinitions", "basic_sc")["scheme"] = "ace:ACESecurityScheme"
		}, nil},
		{"schema: created not date-time", func(_ *testing.T, d doc) { d["created"] = "yesterday" }, []string{"/created"}},
		{"schema: two problems", func(t *testing.T, d doc) { d["base"] = jv(t, `5`); d["version"] = "1.0" }, []string{"/base", "/version"}},
		{"registration created number", func(t *testing.T, d doc) { member(t, d, "registration")["created"] = jv(t, `5`) },
			[]string{"/registration/created"}},
		{"registration modified not RFC 3339", func(t *testing.T, d doc) { member(t, d, "registration")["modified"] = "today" },
			[]string{"/registration/modified"}},

		// many problems at once are all reported, sorted
		{"several problems", func(t *testing.T, d doc) {
			delete(d, "title")
			d["security"] = "nope"
			member(t, d, "actions", "chat")["forms"] = jv(t, `[{}]`)
			d["@context"] = "x"
			member(t, d, "registration")["ttl"] = jv(t, `-5`)
		}, []string{"/@context", "/actions/chat/forms/0/href", "/registration/ttl", "/security", "/title"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := mustParse(t, baseTD)
			tc.edit(t, d)
			err := Validate(d)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v, fields %+v", err, ErrorFields(err))
				}
				return
			}
			checkValidationError(t, err)
			if got := fieldNames(err); !slices.Equal(got, tc.want) {
				t.Fatalf("fields = %q, want %q (%+v)", got, tc.want, ErrorFields(err))
			}
		})
	}
}

// checkValidationError checks the shape every Validate failure must have.
func checkValidationError(t testing.TB, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Validate returned %T %v, want *Error", err, err)
	}
	if e.Code != EINVALID || e.Message != "invalid Thing Description" || len(e.Fields) == 0 {
		t.Fatalf("Validate error = %+v, want EINVALID \"invalid Thing Description\" with fields", e)
	}
	if !slices.IsSortedFunc(e.Fields, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) }) {
		t.Fatalf("fields not sorted: %+v", e.Fields)
	}
	for _, f := range e.Fields {
		if !strings.HasPrefix(f.Field, "/") || f.Description == "" {
			t.Fatalf("bad field error %+v", f)
		}
	}
}

func TestValidateDescriptions(t *testing.T) {
	d := mustParse(t, baseTD)
	d["security"] = jv(t, `["nosec_sc", "basic"]`)
	delete(d, "title")
	got := ErrorFields(Validate(d))
	want := []FieldError{
		{Field: "/security/1", Description: `"basic" is not defined in securityDefinitions`},
		{Field: "/title", Description: "is required"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fields = %+v, want %+v", got, want)
	}

	d = mustParse(t, baseTD)
	d["id"] = "foo"
	got = ErrorFields(Validate(d))
	if len(got) != 1 || !strings.Contains(got[0].Description, "absolute URI") {
		t.Fatalf("id fields = %+v", got)
	}
}

func TestValidateEmpty(t *testing.T) {
	want := []string{"/@context", "/security", "/securityDefinitions", "/title"}
	for _, d := range []map[string]any{nil, {}} {
		err := Validate(d)
		checkValidationError(t, err)
		if got := fieldNames(err); !slices.Equal(got, want) {
			t.Fatalf("Validate(%v) fields = %q, want %q", d, got, want)
		}
	}
}

// TestValidateDoesNotMutate guards the Registry, which validates documents it
// then stores.
func TestValidateDoesNotMutate(t *testing.T) {
	d := mustParse(t, baseTD)
	d["security"] = "undefined"
	before, _ := json.Marshal(d)
	_ = Validate(d)
	after, _ := json.Marshal(d)
	if string(before) != string(after) {
		t.Fatalf("Validate changed the document:\n%s\n%s", before, after)
	}
}

func readSampleTDs(t testing.TB) map[string][]byte {
	t.Helper()
	for _, dir := range sampleTDDirs {
		samples, err := tdgen.Samples(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(samples) > 0 {
			return samples
		}
	}
	t.Skipf("no sample TDs in %v", sampleTDDirs)
	return nil
}

func TestValidateSampleTDs(t *testing.T) {
	samples := readSampleTDs(t)
	want := map[string][]FieldError{
		"chat-agent.json":       nil,
		"diagnostics-tool.json": nil,
		"thermostat-agent.json": nil,
		"invalid-missing-security.json": {
			{Field: "/security", Description: "is required"},
			{Field: "/securityDefinitions", Description: "is required"},
		},
		"invalid-undefined-security.json": {
			{Field: "/security", Description: `"basic_sc" is not defined in securityDefinitions`},
		},
	}
	for name, wantFields := range want {
		t.Run(name, func(t *testing.T) {
			raw, ok := samples[name]
			if !ok {
				t.Skipf("%s not found", name)
			}
			doc, err := ParseDocument(raw)
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(doc)
			if wantFields == nil {
				if err != nil {
					t.Fatalf("Validate: %v %+v", err, ErrorFields(err))
				}
				return
			}
			checkValidationError(t, err)
			if got := ErrorFields(err); !slices.Equal(got, wantFields) {
				t.Fatalf("fields = %+v, want %+v", got, wantFields)
			}
		})
	}
}

func TestParseDocument(t *testing.T) {
	const notObject = "a Thing Description must be a JSON object"
	cases := []struct {
		in      string
		wantMsg string // "" means success; a message ending in ": " is a prefix
	}{
		{`{}`, ""},
		{"  {\"a\": [1, {\"b\": null}]}\n\t ", ""},
		{``, "invalid JSON: "},
		{`   `, "invalid JSON: "},
		{`{`, "invalid JSON: "},
		{`{"a":}`, "invalid JSON: "},
		{`{"a":1,}`, "invalid JSON: "},
		{`{'a':1}`, "invalid JSON: "},
		{`{"a":1}x`, "invalid JSON: "},
		{`{"a":1} {"b":2}`, "invalid JSON: "},
		{`{"a":1}]`, "invalid JSON: "},
		{`{"a":1}}`, "invalid JSON: "},
		{`{"a":1} null`, "invalid JSON: "},
		{"{\"a\":\"\xff\"}", "invalid JSON: "},
		{"\xef\xbb\xbf{}", "invalid JSON: "},
		{`[1]`, notObject},
		{`[]`, notObject},
		{`"s"`, notObject},
		{`null`, notObject},
		{`42`, notObject},
		{`true`, notObject},
	}
	for _, tc := range cases {
		doc, err := ParseDocument([]byte(tc.in))
		if tc.wantMsg == "" {
			if err != nil || doc == nil {
				t.Errorf("ParseDocument(%q) = %v, %v; want an object", tc.in, doc, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != EINVALID {
			t.Errorf("ParseDocument(%q) error = %v, want *Error EINVALID", tc.in, err)
			continue
		}
		if strings.HasSuffix(tc.wantMsg, ": ") {
			if !strings.HasPrefix(e.Message, tc.wantMsg) || len(e.Message) == len(tc.wantMsg) {
				t.Errorf("ParseDocument(%q) message = %q, want %q<reason>", tc.in, e.Message, tc.wantMsg)
			}
		} else if e.Message != tc.wantMsg {
			t.Errorf("ParseDocument(%q) message = %q, want %q", tc.in, e.Message, tc.wantMsg)
		}
		if e.Error() != e.Message {
			t.Errorf("ParseDocument(%q) Error() = %q, want the message alone", tc.in, e.Error())
		}
	}
}

func TestParseDocumentKeepsNumbers(t *testing.T) {
	const in = `{"a":1.50,"b":12345678901234567890123,"c":1e3,"d":-0,"e":[0.1,2E-7],"f":{"g":10}}`
	doc := mustParse(t, in)
	if n, ok := doc["a"].(json.Number); !ok || n != "1.50" {
		t.Fatalf("a = %#v, want json.Number(\"1.50\")", doc["a"])
	}
	if n, ok := member(t, doc, "f")["g"].(json.Number); !ok || n != "10" {
		t.Fatalf("f.g = %#v, want json.Number(\"10\")", member(t, doc, "f")["g"])
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Fatalf("re-marshalled %s, want %s", out, in)
	}
}

func TestValidateID(t *testing.T) {
	valid := []string{
		"urn:uuid:9e4f1d2c-3b6a-4f8e-8c71-0a2b3c4d5e03",
		"did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
		"https://x/y",
		"https://x.example/things/1?q=a%20b#frag",
		"coap+tcp.v1-x:thing",
		"urn:example:größe/ü",
		"X:y",
		"urn:" + strings.Repeat("a", maxIDBytes-4),
	}
	for _, id := range valid {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v, want nil", id, err)
		}
	}
	invalid := []string{
		"",
		"foo",
		"/foo",
		"//host/path",
		"../x",
		":x",
		"1urn:x",
		"+a:x",
		"a_b:x",
		"u rn:x",
		"urn:",
		"urn:x y",
		"urn:x\u00a0y",
		"urn:x\u3000",
		"urn:x\x00",
		"\x00urn:x",
		"urn:x\ty",
		"urn:x\ny",
		"urn:x\x1f",
		"urn:x\x7f",
		"urn:x\u0080",
		"urn:x\u0085",
		"urn:x\u009f",
		"urn:x\xff",
		"urn:x\xc3",
		"urn:" + strings.Repeat("a", maxIDBytes-3),
		"urn:" + strings.Repeat("é", 300),
	}
	for _, id := range invalid {
		err := ValidateID(id)
		var e *Error
		if !errors.As(err, &e) || e.Code != EINVALID || !strings.HasPrefix(e.Message, "invalid Thing id: ") {
			t.Errorf("ValidateID(%q) = %v, want EINVALID \"invalid Thing id: …\"", id, err)
		}
	}
}

func FuzzParseValidate(f *testing.F) {
	for _, file := range sampleTDFiles() {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(baseTD))
	for _, s := range []string{
		``, `{`, `[]`, `null`, `{"a":1} x`, "\xff", `{"title":""}`,
		`{"@context":"https://www.w3.org/2022/wot/td/v1.1","title":"x","securityDefinitions":{"a":{"scheme":"nosec"}},"security":"a"}`,
		`{"@context":["https://www.w3.org/2019/wot/td/v1",1],"id":"x","title":1,"securityDefinitions":{"a/~":1},"security":["a/~",2],"actions":{"c":{"forms":[{}]}}}`,
		`{"registration":{"ttl":-1e999,"expires":"x"},"links":[1],"forms":{},"lmos:capabilities":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc, err := ParseDocument(raw)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != EINVALID {
				t.Fatalf("ParseDocument error %#v", err)
			}
			// Where a field is named it is a JSON pointer ("" is the root).
			for _, f := range e.Fields {
				if (f.Field != "" && !strings.HasPrefix(f.Field, "/")) || f.Description == "" {
					t.Fatalf("ParseDocument error field %#v", f)
				}
			}
			return
		}
		before, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("parsed document does not marshal: %v", err)
		}
		verr := Validate(doc)
		if after, _ := json.Marshal(doc); string(after) != string(before) {
			t.Fatal("Validate mutated the document")
		}
		if again := Validate(doc); !slices.Equal(ErrorFields(again), ErrorFields(verr)) {
			t.Fatalf("Validate not deterministic: %+v vs %+v", ErrorFields(verr), ErrorFields(again))
		}
		if id, ok := doc["id"].(string); ok {
			key := lmos.TopicKey(id)
			if strings.ContainsAny(key, "/+#") {
				t.Fatalf("lmos.TopicKey(%q) = %q keeps a topic separator or wildcard", id, key)
			}
			if back, err := url.PathUnescape(key); err != nil || back != id {
				t.Fatalf("lmos.TopicKey(%q) = %q does not round-trip (%q, %v)", id, key, back, err)
			}
		}
		if verr != nil {
			checkValidationError(t, verr)
			return
		}
		checkValidDoc(t, doc)
	})
}

// checkValidDoc restates the required rules independently of Validate.
func checkValidDoc(t *testing.T, doc map[string]any) {
	t.Helper()
	if title, _ := doc["title"].(string); title == "" {
		t.Fatalf("valid doc without title: %v", doc)
	}
	ctx := doc["@context"]
	if arr, ok := ctx.([]any); ok && len(arr) > 0 {
		ctx = arr[0]
	}
	if ctx != ContextTD11 && ctx != ContextTD10 {
		t.Fatalf("valid doc with @context %v", doc["@context"])
	}
	defs, _ := doc["securityDefinitions"].(map[string]any)
	if len(defs) == 0 {
		t.Fatalf("valid doc without securityDefinitions: %v", doc)
	}
	for name, d := range defs {
		if def, _ := d.(map[string]any); def == nil || def["scheme"] == nil {
			t.Fatalf("valid doc with definition %q without scheme", name)
		}
	}
	var names []any
	switch s := doc["security"].(type) {
	case string:
		names = []any{s}
	case []any:
		names = s
	}
	if len(names) == 0 {
		t.Fatalf("valid doc without security: %v", doc["security"])
	}
	for _, n := range names {
		s, ok := n.(string)
		if _, defined := defs[s]; !ok || !defined {
			t.Fatalf("valid doc with undefined security %v", n)
		}
	}
	if id, ok := doc["id"]; ok {
		s, isStr := id.(string)
		if !isStr || ValidateID(s) != nil {
			t.Fatalf("valid doc with bad id %q", id)
		}
	}
	for _, kind := range []string{"properties", "actions", "events"} {
		affs, _ := doc[kind].(map[string]any)
		for name, a := range affs {
			forms, _ := a.(map[string]any)["forms"].([]any)
			if len(forms) == 0 {
				t.Fatalf("valid doc with %s/%s without forms", kind, name)
			}
			for _, f := range forms {
				if href, _ := f.(map[string]any)["href"].(string); href == "" {
					t.Fatalf("valid doc with %s/%s form without href", kind, name)
				}
			}
		}
	}
}

// TestParseDocumentRefusesDuplicateMember: a duplicate member name is
// refused with its pointer (the scan itself is tested in internal/jsonx).
func TestParseDocumentRefusesDuplicateMember(t *testing.T) {
	_, err := ParseDocument([]byte(`{"id":"urn:a","title":"t","id":"urn:b"}`))
	if ErrorCode(err) != EINVALID || len(ErrorFields(err)) != 1 || ErrorFields(err)[0].Field != "/id" {
		t.Errorf("ParseDocument with a duplicate id: %v %v", err, ErrorFields(err))
	}
}
