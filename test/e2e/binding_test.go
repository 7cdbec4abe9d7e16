package e2e

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"github.com/coder/websocket"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

func newSigningKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func keyDID(k ed25519.PrivateKey) string { return proof.DID(k.Public().(ed25519.PublicKey)) }

func signedTD(t *testing.T, id, title string, k ed25519.PrivateKey, created time.Time) []byte {
	t.Helper()
	doc, err := proof.Sign(makeTD(id, title), k, created)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// bindingState is what a refused write must not change: the stored
// document as submitted, its lmos:verified and the binding.
func (h *testHub) bindingState(id string) string {
	h.t.Helper()
	_, raw := h.do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
	var doc map[string]any
	_, enriched := h.do(http.MethodGet, lmos.ThingPath(id), "", nil, "")
	_ = json.Unmarshal(enriched, &doc)
	_, binding := h.do(http.MethodGet, "/api/things/"+pathEscape(id)+"/binding", "", nil, "")
	return fmt.Sprintf("raw=%s verified=%v binding=%s", raw, doc["lmos:verified"], binding)
}

// refusals reads a refusal counter of /metrics (0 before the first).
func (h *testHub) refusals(name string) int {
	h.t.Helper()
	_, body := h.do(http.MethodGet, "/metrics", "", nil, "")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// Over HTTP: the first signed PUT binds the id and the directory shows it
// verified on every read; a description by another key, a tampered one, a
// replayed one, or one sent without a token by anyone but the owner is
// refused with its status and problem, and changes nothing; the owner may
// update without a token; an admin re-binds (key rotation).
func TestBindingOverHTTP(t *testing.T) {
	h := startHub(t, nil)
	owner, other := newSigningKey(t), newSigningKey(t)
	id := "urn:example:bound-http"
	path := lmos.ThingPath(id)
	t0 := time.Now().Add(-time.Hour)
	first := signedTD(t, id, "Lamp", owner, t0)
	if resp, body := h.do(http.MethodPut, path, "application/td+json", first, testToken); resp.StatusCode != 201 {
		t.Fatalf("signed PUT: %d %s", resp.StatusCode, body)
	}
	var doc map[string]any
	h.getJSON(path, 200, &doc)
	if doc["lmos:verified"] != keyDID(owner) {
		t.Errorf("lmos:verified = %v, want %s", doc["lmos:verified"], keyDID(owner))
	}
	var list []map[string]any
	h.getJSON("/things", 200, &list)
	if len(list) != 1 || list[0]["lmos:verified"] != keyDID(owner) {
		t.Errorf("listed: %v", list)
	}
	_, raw := h.do(http.MethodGet, path+"?enriched=false", "", nil, "")
	if _, err := proof.Verify(raw); err != nil {
		t.Errorf("the stored description no longer verifies: %v", err)
	}
	var b map[string]any
	h.getJSON("/api/things/"+pathEscape(id)+"/binding", 200, &b)
	if b["did"] != keyDID(owner) {
		t.Errorf("binding = %v", b)
	}

	// A second description by the owner makes the first an old one.
	if resp, body := h.do(http.MethodPut, path, "application/td+json", signedTD(t, id, "Lamp 1", owner, t0.Add(time.Minute)), testToken); resp.StatusCode != 204 {
		t.Fatalf("owner's second PUT: %d %s", resp.StatusCode, body)
	}
	later := time.Now()
	good := signedTD(t, id, "Lamp 2", owner, later)
	tampered := []byte(strings.Replace(string(good), `"Lamp 2"`, `"Evil"`, 1))
	cases := []struct {
		name   string
		doc    []byte
		token  string
		status int
		detail string
	}{
		{"another key, no token", signedTD(t, id, "Evil", other, later), "", 403, "bound to another key"},
		{"another key, admin token", signedTD(t, id, "Evil", other, later), testToken, 403, "bound to another key"},
		{"unsigned, no token", makeTD(id, "Evil"), "", 401, ""},
		{"tampered", tampered, testToken, 400, "signature does not match"},
		{"replayed older description", first, "", 409, "replayed"},
		{"did:web verificationMethod", []byte(strings.Replace(string(good), keyDID(owner)+"#", "did:web:evil.example#", 1)), testToken, 400, "proof"},
	}
	want := h.bindingState(id)
	for _, c := range cases {
		resp, body := h.do(http.MethodPut, path, "application/td+json", c.doc, c.token)
		t.Run(c.name, func(t *testing.T) { expectProblem(t, resp, body, c.status, c.detail) })
		if got := h.bindingState(id); got != want {
			t.Errorf("%s changed state:\n%s\nwant\n%s", c.name, got, want)
		}
	}
	if n := h.refusals(`lmos_http_refused_total{reason="forbidden"}`); n < 2 {
		t.Errorf("forbidden refusals counted: %d", n)
	}
	if n := h.refusals(`lmos_http_refused_total{reason="conflict"}`); n != 1 {
		t.Errorf("conflict refusals counted: %d, want 1", n)
	}

	// The owner updates without any token: the proof is the credential.
	if resp, body := h.do(http.MethodPut, path, "application/td+json", good, ""); resp.StatusCode != 204 {
		t.Fatalf("owner's signed PUT without a token: %d %s", resp.StatusCode, body)
	}
	// A DELETE needs the admin token; the binding outlives the Thing.
	if resp, _ := h.do(http.MethodDelete, path, "", nil, ""); resp.StatusCode != 401 {
		t.Errorf("DELETE without a token: %d", resp.StatusCode)
	}
	if resp, _ := h.do(http.MethodDelete, path, "", nil, testToken); resp.StatusCode != 204 {
		t.Fatalf("admin DELETE: %d", resp.StatusCode)
	}
	resp, body := h.do(http.MethodPut, path, "application/td+json", signedTD(t, id, "Evil", other, time.Now()), testToken)
	expectProblem(t, resp, body, 403, "bound to another key")
	if resp, _ := h.do(http.MethodGet, path, "", nil, ""); resp.StatusCode != 404 {
		t.Errorf("the refused PUT registered the deleted id: %d", resp.StatusCode)
	}

	// Key rotation: admin only; then the new key binds, the old one is refused.
	bindPath := "/api/things/" + pathEscape(id) + "/binding"
	rebind := []byte(`{"did":"` + keyDID(other) + `"}`)
	if resp, _ := h.do(http.MethodPut, bindPath, "application/json", rebind, ""); resp.StatusCode != 401 {
		t.Errorf("re-bind without a token: %d", resp.StatusCode)
	}
	resp, body = h.do(http.MethodPut, bindPath, "application/json", []byte(`{"did":"did:key:zNOPE"}`), testToken)
	expectProblem(t, resp, body, 400, "did:key")
	events := h.MQTT(nil)
	defer events.Close()
	events.MustSub("lmos/v1/hub/events")
	if resp, body := h.do(http.MethodPut, bindPath, "application/json", rebind, testToken); resp.StatusCode != 200 || !strings.Contains(string(body), keyDID(other)) {
		t.Fatalf("re-bind: %d %s", resp.StatusCode, body)
	}
	// The hub's events go out after their commit: the DELETE's may still
	// arrive after the SUBSCRIBE; the re-bind's is the first event after it.
	var ev map[string]any
	for {
		ev = nil
		if err := json.Unmarshal(events.Next("lmos/v1/hub/events").Payload, &ev); err != nil {
			t.Fatalf("hub event: %v", err)
		}
		if ev["type"] != "thing_deleted" {
			break
		}
	}
	if ev["type"] != "binding" || ev["id"] != id || ev["did"] != keyDID(other) {
		t.Errorf("hub event of the re-bind: %v", ev)
	}
	if resp, body := h.do(http.MethodPut, path, "application/td+json", signedTD(t, id, "New owner", other, time.Now()), ""); resp.StatusCode != 201 {
		t.Fatalf("the new key's PUT: %d %s", resp.StatusCode, body)
	}
	resp, body = h.do(http.MethodPut, path, "application/td+json", signedTD(t, id, "Old owner", owner, time.Now().Add(time.Second)), testToken)
	expectProblem(t, resp, body, 403, "bound to another key")
	if resp, _ := h.do(http.MethodDelete, bindPath, "", nil, testToken); resp.StatusCode != 204 {
		t.Errorf("DELETE binding: %d", resp.StatusCode)
	}
	if resp, _ := h.do(http.MethodGet, bindPath, "", nil, ""); resp.StatusCode != 404 {
		t.Errorf("binding after DELETE: %d", resp.StatusCode)
	}
}

// security.requireSigned on every door: an unsigned PUT (even an
// admin's), MQTT join (Python Paho) or WebSocket registerThing is 403 and
// counted by the setting, and changes nothing; a signed one is stored.
func TestRequireSignedOnEveryDoor(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Security.RequireSigned = true })
	id := "urn:example:must-sign"
	before := h.snapshot()
	resp, body := h.do(http.MethodPut, lmos.ThingPath(id), "application/td+json", makeTD(id, "T"), testToken)
	expectProblem(t, resp, body, 403, "security.requireSigned")
	if h.snapshot() != before {
		t.Errorf("the refused PUT changed the directory")
	}
	if n := h.refusals(`lmos_http_refused_total{reason="security.requireSigned"}`); n != 1 {
		t.Errorf("refusals counted: %d", n)
	}
	w := h.wsDial("lmosprotocol", nil)
	expectWSError(t, wsRegister(t, w, id, makeTD(id, "T")), 403, lmos.CodeForbidden, "security.requireSigned")
	if n := h.refusals(`lmos_ws_refused_total{reason="security.requireSigned"}`); n != 1 {
		t.Errorf("WebSocket refusals counted: %d", n)
	}
	if _, err := exec.LookPath("/usr/bin/python3"); err == nil {
		res := joinOverPaho(t, h, id, makeTD(id, "T"))
		if res.Status != lmos.JoinRejected || res.Problem == nil || res.Problem.Status != 403 || !strings.Contains(res.Problem.Detail, "security.requireSigned") {
			t.Errorf("unsigned MQTT join: %+v", res)
		}
		if n := h.refusals(`lmos_mqtt_refused_total{reason="security.requireSigned"}`); n != 1 {
			t.Errorf("MQTT refusals counted: %d", n)
		}
	}
	if h.snapshot() != before {
		t.Errorf("the refused registrations changed the directory")
	}
	if resp, body := h.do(http.MethodPut, lmos.ThingPath(id), "application/td+json", signedTD(t, id, "T", newSigningKey(t), time.Now()), testToken); resp.StatusCode != 201 {
		t.Errorf("signed PUT: %d %s", resp.StatusCode, body)
	}
}

