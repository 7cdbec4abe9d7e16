// Package tdgen generates realistic, distinct Thing Descriptions for
// benchmarks and load tests: the same generator everywhere, so figures
// from different packages describe the same workload. MakeTD is the small
// TD of the other tests; the package imports nothing of the hub, so the
// adapters' in-package tests use it too.
package tdgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// TD is one generated Thing Description.
type TD struct {
	ID, Title string
	Raw       []byte
}

// tdTemplate is testdata/tds/thermostat-agent.json with its varying
// parts as placeholders (~2.4 KB once filled in).
const tdTemplate = `{
  "@context": ["https://www.w3.org/2022/wot/td/v1.1", {"lmos": "https://eclipse.dev/lmos/protocol/v1"}],
  "@type": "lmos:{TYPE}",
  "id": "{ID}",
  "title": "{TITLE}",
  "description": "Keeps the {ROOM} {THING} at a target {QTY} and answers questions about {THING} {QTY}.",
  "lmos:metadata": {"lmos:vendor": {"lmos:name": "Example {THING} GmbH", "lmos:url": "https://{THING}.example"}},
  "lmos:capabilities": [
    {"id": "urn:example:capability:{THING}:{VERB}-{QTY}", "name": "{VERB} {QTY}", "version": "1.0.{N}",
     "description": "{VERB}s the {QTY} of the {ROOM} {THING}", "examples": ["{VERB} the {ROOM} {QTY} to {N}"]}
  ],
  "securityDefinitions": {"nosec_sc": {"scheme": "nosec"}},
  "security": "nosec_sc",
  "properties": {
    "{QTY}": {
      "type": "number", "unit": "{UNIT}", "readOnly": true, "observable": true,
      "forms": [{"href": "mqtt://hub.local:1883/lmos/v1/things/{ID}/properties/{QTY}",
                 "op": ["readproperty", "observeproperty"], "contentType": "application/cbor",
                 "mqv:filter": "lmos/v1/things/{ID}/properties/{QTY}",
                 "mqv:retain": true}]
    }
  },
  "actions": {
    "{ACTION}": {
      "description": "{VERB} the {QTY} of the {THING}",
      "input": {"type": "object", "properties": {"value": {"type": "number", "minimum": 0, "maximum": {N}}}, "required": ["value"]},
      "output": {"type": "object", "properties": {"accepted": {"type": "boolean"}}},
      "forms": [{"href": "mqtt://hub.local:1883/lmos/v1/things/{ID}/actions/{ACTION}",
                 "op": "invokeaction", "contentType": "application/cbor",
                 "mqv:topic": "lmos/v1/things/{ID}/actions/{ACTION}"}]
    }
  },
  "events": {
    "{EVENT}": {
      "data": {"type": "object", "properties": {"{QTY}": {"type": "number"}}},
      "forms": [{"href": "mqtt://hub.local:1883/lmos/v1/things/{ID}/events/{EVENT}",
                 "op": "subscribeevent", "contentType": "application/cbor",
                 "mqv:filter": "lmos/v1/things/{ID}/events/{EVENT}"}]
    }
  }
}`

// Generate returns n distinct, valid TDs modelled on thermostat-agent.json:
// ids, titles, descriptions, capabilities and affordance names all vary.
// Word-list lengths are coprime so the combinations spread.
func Generate(n int) []TD {
	rooms := []string{"living room", "kitchen", "bedroom", "office", "garage", "cellar", "attic", "hallway", "bathroom", "garden", "nursery", "workshop", "studio"}
	things := []string{"thermostat", "lamp", "blind", "lock", "heater", "fan", "sensor", "camera", "speaker", "pump", "boiler", "window"}
	qtys := []string{"temperature", "humidity", "brightness", "position", "power", "pressure", "level", "speed", "volume", "flow", "noise"}
	units := []string{"degree Celsius", "percent", "lux", "percent", "watt", "hectopascal", "percent", "rpm", "decibel", "litre per minute", "decibel"}
	verbs := []string{"set", "toggle", "open", "close", "start", "stop", "dim", "reset", "calibrate", "schedule"}
	events := []string{"overheat", "threshold", "fault", "motion", "lowBattery", "tamper", "alarm"}
	ns := uuid.MustParse("6ba7b811-9dad-11d1-80b4-00c04fd430c8")
	tds := make([]TD, n)
	for i := range tds {
		room, thing, q, verb := rooms[i%13], things[i%12], i%11, verbs[(i/7)%10]
		id := "urn:uuid:" + uuid.NewSHA1(ns, fmt.Append(nil, i)).String()
		title := fmt.Sprintf("%s%s %s agent %d", strings.ToUpper(room[:1]), room[1:], thing, i)
		raw := strings.NewReplacer("{TYPE}", []string{"Agent", "Tool"}[i%2], "{ID}", id, "{TITLE}", title,
			"{ROOM}", room, "{THING}", thing, "{QTY}", qtys[q], "{UNIT}", units[q], "{VERB}", verb,
			"{ACTION}", verb+strings.ToUpper(qtys[q][:1])+qtys[q][1:], "{EVENT}", events[i%7],
			"{N}", fmt.Sprint(i%90+10)).Replace(tdTemplate)
		tds[i] = TD{ID: id, Title: title, Raw: []byte(raw)}
	}
	return tds
}

// Samples reads the sample Thing Descriptions of dir (the repository's
// testdata/tds), keyed by file name; tests in every package read them the
// same way. An empty map with no error means dir holds none.
func Samples(dir string) (map[string][]byte, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out[filepath.Base(f)] = b
	}
	return out, nil
}

// Nested is a JSON value of levels nested objects, each holding an array
// of width numbers ({"n":[0,1,…],"c":{…}}): within the hub's depth limit
// for levels ≤ 30, yet a descendant query over it visits many nodes (28
// levels of 100: ~600k for `$..*..*..*`), the shape of the search-budget
// attacks.
func Nested(levels, width int) string {
	var b strings.Builder
	for range levels {
		b.WriteString(`{"n":[`)
		for i := range width {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(i))
		}
		b.WriteString(`],"c":`)
	}
	b.WriteString("0" + strings.Repeat("}", levels))
	return b.String()
}

// MakeTD returns a small valid TD with the given id and title, typed
// lmos:Tool, with two actions: "run", whose form is an https URL (a Thing
// registered over HTTP), and "chat", whose form is an MQTT topic (the
// action MQTT agents serve in the broker's tests).
func MakeTD(id, title string) []byte {
	b, _ := json.Marshal(map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Tool",
		"id":                  id,
		"title":               title,
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{
			"run": map[string]any{
				"forms": []any{map[string]any{"href": "https://tools.example/run", "op": "invokeaction"}},
			},
			"chat": map[string]any{
				"forms": []any{map[string]any{"href": "mqtt://hub/lmos/v1/things/x/actions/chat"}},
			},
		},
	})
	return b
}

// AgentTD is the TD of an lmos:Agent with the given actions (name →
// affordance; forms are the agent library's to add), nosec, as a map for
// agent.Options.TD.
func AgentTD(id, title string, actions map[string]any) map[string]any {
	return map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Agent",
		"id":                  id,
		"title":               title,
		"description":         "A test agent called " + title + ".",
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions":             actions,
	}
}
