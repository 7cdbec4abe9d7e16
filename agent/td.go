package agent

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// description is a TD prepared for joining.
type description struct {
	id  string
	doc []byte
	// types maps "properties/{name}", "actions/{name}" and "events/{name}"
	// to the content type of the affordance's hub form.
	types map[string]string
}

// prepareTD decodes td (JSON bytes, or any value that marshals to a JSON
// object), gives it an id if it has none, fills in what TD 1.1 requires and
// the author left out (@context, nosec security), and hub forms for every
// affordance without forms or with a placeholder form (one without href).
func prepareTD(td any, hostport, contentType string) (*description, error) {
	var raw []byte
	switch x := td.(type) {
	case nil:
		return nil, errors.New("no Thing Description (Options.TD)")
	case []byte:
		raw = x
	case json.RawMessage:
		raw = x
	case string:
		raw = []byte(x)
	default:
		b, err := json.Marshal(td)
		if err != nil {
			return nil, fmt.Errorf("cannot encode the Thing Description: %w", err)
		}
		raw = b
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return nil, fmt.Errorf("the Thing Description is not a JSON object: %v", err)
	}
	id, _ := doc["id"].(string)
	if id == "" {
		id = newUUID()
		doc["id"] = id
	}
	if _, ok := doc["@context"]; !ok {
		doc["@context"] = []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": lmos.ContextLMOS}}
	}
	if _, ok := doc["securityDefinitions"]; !ok {
		doc["securityDefinitions"] = map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}}
		if _, ok := doc["security"]; !ok {
			doc["security"] = "nosec_sc"
		}
	}
	d := &description{id: id, types: make(map[string]string)}
	for _, kind := range []string{"properties", "actions", "events"} {
		affs, _ := doc[kind].(map[string]any)
		for name, a := range affs {
			aff, ok := a.(map[string]any)
			if !ok {
				continue
			}
			key := kind + "/" + name
			d.types[key] = fillForms(aff, kind, hostport, lmos.ThingTopic(id, key), contentType)
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the Thing Description: %w", err)
	}
	d.doc = out
	return d, nil
}

// fillForms gives an affordance its hub forms when it has none or only
// placeholders (forms without href; their contentType is kept), and returns
// the content type of its hub form. Forms with an href are left alone.
func fillForms(aff map[string]any, kind, hostport, topic, contentType string) string {
	forms, _ := aff["forms"].([]any)
	ct := contentType
	for _, f := range forms {
		form, _ := f.(map[string]any)
		if href, _ := form["href"].(string); href != "" {
			return formType(forms, topic, contentType)
		}
		if c, _ := form["contentType"].(string); c != "" {
			ct = c
		}
	}
	form := func(topic, term string, op any) map[string]any {
		if strings.HasPrefix(hostport, "ws://") || strings.HasPrefix(hostport, "wss://") {
			// A WebSocket agent: every affordance is reached on the hub's
			// socket (PROTOCOL §5).
			return map[string]any{"href": hostport, "subprotocol": "lmosprotocol", "op": op, "contentType": ct}
		}
		if !strings.HasPrefix(hostport, "mqtts://") {
			hostport = "mqtt://" + hostport
		}
		return map[string]any{"href": hostport + "/" + topic, term: topic, "op": op, "contentType": ct}
	}
	switch kind {
	case "properties":
		forms = []any{form(topic, "mqv:filter", []any{"readproperty", "observeproperty", "unobserveproperty"})}
		if ro, _ := aff["readOnly"].(bool); !ro {
			forms = append(forms, form(topic+"/set", "mqv:topic", "writeproperty"))
		}
	case "actions":
		forms = []any{form(topic, "mqv:topic", "invokeaction")}
	case "events":
		forms = []any{form(topic, "mqv:filter", []any{"subscribeevent", "unsubscribeevent"})}
	}
	aff["forms"] = forms
	return ct
}

// formType returns the contentType of the author's form that names topic
// (by mqv:topic, mqv:filter or the href's path), else def.
func formType(forms []any, topic, def string) string {
	for _, f := range forms {
		form, _ := f.(map[string]any)
		href, _ := form["href"].(string)
		t, _ := form["mqv:topic"].(string)
		fl, _ := form["mqv:filter"].(string)
		if t == topic || fl == topic || strings.HasSuffix(href, "/"+topic) {
			if c, _ := form["contentType"].(string); c != "" {
				return c
			}
		}
	}
	return def
}

// newUUID returns urn:uuid:<random v4>.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
