package ws

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/fxamacker/cbor/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

func TestDecodeMessageSpellings(t *testing.T) {
	for _, tc := range []struct {
		frame              string
		typ, thing, name   string
		value              string
		kotlin, corr, msgs bool
	}{
		{frame: `{"messageType":"readProperty","thingId":"urn:a","messageId":"m1","name":"temp"}`, typ: mtReadProperty, thing: "urn:a", name: "temp"},
		{frame: `{"messageType":"readProperty","thingID":"urn:a","messageID":"m1","property":"temp"}`, typ: mtReadProperty, thing: "urn:a", name: "temp", kotlin: true},
		{frame: `{"messageType":"writeProperty","thingId":"urn:a","property":"mode","data":"eco"}`, typ: mtWriteProperty, thing: "urn:a", name: "mode", value: `"eco"`, kotlin: true},
		{frame: `{"messageType":"writeProperty","thingId":"urn:a","name":"mode","value":"eco"}`, typ: mtWriteProperty, thing: "urn:a", name: "mode", value: `"eco"`},
		{frame: `{"messageType":"subscribeevent","thingId":"urn:a","event":"alarm"}`, typ: mtSubscribeEvent, thing: "urn:a", name: "alarm"},
		{frame: `{"messageType":"invokeAction","thingId":"urn:a","action":"add","input":{"a":1}}`, typ: mtInvokeAction, thing: "urn:a", name: "add", value: `{"a":1}`},
		{frame: `{"messageType":"actionStatus","thingId":"urn:a","correlationID":"c","action":"add","status":"running","output":[1]}`, typ: mtActionStatus, thing: "urn:a", name: "add", value: `[1]`},
	} {
		m, err := decodeMessage(hub.Decoder{}, []byte(tc.frame), lmos.MediaJSON)
		if err != nil {
			t.Errorf("%s: %v", tc.frame, err)
			continue
		}
		v := ""
		if m.HasValue {
			b, _ := json.Marshal(m.Value)
			v = string(b)
		}
		if m.MessageType != tc.typ || m.ThingID != tc.thing || m.Name != tc.name || v != tc.value || m.Kotlin != tc.kotlin {
			t.Errorf("%s: got %+v (value %s)", tc.frame, m, v)
		}
	}
	// The same object in CBOR.
	b, _ := cbor.Marshal(map[string]any{"messageType": "invokeAction", "thingId": "urn:a", "action": "add", "input": map[string]any{"a": 1}})
	m, err := decodeMessage(hub.Decoder{}, b, lmos.MediaCBOR)
	if err != nil || m.MessageType != mtInvokeAction || m.Name != "add" || !m.HasValue || m.Media != lmos.MediaCBOR {
		t.Errorf("CBOR: %+v %v", m, err)
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"a":1} {}`, `{`, "\xff", "{\"messageType\":\"read\xffProperty\"}"} {
		if _, err := decodeMessage(hub.Decoder{}, []byte(bad), lmos.MediaJSON); !errors.Is(err, errUnparseable) {
			t.Errorf("%q: %v, want unparseable", bad, err)
		}
	}
}

// FuzzDecodeMessage: no frame panics the decoder, a decoded message comes
// with the frame's encoding, and every reply built from it encodes.
func FuzzDecodeMessage(f *testing.F) {
	seeds := []string{
		`{"messageType":"readProperty","thingId":"urn:a","messageId":"m","name":"temp"}`,
		`{"messageType":"invokeAction","thingID":"urn:a","messageID":"m","action":"x","input":{"a":[1,2,{"b":null}]}}`,
		`{"messageType":"registerThing","td":{"id":"urn:a","title":"t"}}`,
		`{"messageType":"error","status":"404","type":"t","title":"x","detail":"d"}`,
		`{"messageType":"actionStatus","status":"failed","error":{"status":502}}`,
		`{"messageType":"publishGroup","group":"g","topic":"a/b","data":[1,{"c":null}]}`,
		`{"messageType":"subscribegroup","group":7,"topic":"#"}`,
		`{"messageType":7}`, `[]`, `{"a":1e400}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
		var v any
		if json.Unmarshal([]byte(s), &v) == nil {
			if b, err := cbor.Marshal(v); err == nil {
				f.Add(b, true)
			}
		}
	}
	f.Add([]byte{0xbf, 0x61, 0x61, 0x01, 0xff}, true)
	f.Add([]byte{0xa1, 0x61, 0x61, 0xc1, 0x00}, true)
	f.Fuzz(func(t *testing.T, frame []byte, binary bool) {
		media := lmos.MediaJSON
		if binary {
			media = lmos.MediaCBOR
		}
		m, err := decodeMessage(hub.Decoder{}, frame, media)
		if errors.Is(err, errUnparseable) {
			if m != nil {
				t.Fatal("an unparseable frame returned a message")
			}
			return
		}
		if m == nil || m.Media != media {
			t.Fatalf("message %+v for %q", m, frame)
		}
		out := reply(m, outError)
		out.setProblem(hub.ProblemOf(err))
		if _, err := out.encode(media); err != nil {
			t.Fatalf("cannot encode a reply: %v", err)
		}
		if m.HasValue {
			_, _ = hub.EncodeValue(m.Value, media) // may refuse (1e400), must not panic
		}
	})
}