// pahoSignedJoin is Eclipse Paho (Python, 1.6.1) publishing a description to
// its td topic over MQTT 5 and printing the join result: strict, it exits
// non-zero on a refused CONNECT or SUBSCRIBE, a missing PUBACK or result,
// or any disconnect it did not ask for. With a username it connects with
// the Thing's credentials; an empty payload file deregisters.
const pahoSignedJoin = `
import json, queue, sys, threading
import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
host, port, tid, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
user = sys.argv[5] if len(sys.argv) > 6 else None
pw = sys.argv[6] if len(sys.argv) > 6 else None
def die(msg):
    sys.stdout.write(json.dumps({"error": msg}) + "\n"); sys.stdout.flush(); sys.exit(1)
key = "".join("%%%02X" % ord(c) if c in "%/+#" else c for c in tid)
up, subbed, ending, results = threading.Event(), threading.Event(), [False], queue.Queue()
c = mqtt.Client(client_id="paho-join-" + key[-12:], protocol=mqtt.MQTTv5)
if user:
    c.username_pw_set(user, pw)
def on_connect(cl, u, flags, rc, props=None):
    if rc != 0:
        results.put({"error": "connect refused: %s" % rc})
    up.set()
def on_disconnect(cl, u, rc, props=None):
    if rc != 0 or not ending[0]:
        results.put({"error": "unexpected disconnect: %s" % rc})
def on_subscribe(cl, u, mid, granted, props=None):
    for g in granted:
        if (g.value if hasattr(g, "value") else g) >= 0x80:
            results.put({"error": "subscribe refused"})
    subbed.set()
c.on_connect, c.on_disconnect, c.on_subscribe = on_connect, on_disconnect, on_subscribe
c.on_message = lambda cl, u, m: results.put(json.loads(m.payload))
c.connect(host, port, keepalive=30, clean_start=True)
c.loop_start()
if not up.wait(5): die("no CONNACK")
c.subscribe("lmos/v1/things/%s/td/result" % key, qos=1)
if not subbed.wait(5): die("no SUBACK")
payload = open(path, "rb").read()
p = Properties(PacketTypes.PUBLISH); p.ContentType = "application/td+json"
info = c.publish("lmos/v1/things/%s/td" % key, payload, qos=1, properties=p if payload else None)
info.wait_for_publish(5)
if not info.is_published(): die("no PUBACK")
try:
    res = results.get(timeout=10)
except queue.Empty:
    die("no td/result")
if "error" in res: die(res["error"])
ending[0] = True
c.disconnect(); c.loop_stop()
while not results.empty():
    extra = results.get()
    if "error" in extra: die(extra["error"])
sys.stdout.write(json.dumps(res) + "\n")
`

