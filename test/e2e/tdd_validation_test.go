package e2e

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// expectRootValidationError checks a problem's validationErrors name the
// document root ("") with a description.
func expectRootValidationError(t *testing.T, what string, ve []hub.FieldError) {
	t.Helper()
	if len(ve) != 1 || ve[0].Field != "" || ve[0].Description == "" {
		t.Errorf("%s: validationErrors %+v, want one entry at the root with a description", what, ve)
	}
}

// W3C WoT Discovery tdd-validation-response: a body that is JSON but not an
// object (PUT, POST) and a merge patch that is not an object (PATCH, which
// RFC 7396 would apply as a whole-document replacement) are 400 with
// validationErrors, over HTTP, MQTT joins (mosquitto_rr) and WebSocket;
// nothing is stored or changed.
func TestTDD_validation_response_not_an_object(t *testing.T) {
	h := startHub(t, nil)
	const existing = "urn:example:keep"
	h.put(existing, makeTD(existing, "kept"))
	before := h.snapshot()

	type call struct{ method, path, ctype, body string }
	var calls []call
	for _, b := range []string{`[]`, `"a string"`, `42`, `[` + string(makeTD("urn:example:inside", "x")) + `]`} {
		calls = append(calls,
			call{"PUT", "/things/urn:example:new", "application/td+json", b},
			call{"POST", "/things", "application/td+json", b})
	}
	for _, b := range []string{`[]`, `"x"`, `42`, `null`} {
		calls = append(calls, call{"PATCH", "/things/" + pathEscape(existing), "application/merge-patch+json", b})
	}
	for _, c := range calls {
		resp, body := h.do(c.method, c.path, c.ctype, []byte(c.body), testToken)
		p := expectProblem(t, resp, body, http.StatusBadRequest, "must be a JSON object")
		ve := make([]hub.FieldError, len(p.ValidationErrors))
		for i, v := range p.ValidationErrors {
			ve[i] = hub.FieldError{Field: v.Field, Description: v.Description}
		}
		expectRootValidationError(t, c.method+" "+c.body, ve)
	}
	if after := h.snapshot(); after != before {
		t.Fatalf("HTTP: state changed:\nbefore %s\nafter  %s", before, after)
	}

	// MQTT join: Eclipse Paho (Python, MQTT 5) publishes each body on …/td
	// and reads …/td/result on the same connection (results go only to the
	// publisher); any disconnect or missing result fails it.
	tid := lmos.TopicKey("urn:example:mqtt-nobj")
	bodies := []struct{ ctype, hex string }{
		{"application/td+json", hex.EncodeToString([]byte(`[]`))},
		{"application/td+json", hex.EncodeToString([]byte(`"a string"`))},
		{"application/td+json", hex.EncodeToString([]byte(`42`))},
		{"application/cbor", "820102"}, // CBOR [1, 2]
	}
	var payloads []string
	for _, b := range bodies {
		payloads = append(payloads, b.ctype, b.hex)
	}
	for i, res := range pahoJoins(t, h, "lmos/v1/things/"+tid+"/td", payloads) {
		expectRootValidationError(t, "MQTT join "+bodies[i].ctype+" "+bodies[i].hex, res.Problem.ValidationErrors)
	}
	if after := h.snapshot(); after != before {
		t.Fatalf("MQTT: state changed:\nbefore %s\nafter  %s", before, after)
	}

	// WebSocket registerThing: a td that is not an object is named at /td.
	w := h.wsDial("lmosprotocol", nil)
	for _, td := range []any{[]any{}, "a string", 42} {
		r := w.reply(w.send(map[string]any{"messageType": "registerThing", "td": td}, false))
		expectWSError(t, r, 400, "invalid", "object")
		ve, _ := r["validationErrors"].([]any)
		if first, _ := ve[0].(map[string]any); len(ve) != 1 || first["field"] != "/td" || first["description"] == "" {
			t.Errorf("registerThing td %v: validationErrors %v, want one at /td", td, r["validationErrors"])
		}
	}
	if after := h.snapshot(); after != before {
		t.Fatalf("WebSocket: state changed:\nbefore %s\nafter  %s", before, after)
	}
}

