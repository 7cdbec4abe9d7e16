package e2e

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// schemaInvalidCase is one TD of the issue 11 audit that the W3C TD 1.1 JSON
// Schema refuses but the hub's own rules used to store with 201.
type schemaInvalidCase struct {
	name  string
	edit  func(td map[string]any)
	field string // the JSON pointer validationErrors must name
}

func schemaInvalidCases() []schemaInvalidCase {
	prop := func(td map[string]any) map[string]any {
		p := map[string]any{"type": "number", "forms": []any{map[string]any{"href": "https://tools.example/temp"}}}
		td["properties"] = map[string]any{"temp": p}
		return p
	}
	run := func(td map[string]any) map[string]any { return td["actions"].(map[string]any)["run"].(map[string]any) }
	return []schemaInvalidCase{
		{"property type bogus", func(td map[string]any) { prop(td)["type"] = "bogus" }, "/properties/temp/type"},
		{"form op explode", func(td map[string]any) { run(td)["forms"].([]any)[0].(map[string]any)["op"] = "explode" }, "/actions/run/forms/0/op"},
		{"security scheme nonsense", func(td map[string]any) {
			td["securityDefinitions"] = map[string]any{"nosec_sc": map[string]any{"scheme": "nonsense"}}
		}, "/securityDefinitions/nosec_sc/scheme"},
		{"version string", func(td map[string]any) { td["version"] = "1.0" }, "/version"},
		{"created yesterday", func(td map[string]any) { td["created"] = "yesterday" }, "/created"},
		{"readOnly yes", func(td map[string]any) { prop(td)["readOnly"] = "yes" }, "/properties/temp/readOnly"},
		{"base number", func(td map[string]any) { td["base"] = 5 }, "/base"},
		{"link rel number", func(td map[string]any) {
			td["links"] = []any{map[string]any{"href": "https://tools.example/doc", "rel": 5}}
		}, "/links/0/rel"},
		{"action safe no", func(td map[string]any) { run(td)["safe"] = "no" }, "/actions/run/safe"},
		{"basic in nowhere", func(td map[string]any) {
			td["securityDefinitions"] = map[string]any{"nosec_sc": map[string]any{"scheme": "basic", "in": "nowhere"}}
		}, "/securityDefinitions/nosec_sc/in"},
		{"support number", func(td map[string]any) { td["support"] = 42 }, "/support"},
		{"minimum zero", func(td map[string]any) { prop(td)["minimum"] = "zero" }, "/properties/temp/minimum"},
		{"registration created number", func(td map[string]any) {
			td["registration"] = map[string]any{"created": 5}
		}, "/registration/created"},
	}
}

func (c schemaInvalidCase) td(t *testing.T, id string) []byte {
	t.Helper()
	var td map[string]any
	if err := json.Unmarshal(makeTD(id, "schema"), &td); err != nil {
		t.Fatal(err)
	}
	c.edit(td)
	b, err := json.Marshal(td)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectSchemaField checks validationErrors name exactly the member at fault,
// each with a description.
func expectSchemaField(t *testing.T, what, field string, ve []hub.FieldError) {
	t.Helper()
	if len(ve) == 0 {
		t.Errorf("%s: no validationErrors, want %s", what, field)
	}
	for _, f := range ve {
		if f.Field != field || f.Description == "" {
			t.Errorf("%s: validationErrors %+v, want every entry at %s with a description", what, ve, field)
			return
		}
	}
}

// W3C WoT Discovery tdd-validation-jsonschema: every TD is checked against
// the official W3C TD 1.1 JSON Schema on every door. The thirteen
// schema-invalid TDs of the issue 11 audit are refused with 400 and a
// validationErrors entry at the member at fault over HTTP PUT and POST, an
// MQTT join (Eclipse Paho, Python) and WebSocket registerThing; nothing is
// stored. The makeTD document they are cut from is accepted, so the refusal
// is the edit's doing.
func TestTDD_validation_jsonschema(t *testing.T) {
	h := startHub(t, nil)
	const id = "urn:example:schema"
	cases := schemaInvalidCases()
	before := h.snapshot()
	for _, c := range cases {
		for _, m := range []struct{ method, path string }{{http.MethodPut, "/things/" + id}, {http.MethodPost, "/things"}} {
			body := c.td(t, id)
			if m.method == http.MethodPost {
				var td map[string]any
				_ = json.Unmarshal(body, &td)
				delete(td, "id") // POST creates an anonymous Thing
				body, _ = json.Marshal(td)
			}
			resp, rb := h.do(m.method, m.path, "application/td+json", body, testToken)
			p := expectProblem(t, resp, rb, http.StatusBadRequest, "")
			ve := make([]hub.FieldError, len(p.ValidationErrors))
			for i, v := range p.ValidationErrors {
				ve[i] = hub.FieldError{Field: v.Field, Description: v.Description}
			}
			expectSchemaField(t, m.method+" "+c.name, c.field, ve)
		}
	}
	if after := h.snapshot(); after != before {
		t.Fatalf("HTTP: state changed:\nbefore %s\nafter  %s", before, after)
	}

	// MQTT join: every case published on …/td by Paho; each result is
	// rejected with status 400 at the member.
	var payloads []string
	for _, c := range cases {
		payloads = append(payloads, "application/td+json", hex.EncodeToString(c.td(t, id)))
	}
	for i, res := range pahoJoins(t, h, "lmos/v1/things/"+lmos.TopicKey(id)+"/td", payloads) {
		expectSchemaField(t, "MQTT join "+cases[i].name, cases[i].field, res.Problem.ValidationErrors)
	}
	if after := h.snapshot(); after != before {
		t.Fatalf("MQTT: state changed:\nbefore %s\nafter  %s", before, after)
	}

	// WebSocket registerThing: errors inside the TD are named relative to
	// the TD, as the hub's own rules' errors always were there.
	w := h.wsDial("lmosprotocol", nil)
	for _, c := range cases {
		var td map[string]any
		if err := json.Unmarshal(c.td(t, id), &td); err != nil {
			t.Fatal(err)
		}
		r := w.reply(w.send(map[string]any{"messageType": "registerThing", "td": td}, false))
		expectWSError(t, r, 400, "invalid", "")
		raw, _ := json.Marshal(r["validationErrors"])
		var ve []hub.FieldError
		if err := json.Unmarshal(raw, &ve); err != nil {
			t.Fatalf("registerThing %s: validationErrors %s: %v", c.name, raw, err)
		}
		expectSchemaField(t, "registerThing "+c.name, c.field, ve)
	}
	if after := h.snapshot(); after != before {
		t.Fatalf("WebSocket: state changed:\nbefore %s\nafter  %s", before, after)
	}

	// The base document itself passes every door's validation.
	h.put(id, makeTD(id, "schema"))
}