// joinOverPaho publishes doc for id with Python Paho and returns the join
// result.
func joinOverPaho(t *testing.T, h *testHub, id string, doc []byte, creds ...string) lmos.JoinResult {
	t.Helper()
	f := filepath.Join(t.TempDir(), "td.json")
	if err := os.WriteFile(f, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := runPaho(t, h, 30*time.Second, pahoSignedJoin, append([]string{id, f}, creds...)...)
	var res lmos.JoinResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("join result %q: %v", out, err)
	}
	return res
}

// Over MQTT, with a strict client (Python Paho): a signed join binds the
// id; once its owner has deregistered it, a join by another key, an
// unsigned one and a replay of the owner's old description are each
// rejected with their problem and change nothing; the owner's fresh proof
// joins again.
func TestBindingOverMQTT(t *testing.T) {
	pahoPython(t)
	h := startHub(t, nil)
	owner, other := newSigningKey(t), newSigningKey(t)
	id := "urn:example:bound-mqtt"
	first := signedTD(t, id, "Plug", owner, time.Now().Add(-time.Minute))
	res := joinOverPaho(t, h, id, first)
	if res.Status != lmos.JoinAccepted || res.Credentials == nil {
		t.Fatalf("signed join: %+v", res)
	}
	var doc map[string]any
	h.getJSON(lmos.ThingPath(id), 200, &doc)
	if doc["lmos:verified"] != keyDID(owner) {
		t.Errorf("lmos:verified = %v", doc["lmos:verified"])
	}
	// The owner deregisters with its credentials (empty payload).
	if res := joinOverPaho(t, h, id, nil, res.Credentials.Username, res.Credentials.Password); res.Status != lmos.JoinDeleted {
		t.Fatalf("deregistration: %+v", res)
	}
	want := h.bindingState(id)
	for _, c := range []struct {
		name   string
		doc    []byte
		status int
		code   string
	}{
		{"another key", signedTD(t, id, "Evil", other, time.Now()), 403, lmos.CodeForbidden},
		{"unsigned", makeTD(id, "Evil"), 403, lmos.CodeForbidden},
		{"replay of the owner's old description", first, 409, lmos.CodeConflict},
		{"tampered", []byte(strings.Replace(string(signedTD(t, id, "Plug 2", owner, time.Now())), `"Plug 2"`, `"Evil"`, 1)), 400, lmos.CodeInvalid},
	} {
		res := joinOverPaho(t, h, id, c.doc)
		if res.Status != lmos.JoinRejected || res.Problem == nil || res.Problem.Status != c.status || !strings.HasSuffix(res.Problem.Type, "#"+c.code) || res.Credentials != nil {
			t.Errorf("%s: %+v (problem %+v)", c.name, res, res.Problem)
		}
		if got := h.bindingState(id); got != want {
			t.Errorf("%s changed state: %s, want %s", c.name, got, want)
		}
	}
	if n := h.refusals(`lmos_mqtt_refused_total{reason="forbidden"}`); n != 2 {
		t.Errorf("forbidden joins counted: %d, want 2", n)
	}
	if n := h.refusals(`lmos_mqtt_refused_total{reason="conflict"}`); n != 1 {
		t.Errorf("replayed joins counted: %d, want 1", n)
	}
	if res := joinOverPaho(t, h, id, signedTD(t, id, "Plug", owner, time.Now())); res.Status != lmos.JoinAccepted {
		t.Errorf("the owner's fresh join: %+v", res)
	}
}