// W3C WoT Discovery tdd-registrationinfo-vocab-ttl, -vocab-expires and
// tdd-absolute-time over HTTP: ttl 0 is refused at /registration/ttl; a
// client expires beside ttl is ignored for the hub's own; a lower-case
// "t"/"z" date-time is read; a malformed one is still refused.
func TestTDD_registrationinfo_ttl_expires_over_HTTP(t *testing.T) {
	h := startHub(t, nil)
	withReg := func(id, reg string) []byte {
		return []byte(strings.Replace(string(makeTD(id, "r")), `"title"`, `"registration":`+reg+`,"title"`, 1))
	}
	before := h.snapshot()
	for reg, field := range map[string]string{
		`{"ttl":0}`: "/registration/ttl",
		`{"ttl":0,"expires":"2099-01-01T00:00:00Z"}`: "/registration/ttl",
		`{"expires":"2099-01-01 00:00:00Z"}`:         "/registration/expires",
		`{"expires":"2099-01-01t00:00:00"}`:          "/registration/expires",
	} {
		resp, body := h.do(http.MethodPut, "/things/urn:example:reg", "application/td+json", withReg("urn:example:reg", reg), testToken)
		p := expectProblem(t, resp, body, http.StatusBadRequest, "")
		if len(p.ValidationErrors) != 1 || p.ValidationErrors[0].Field != field {
			t.Errorf("%s: validationErrors %+v, want %s", reg, p.ValidationErrors, field)
		}
	}
	if after := h.snapshot(); after != before {
		t.Fatalf("state changed:\nbefore %s\nafter  %s", before, after)
	}

	var td struct {
		Registration struct {
			Expires string `json:"expires"`
			TTL     *int   `json:"ttl"`
		} `json:"registration"`
	}
	h.put("urn:example:lower", withReg("urn:example:lower", `{"expires":"2099-01-01t00:00:00z"}`))
	h.getJSON("/things/urn:example:lower", http.StatusOK, &td)
	if td.Registration.Expires != "2099-01-01T00:00:00Z" || td.Registration.TTL != nil {
		t.Errorf("lower-case expires served as %+v", td.Registration)
	}

	start := time.Now()
	h.put("urn:example:both", withReg("urn:example:both", `{"ttl":3600,"expires":"2099-01-01T00:00:00Z"}`))
	h.getJSON("/things/urn:example:both", http.StatusOK, &td)
	exp, err := time.Parse(time.RFC3339Nano, td.Registration.Expires)
	if err != nil || td.Registration.TTL == nil || *td.Registration.TTL != 3600 ||
		exp.Before(start.Add(3599*time.Second)) || exp.After(time.Now().Add(3601*time.Second)) {
		t.Errorf("ttl 3600 beside a client expires served as %+v (%v), want expires about an hour from now", td.Registration, err)
	}
}

// pahoJoinScript: argv host port topic (content-type hex-payload)…; prints
// each …/result payload on a line; exits non-zero on any disconnect, refused
// subscription or missing result.
const pahoJoinScript = `
import sys, queue
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
host, port, topic = sys.argv[1], int(sys.argv[2]), sys.argv[3]
q, ready = queue.Queue(), queue.Queue()
c = mqtt.Client(client_id="tdd-nobj", protocol=mqtt.MQTTv5)
def on_connect(c, u, f, rc, p=None):
    if rc != 0: sys.exit("connect rc %s" % rc)
    c.subscribe(topic + "/result", qos=1)
def on_subscribe(c, u, mid, rcs, p=None):
    ready.put([r.value for r in rcs])
def on_disconnect(c, u, rc, p=None):
    q.put(("disconnect", rc))
c.on_connect, c.on_subscribe, c.on_disconnect = on_connect, on_subscribe, on_disconnect
c.on_message = lambda c, u, m: q.put(("msg", m.payload.decode()))
c.connect(host, port, keepalive=30)
c.loop_start()
rcs = ready.get(timeout=10)
if any(r >= 0x80 for r in rcs): sys.exit("subscribe refused %s" % rcs)
args = sys.argv[4:]
for i in range(0, len(args), 2):
    props = Properties(PacketTypes.PUBLISH)
    props.ContentType = args[i]
    info = c.publish(topic, bytes.fromhex(args[i+1]), qos=1, properties=props)
    info.wait_for_publish(timeout=10)
    if not info.is_published(): sys.exit("publish %d not acknowledged" % i)
    kind, v = q.get(timeout=10)
    if kind != "msg": sys.exit("disconnected rc %s" % v)
    print(v, flush=True)
c.disconnect()
c.loop_stop()
`

// joinResult is a td/result as the Paho join script prints it.
type joinResult struct {
	Status  string `json:"status"`
	Problem struct {
		Status           int              `json:"status"`
		ValidationErrors []hub.FieldError `json:"validationErrors"`
	} `json:"problem"`
}

// pahoJoins publishes each (content type, hex payload) pair of payloads on
// topic with Eclipse Paho (Python, MQTT 5; pahoJoinScript) and returns the
// results, each of which must be rejected with status 400.
func pahoJoins(t *testing.T, h *testHub, topic string, payloads []string) []joinResult {
	t.Helper()
	out, _ := runPaho(t, h, 30*time.Second, pahoJoinScript, append([]string{topic}, payloads...)...)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(payloads)/2 {
		t.Fatalf("paho got %d results, want %d: %s", len(lines), len(payloads)/2, out)
	}
	results := make([]joinResult, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &results[i]); err != nil || results[i].Status != "rejected" || results[i].Problem.Status != 400 {
			t.Fatalf("MQTT join %d: result %q (%v), want rejected with status 400", i, l, err)
		}
	}
	return results
}