// wsRegister sends registerThing with doc (a signed or unsigned TD) on w
// and returns the reply.
func wsRegister(t *testing.T, w *wsClient, id string, doc []byte) map[string]any {
	t.Helper()
	var td map[string]any
	if err := json.Unmarshal(doc, &td); err != nil {
		t.Fatal(err)
	}
	return w.reply(w.send(map[string]any{"messageType": "registerThing", "thingId": id, "td": td}, false))
}

// Over WebSocket: once the owner's socket has closed, another socket
// cannot take its bound id over, not with another key, not unsigned, not
// with the owner's description read back from the directory (a replay);
// the owner's fresh proof can, from a new socket. The same socket may
// re-register its stored description.
func TestBindingOverWebSocket(t *testing.T) {
	h := startHub(t, nil)
	owner, other := newSigningKey(t), newSigningKey(t)
	id := "urn:example:bound-ws"
	wsDoc := func(title string, k ed25519.PrivateKey, created time.Time) []byte {
		raw, _ := json.Marshal(wsTD(id))
		raw = []byte(strings.Replace(string(raw), `"WebSocket test agent"`, strconv.Quote(title), 1))
		if k == nil {
			return raw
		}
		doc, err := proof.Sign(raw, k, created)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	first := wsDoc("Owner", owner, time.Now().Add(-time.Minute))
	w := h.wsDial("lmosprotocol", nil)
	if r := wsRegister(t, w, id, first); r["messageType"] != "acknowledgement" {
		t.Fatalf("owner's signed registerThing: %v", r)
	}
	if r := wsRegister(t, w, id, first); r["messageType"] != "acknowledgement" {
		t.Fatalf("owner's socket registering its description again: %v", r)
	}
	var doc map[string]any
	h.getJSON(lmos.ThingPath(id), 200, &doc)
	if doc["lmos:verified"] != keyDID(owner) {
		t.Errorf("lmos:verified = %v", doc["lmos:verified"])
	}
	_ = w.c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, 5*time.Second, "the owner's socket gone", func() bool { st, _ := h.Presence(id); return st == "offline" })
	_, stored := h.do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
	want := h.bindingState(id)
	for _, c := range []struct {
		name   string
		doc    []byte
		status int
		code   string
	}{
		{"another key", wsDoc("Evil", other, time.Now()), 403, lmos.CodeForbidden},
		{"unsigned", wsDoc("Evil", nil, time.Time{}), 403, lmos.CodeForbidden},
		{"the stored description, read from the directory", stored, 409, lmos.CodeConflict},
		{"the owner's key, older proof", wsDoc("Old", owner, time.Now().Add(-time.Hour)), 409, lmos.CodeConflict},
	} {
		thief := h.wsDial("lmosprotocol", nil)
		expectWSError(t, wsRegister(t, thief, id, c.doc), c.status, c.code, "")
		if got := h.bindingState(id); got != want {
			t.Errorf("%s changed state: %s, want %s", c.name, got, want)
		}
		if st, _ := h.Presence(id); st != "offline" {
			t.Errorf("%s: presence %s", c.name, st)
		}
		_ = thief.c.Close(websocket.StatusNormalClosure, "")
	}
	if n := h.refusals(`lmos_ws_refused_total{reason="forbidden"}`); n != 2 {
		t.Errorf("forbidden registrations counted: %d, want 2", n)
	}
	back := h.wsDial("lmosprotocol", nil)
	if r := wsRegister(t, back, id, wsDoc("Owner again", owner, time.Now())); r["messageType"] != "acknowledgement" {
		t.Fatalf("the owner's fresh proof from a new socket: %v", r)
	}
	if st, _ := h.Presence(id); st != "online" {
		t.Errorf("presence after the owner came back: %s", st)
	}
}

// Across a restart of the hub, over HTTP: a registered Thing's binding, a
// deleted Thing's and an admin's binding of an id not yet registered all
// hold (GET …/binding the same, another key's description refused 403),
// and an unbound Thing's id binds to its next signer. The store keeps the
// first in the Thing's record and the others apart (store/binding.go).
func TestBindingsAcrossRestartOverHTTP(t *testing.T) {
	h := startHub(t, nil)
	keys := map[string]ed25519.PrivateKey{}
	for _, name := range []string{"kept", "deleted", "reserved", "unbound", "other"} {
		keys[name] = newSigningKey(t)
	}
	id := func(name string) string { return "urn:example:restart-" + name }
	t0 := time.Now().Add(-time.Hour)
	for _, name := range []string{"kept", "deleted", "unbound"} {
		if resp, body := h.do(http.MethodPut, lmos.ThingPath(id(name)), "application/td+json", signedTD(t, id(name), name, keys[name], t0), testToken); resp.StatusCode != 201 {
			t.Fatalf("signed PUT of %s: %d %s", name, resp.StatusCode, body)
		}
	}
	if resp, body := h.do(http.MethodDelete, lmos.ThingPath(id("deleted")), "", nil, testToken); resp.StatusCode != 204 {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	if resp, body := h.do(http.MethodPut, "/api/things/"+pathEscape(id("reserved"))+"/binding", "application/json",
		[]byte(`{"did":"`+keyDID(keys["reserved"])+`"}`), testToken); resp.StatusCode != 200 {
		t.Fatalf("re-bind: %d %s", resp.StatusCode, body)
	}
	if resp, body := h.do(http.MethodDelete, "/api/things/"+pathEscape(id("unbound"))+"/binding", "", nil, testToken); resp.StatusCode != 204 {
		t.Fatalf("unbind: %d %s", resp.StatusCode, body)
	}
	bindings := func(h *testHub) map[string]string {
		out := map[string]string{}
		for _, name := range []string{"kept", "deleted", "reserved", "unbound"} {
			resp, body := h.do(http.MethodGet, "/api/things/"+pathEscape(id(name))+"/binding", "", nil, "")
			out[name] = fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		return out
	}
	before := bindings(h)
	for _, name := range []string{"kept", "deleted", "reserved"} {
		if !strings.HasPrefix(before[name], "200 ") || !strings.Contains(before[name], keyDID(keys[name])) {
			t.Errorf("binding of %s before the restart: %s", name, before[name])
		}
	}
	if !strings.HasPrefix(before["unbound"], "404 ") {
		t.Errorf("binding of unbound before the restart: %s", before["unbound"])
	}
	h.Close()

	h2 := startHubIn(t, h.Dir, nil)
	if after := bindings(h2); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("bindings after the restart:\n%v\nbefore:\n%v", after, before)
	}
	now := time.Now()
	for _, name := range []string{"kept", "deleted", "reserved"} {
		resp, body := h2.do(http.MethodPut, lmos.ThingPath(id(name)), "application/td+json", signedTD(t, id(name), "Evil", keys["other"], now), testToken)
		expectProblem(t, resp, body, 403, "bound to another key")
	}
	if resp, body := h2.do(http.MethodPut, lmos.ThingPath(id("unbound")), "application/td+json", signedTD(t, id("unbound"), "New", keys["other"], now), testToken); resp.StatusCode != 204 {
		t.Errorf("another key's description of the unbound id: %d %s", resp.StatusCode, body)
	}
	if resp, body := h2.do(http.MethodPut, lmos.ThingPath(id("reserved")), "application/td+json", signedTD(t, id("reserved"), "Mine", keys["reserved"], now), testToken); resp.StatusCode != 201 {
		t.Errorf("the reserved key's description: %d %s", resp.StatusCode, body)
	}
}
