package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The one access policy, door by door (PROTOCOL §3.5, §4.4, §5 "Access").
// Each test speaks for a client nobody in this project wrote where one
// exists (mosquitto_pub/sub for MQTT, net/http for HTTP), and counts what
// reached the Things.

// securedWSTD is wsTD with a basic security scheme: only authenticated
// consumers may interact with it.
func securedWSTD(id string) map[string]any {
	td := wsTD(id)
	td["securityDefinitions"] = map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}, "basic_sc": map[string]any{"scheme": "basic", "in": "header"}}
	td["security"] = []any{"basic_sc"}
	return td
}

// createToken makes a token through POST /api/tokens with the admin token
// and returns its secret and id.
func createToken(t *testing.T, h *testHub, scope, expires string) (secret, id string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"name": scope, "scope": scope, "expires": expires})
	resp, b := h.do(http.MethodPost, "/api/tokens", "application/json", body, testToken)
	var v struct{ Token, ID, Scope string }
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &v) != nil || v.Token == "" || v.Scope != scope {
		t.Fatalf("POST /api/tokens %s: %d %s", scope, resp.StatusCode, b)
	}
	return v.Token, v.ID
}

// accessOps are the interactions every door is asked for.
var accessOps = []string{"readproperty", "subscribeevent", "writeproperty", "invokeaction"}

// httpDoor asks the HTTP proxy for op on id with token ("" anonymous):
// true when it was done, false when refused (401/403 with a problem body);
// any other answer fails the test.
func httpDoor(t *testing.T, h *testHub, token, id, op string) bool {
	t.Helper()
	base := "/proxy/" + url.PathEscape(id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var req *http.Request
	switch op {
	case "readproperty":
		req, _ = http.NewRequestWithContext(ctx, "GET", h.URL+base+"/properties/temp", nil)
	case "subscribeevent":
		req, _ = http.NewRequestWithContext(ctx, "GET", h.URL+base+"/events/alarm", nil)
		req.Header.Set("Accept", "text/event-stream")
	case "writeproperty":
		req, _ = http.NewRequestWithContext(ctx, "PUT", h.URL+base+"/properties/mode", strings.NewReader(`"eco"`))
		req.Header.Set("Content-Type", "application/json")
	case "invokeaction":
		req, _ = http.NewRequestWithContext(ctx, "POST", h.URL+base+"/actions/add", strings.NewReader(`{"a":1,"b":2}`))
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("HTTP %s %s: %v", op, id, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusNoContent:
		return true // an event stream is cancelled by the deferred cancel
	case http.StatusUnauthorized, http.StatusForbidden:
		var p lmos.Problem
		if resp.Header.Get("Content-Type") != lmos.MediaProblem || json.NewDecoder(resp.Body).Decode(&p) != nil || p.Status != resp.StatusCode {
			t.Fatalf("HTTP %s %s: %d without a problem body", op, id, resp.StatusCode)
		}
		if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("HTTP %s %s: 401 without WWW-Authenticate", op, id)
		}
		return false
	}
	t.Fatalf("HTTP %s %s: unexpected status %d", op, id, resp.StatusCode)
	return false
}

// mqttDoor asks over MQTT 5 with mosquitto_sub/mosquitto_pub: a property
// read and an event subscription are SUBSCRIBEs (-E: exit once the SUBACK
// is in), a write and an invocation QoS 1 PUBLISHes. Refused means the
// client reported a denied subscription, a PUBACK Not authorized, or a
// CONNACK Bad User Name or Password; any other complaint fails the test.
func mqttDoor(t *testing.T, h *testHub, token, id, op string) bool {
	t.Helper()
	if token != "" {
		return mqttDoorAs(t, h, "token", token, id, op)
	}
	return mqttDoorAs(t, h, "", "", id, op)
}

// mqttDoorAs is mqttDoor connected as user with password pass (a Thing's
// credentials; "" anonymous).
func mqttDoorAs(t *testing.T, h *testHub, user, pass, id, op string) bool {
	t.Helper()
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	args := []string{"-h", host, "-p", port, "-V", "mqttv5"}
	if user != "" {
		args = append(args, "-u", user, "-P", pass)
	}
	topic := func(rest string) string { return lmos.ThingTopic(id, rest) }
	bin := "mosquitto_pub"
	switch op {
	case "readproperty":
		bin, args = "mosquitto_sub", append(args, "-E", "-t", topic("properties/temp"))
	case "subscribeevent":
		bin, args = "mosquitto_sub", append(args, "-E", "-t", topic("events/alarm"))
	case "writeproperty":
		args = append(args, "-q", "1", "-t", topic("properties/mode/set"), "-m", `"eco"`)
	case "invokeaction":
		args = append(args, "-q", "1", "-t", topic("actions/add"), "-m", `{"a":1,"b":2}`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mosquittoTool(t, bin), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	msg := stderr.String()
	switch {
	case err == nil && msg == "" && len(out) == 0:
		return true
	case strings.Contains(msg, "All subscription requests were denied"),
		strings.Contains(msg, "Publish 1 failed: Not authorized"),
		strings.Contains(msg, "Bad User Name or Password"):
		return false
	}
	t.Fatalf("%s %v: %v, stdout %q, stderr %q", bin, args, err, out, msg)
	return false
}

// wsConsumer is a WebSocket consumer connection; nil when the upgrade was
// refused (401).
func wsConsumer(t *testing.T, h *testHub, token string, inQuery bool) *wsClient {
	t.Helper()
	path, hdr := "/ws", http.Header{}
	switch {
	case token != "" && inQuery:
		path += "?token=" + url.QueryEscape(token)
	case token != "":
		hdr.Set("Authorization", "Bearer "+token)
	}
	c, err := h.wsDialErr(path, "lmosprotocol", hdr)
	if err != nil {
		if !strings.Contains(err.Error(), "HTTP 401") {
			t.Fatalf("dial /ws: %v", err)
		}
		return nil
	}
	return h.wsWrap(c)
}

// wsDoor asks over the LMOS WebSocket envelope: refused is an error
// message with status 401 or 403 (or a refused upgrade).
func wsDoor(t *testing.T, w *wsClient, id, op string) bool {
	t.Helper()
	if w == nil {
		return false
	}
	var m map[string]any
	switch op {
	case "readproperty":
		m = map[string]any{"messageType": "readProperty", "thingId": id, "name": "temp"}
	case "subscribeevent":
		m = map[string]any{"messageType": "subscribeEvent", "thingId": id, "event": "alarm"}
	case "writeproperty":
		m = map[string]any{"messageType": "writeProperty", "thingId": id, "name": "mode", "value": "eco"}
	case "invokeaction":
		m = map[string]any{"messageType": "invokeAction", "thingId": id, "action": "add", "input": map[string]any{"a": 1, "b": 2}}
	}
	r := w.reply(w.send(m, false))
	switch r["messageType"] {
	case "propertyReading", "acknowledgement":
		if op == "subscribeevent" {
			w.reply(w.send(map[string]any{"messageType": "unsubscribeEvent", "thingId": id, "event": "alarm"}, false))
		}
		return true
	case "actionStatus":
		if r["status"] != "completed" {
			t.Fatalf("ws %s %s: %v", op, id, r)
		}
		return true
	case "error":
		if st, _ := r["status"].(float64); st == 401 || st == 403 {
			return false
		}
	}
	t.Fatalf("ws %s %s: unexpected %v", op, id, r)
	return false
}

// The same table of (consumer, operation, Thing) → allowed or refused on
// HTTP, MQTT and WebSocket, with access.anonymous: read; a refused write
// or invocation reaches no Thing on any door.
func TestAccessSameOnEveryDoor(t *testing.T) {
	mosquittoTool(t, "mosquitto_pub")
	h := startHub(t, func(c *Config) { c.Access.Anonymous = "read" })
	const openID, lockID = "urn:uuid:3c6a1f52-0000-4000-8000-00000000ac01", "urn:uuid:3c6a1f52-0000-4000-8000-00000000ac02"
	agents := map[string]*wsAgent{openID: h.startWSAgent(openID, false), lockID: h.startWSAgentTD(lockID, securedWSTD(lockID), false)}
	readTok, _ := createToken(t, h, "read", "")
	opTok, _ := createToken(t, h, "operate", "30d")
	revTok, revID := createToken(t, h, "admin", "")
	if resp, b := h.do(http.MethodDelete, "/api/tokens/"+revID, "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", resp.StatusCode, b)
	}
	type consumer struct {
		name, token string
		inQuery     bool // the WebSocket carries the token in ?token=
		// thing: the consumer is a Thing of that id prefix, over MQTT with
		// its join's credentials and over WebSocket as the socket that
		// registered it (HTTP has no Thing principal); admit: an admin
		// wrote it after it joined by itself (join.mode open).
		thing string
		admit bool
	}
	consumers := []consumer{{name: "anonymous"}, {name: "read", token: readTok}, {name: "operate", token: opTok, inQuery: true}, {name: "revoked", token: revTok},
		{name: "self-joined thing", thing: "urn:example:door-self"}, {name: "admitted thing", thing: "urn:example:door-picked", admit: true}}
	// The decisions, written out (not computed by the policy under test).
	allowed := map[string]bool{}
	for _, op := range accessOps {
		reads := op == "readproperty" || op == "subscribeevent"
		allowed["anonymous|"+op+"|open"] = reads
		allowed["read|"+op+"|open"] = reads
		allowed["operate|"+op+"|open"] = true
		allowed["operate|"+op+"|lock"] = true
		// A Thing the hub picked is operate; one that joined by itself
		// is anonymous (here read).
		allowed["admitted thing|"+op+"|open"] = true
		allowed["admitted thing|"+op+"|lock"] = true
		allowed["self-joined thing|"+op+"|open"] = reads
		// lock (security required): refused to anonymous and read on
		// every operation; revoked: refused everything.
	}
	// MQTT 3.1.1 has no PUBACK reason code: a refused publish is
	// acknowledged and dropped (as mosquitto does). Sent first, so that a
	// leak would have reached the agents by the count at the end.
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	for _, pub := range [][]string{
		{"-t", lmos.ThingTopic(openID, "properties/mode/set"), "-m", `"eco"`},
		{"-t", lmos.ThingTopic(lockID, "actions/add"), "-m", `{"a":1,"b":2}`},
		{"-u", "token", "-P", readTok, "-t", lmos.ThingTopic(openID, "actions/add"), "-m", `{"a":1,"b":2}`},
	} {
		out, err := exec.Command(mosquittoTool(t, "mosquitto_pub"), append([]string{"-h", host, "-p", port, "-V", "mqttv311", "-q", "1"}, pub...)...).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Fatalf("mosquitto_pub -V mqttv311 %v: %v %q", pub, err, out)
		}
	}
	done := map[string]int{} // writes and invocations allowed, per Thing
	for _, c := range consumers {
		ws := wsConsumer(t, h, c.token, c.inQuery)
		if (ws == nil) != (c.name == "revoked") {
			t.Fatalf("%s: WebSocket upgrade refused %v", c.name, ws == nil)
		}
		var creds joinCreds
		if c.thing != "" {
			mqttID, wsID := c.thing+"-mqtt", c.thing+"-ws"
			creds = h.mqttDial(nil).join(mqttID, makeTD(mqttID, c.name))
			if r := ws.reply(ws.send(map[string]any{"messageType": "registerThing", "thingId": wsID, "td": wsTD(wsID)}, false)); r["messageType"] != "acknowledgement" {
				t.Fatalf("%s: registerThing: %v", c.name, r)
			}
			for _, id := range []string{mqttID, wsID} {
				if !c.admit {
					continue
				}
				if resp, b := h.do(http.MethodPatch, lmos.ThingPath(id), "application/merge-patch+json", []byte(`{}`), testToken); resp.StatusCode != http.StatusNoContent {
					t.Fatalf("admin PATCH %s: %d %s", id, resp.StatusCode, b)
				}
			}
		}
		for _, thing := range []string{"open", "lock"} {
			id := map[string]string{"open": openID, "lock": lockID}[thing]
			for _, op := range accessOps {
				key := c.name + "|" + op + "|" + thing
				want := allowed[key]
				var got map[string]bool
				if c.thing != "" {
					got = map[string]bool{"mqtt": mqttDoorAs(t, h, creds.Username, creds.Password, id, op), "ws": wsDoor(t, ws, id, op)}
				} else {
					got = map[string]bool{
						"http": httpDoor(t, h, c.token, id, op),
						"mqtt": mqttDoor(t, h, c.token, id, op),
						"ws":   wsDoor(t, ws, id, op),
					}
				}
				for door, g := range got {
					if g != want {
						t.Errorf("%s on %s: allowed %v, want %v", key, door, g, want)
					}
				}
				if want && (op == "writeproperty" || op == "invokeaction") {
					done[id+"|"+op] += len(got)
				}
			}
		}
	}
	// Nothing refused reached a Thing: each got exactly the writes and
	// invocations allowed (the MQTT ones are forwarded to the WebSocket
	// agents by the hub, so wait for them).
	for id, a := range agents {
		for op, typ := range map[string]string{"writeproperty": "writeProperty", "invokeaction": "invokeAction"} {
			want := done[id+"|"+op]
			deadline := time.Now().Add(5 * time.Second)
			for len(a.requests(typ)) < want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := len(a.requests(typ)); got != want {
				t.Errorf("%s got %d %s requests, want %d", id, got, typ, want)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("%d decisions alike on HTTP, MQTT and WebSocket (Things: MQTT and WebSocket)", len(consumers)*2*len(accessOps))

}

// metricValue reads one counter from /metrics (0 when absent).
func metricValue(t *testing.T, h *testHub, series string) int {
	t.Helper()
	_, b := h.do(http.MethodGet, "/metrics", "", nil, "")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

// access.anonymous: none refuses every read to clients without
// credentials on every door (counted), while an agent may still join and a
// read token reads.
func TestAccessAnonymousNoneRefusesReads(t *testing.T) {
	mosquittoTool(t, "mosquitto_sub")
	h := startHub(t, func(c *Config) { c.Access.Anonymous = "none" })
	const id = "urn:uuid:3c6a1f52-0000-4000-8000-00000000ac10"
	h.startWSAgent(id, false) // joining is the join policy's, not access's
	// HTTP: the directory, the dashboard's status and the proxy.
	for _, path := range []string{"/things", "/things/" + url.PathEscape(id), "/api/status", "/.well-known/wot"} {
		resp, body := h.do(http.MethodGet, path, "", nil, "")
		expectProblem(t, resp, body, http.StatusUnauthorized, "bearer token is required")
	}
	if httpDoor(t, h, "", id, "readproperty") || httpDoor(t, h, "", id, "subscribeevent") {
		t.Error("HTTP proxy reads allowed to an anonymous client")
	}
	// MQTT: the retained TDs and the property.
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	cmd := exec.Command(mosquittoTool(t, "mosquitto_sub"), "-h", host, "-p", port, "-V", "mqttv5", "-E", "-t", "lmos/v1/things/+/td")
	if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), "All subscription requests were denied") {
		t.Errorf("mosquitto_sub lmos/v1/things/+/td: %q, want denied", out)
	}
	// The change feed is a directory read too; the hub's status stays open
	// (an agent finds the directory there).
	for topic, denied := range map[string]bool{lmos.HubEventsTopic: true, lmos.HubStatusTopic: false} {
		cmd := exec.Command(mosquittoTool(t, "mosquitto_sub"), "-h", host, "-p", port, "-V", "mqttv5", "-E", "-t", topic)
		out, err := cmd.CombinedOutput()
		if got := strings.Contains(string(out), "All subscription requests were denied"); got != denied || (!denied && (err != nil || len(out) > 0)) {
			t.Errorf("mosquitto_sub %s: %v %q, want denied %v", topic, err, out, denied)
		}
	}
	if mqttDoor(t, h, "", id, "readproperty") || mqttDoor(t, h, "", id, "subscribeevent") {
		t.Error("MQTT reads allowed to an anonymous client")
	}
	// WebSocket.
	ws := wsConsumer(t, h, "", false)
	if wsDoor(t, ws, id, "readproperty") || wsDoor(t, ws, id, "subscribeevent") {
		t.Error("WebSocket reads allowed to an anonymous client")
	}
	for _, door := range []string{"http", "mqtt", "ws"} {
		if n := metricValue(t, h, fmt.Sprintf(`lmos_%s_refused_total{reason="unauthorized"}`, door)); n == 0 {
			t.Errorf("lmos_%s_refused_total{reason=\"unauthorized\"} not counted", door)
		}
	}
	// A read token reads on every door.
	tok, _ := createToken(t, h, "read", "")
	if resp, _ := h.do(http.MethodGet, "/things", "", nil, tok); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /things with a read token: %d", resp.StatusCode)
	}
	if !httpDoor(t, h, tok, id, "readproperty") || !mqttDoor(t, h, tok, id, "readproperty") || !wsDoor(t, wsConsumer(t, h, tok, true), id, "readproperty") {
		t.Error("a read token cannot read")
	}
}

// A token that expires is refused from then on by every door, also on a
// WebSocket connection opened while it was valid; what it did before
// stands, nothing after reaches the Thing.
func TestAccessExpiredTokenRefusedOnEveryDoor(t *testing.T) {
	mosquittoTool(t, "mosquitto_pub")
	h := startHub(t, func(c *Config) { c.Access.Anonymous = "none" })
	const id = "urn:uuid:3c6a1f52-0000-4000-8000-00000000ac20"
	agent := h.startWSAgent(id, false)
	tok, _ := createToken(t, h, "operate", "1s")
	open := wsConsumer(t, h, tok, false)
	if !wsDoor(t, open, id, "invokeaction") {
		t.Fatal("invocation before the expiry refused")
	}
	waitFor(t, 5*time.Second, "the token to expire", func() bool {
		resp, _ := h.do(http.MethodGet, "/things", "", nil, tok)
		return resp.StatusCode == http.StatusUnauthorized
	})
	resp, body := h.request(http.MethodPost, "/proxy/"+url.PathEscape(id)+"/actions/add", "application/json", "", []byte(`{"a":1,"b":2}`), tok)
	expectProblem(t, resp, body, http.StatusUnauthorized, "expired")
	if mqttDoor(t, h, tok, id, "invokeaction") {
		t.Error("MQTT: an expired token invoked")
	}
	if wsDoor(t, open, id, "invokeaction") {
		t.Error("WebSocket: an open connection invoked with its expired token")
	}
	if wsConsumer(t, h, tok, true) != nil {
		t.Error("WebSocket: upgrade with an expired token accepted")
	}
	if n := len(agent.requests("invokeAction")); n != 1 {
		t.Errorf("the Thing got %d invocations, want the 1 made before the expiry", n)
	}
}

// An anonymous connection holding a Thing's MQTT client id does not lock
// the Thing out: anonymous sessions are never persistent, so the Thing,
// with its credentials, takes the id over (mosquitto_sub both sides).
func TestThingTakesItsClientIDFromAnonymous(t *testing.T) {
	sub := mosquittoTool(t, "mosquitto_sub")
	h := startHub(t, nil)
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	const id, cid = "urn:example:takeover", "takeover-thing"
	creds := h.mqttDial(nil).join(id, makeTD(id, "Takeover"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The squatter: anonymous, the Thing's client id, until taken over.
	squat := exec.CommandContext(ctx, sub, "-h", host, "-p", port, "-V", "mqttv5", "-i", cid, "-t", "lmos/v1/hub/status", "-C", "2")
	stdout, err := squat.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var squatErr bytes.Buffer
	squat.Stderr = &squatErr
	if err := squat.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 1)
	if _, err := stdout.Read(line); err != nil { // the retained hub status: it is connected
		t.Fatalf("the squatter got nothing: %v %s", err, squatErr.String())
	}
	out, err := exec.CommandContext(ctx, sub, "-h", host, "-p", port, "-V", "mqttv5", "-i", cid, "-u", creds.Username, "-P", creds.Password,
		"-E", "-t", lmos.ThingTopic(id, "actions/+")).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("the Thing with its credentials and client id: %v %q", err, out)
	}
	// The squatter's connection was ended (session taken over).
	cancel()
	_ = squat.Wait()
}

// mosquittoLines runs mosquitto_sub and hands its stdout lines on a
// channel (closed when it exits); stderr is kept for the report.
func mosquittoLines(t *testing.T, ctx context.Context, args ...string) (<-chan string, *bytes.Buffer, *exec.Cmd) {
	t.Helper()
	cmd := exec.CommandContext(ctx, mosquittoTool(t, "mosquitto_sub"), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		buf := make([]byte, 4096)
		var acc []byte
		for {
			n, err := stdout.Read(buf)
			acc = append(acc, buf[:n]...)
			for {
				i := bytes.IndexByte(acc, '\n')
				if i < 0 {
					break
				}
				lines <- string(acc[:i])
				acc = acc[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	return lines, &stderr, cmd
}

// A token revoked while an MQTT subscriber holds a subscription with it
// stops its deliveries at once: the next event of a Thing that requires
// security reaches a witness with a valid token, not the revoked one.
func TestAccessRevokedTokenStopsMQTTDeliveries(t *testing.T) {
	mosquittoTool(t, "mosquitto_sub")
	h := startHub(t, nil)
	const id = "urn:uuid:3c6a1f52-0000-4000-8000-00000000ac30"
	agent := h.startWSAgentTD(id, securedWSTD(id), false)
	revTok, revID := createToken(t, h, "operate", "")
	witTok, _ := createToken(t, h, "operate", "")
	host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := lmos.ThingTopic(id, "events/alarm")
	subscribers := 0
	sub := func(tok, cid string) (<-chan string, *bytes.Buffer, *exec.Cmd) {
		lines, stderr, cmd := mosquittoLines(t, ctx, "-h", host, "-p", port, "-V", "mqttv5", "-i", cid, "-u", "token", "-P", tok,
			"-t", topic, "-t", "lmos/v1/clients/"+cid+"/marker")
		subscribers++
		waitFor(t, 5*time.Second, "the subscription", func() bool {
			return h.Main.Broker.Subscribers(topic) == subscribers && h.Main.Broker.Subscribers("lmos/v1/clients/"+cid+"/marker") == 1
		})
		return lines, stderr, cmd
	}
	next := func(lines <-chan string, what string) string {
		t.Helper()
		for l := range lines {
			if l == "1" || l == "2" || l == "M" {
				return l
			}
		}
		t.Fatalf("%s: mosquitto_sub ended", what)
		return ""
	}
	revoked, revErr, _ := sub(revTok, "revoked-sub")
	witness, _, _ := sub(witTok, "witness-sub")
	agent.emit("alarm", 1)
	if got := next(revoked, "before the revocation"); got != "1" {
		t.Fatalf("before the revocation: %q", got)
	}
	next(witness, "witness, first event")
	if resp, b := h.do(http.MethodDelete, "/api/tokens/"+revID, "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", resp.StatusCode, b)
	}
	agent.emit("alarm", 2)
	if got := next(witness, "witness, second event"); got != "2" {
		t.Fatalf("witness: %q", got)
	}
	// The witness has the event, so the fan-out has passed the revoked
	// subscriber too; a marker in its inbox (which its token does not
	// govern) comes after anything that went to it.
	if out, err := exec.CommandContext(ctx, mosquittoTool(t, "mosquitto_pub"), "-h", host, "-p", port, "-V", "mqttv5",
		"-t", "lmos/v1/clients/revoked-sub/marker", "-m", "M").CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("marker: %v %q", err, out)
	}
	if l := next(revoked, "the revoked subscriber"); l != "M" {
		t.Fatalf("the revoked token's subscriber got %q after the revocation\n%s", l, revErr.String())
	}
}

// Only Things the hub picked operate Things that require security
// (PROTOCOL §10 "Access"). On a default hub (join.mode open) anyone may
// join, so a WebSocket agent (registerThing on its own socket) and an MQTT
// agent (its issued credentials, mosquitto_pub) that joined by themselves
// are refused like anonymous clients (403, counted) and the secured lock
// receives nothing; an admin's write of their descriptions admits them.
// Under join.mode approve, agents whose joins an admin approved (a waiting
// paho agent gets its credentials then) invoke the lock without a token,
// and anonymous clients may read, not operate.
func TestAccessThingsOperateSecuredThings(t *testing.T) {
	pub := mosquittoTool(t, "mosquitto_pub")
	pahoPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const lockID, wsID, mqttID = "urn:uuid:3c6a1f52-0000-4000-8000-00000000ac40", "urn:uuid:3c6a1f52-0000-4000-8000-00000000ac41", "urn:example:access-mqtt-agent"
	// invokeWS invokes the lock as caller's Thing: true when completed,
	// false when refused with 403; anything else fails the test.
	invokeWS := func(caller *wsAgent) bool {
		t.Helper()
		mid := caller.send(map[string]any{"messageType": "invokeAction", "thingId": lockID, "action": "add", "input": map[string]any{"a": 1, "b": 2}}, false)
		var reply map[string]any
		waitFor(t, 5*time.Second, "the reply to the agent's invocation", func() bool {
			for _, typ := range []string{"actionStatus", "error"} {
				for _, m := range caller.requests(typ) {
					if m["correlationId"] == mid {
						reply = m
					}
				}
			}
			return reply != nil
		})
		switch {
		case reply["messageType"] == "actionStatus" && reply["status"] == "completed":
			return true
		case reply["messageType"] == "error" && reply["status"] == float64(403):
			if typ, _ := reply["type"].(string); !strings.HasSuffix(typ, "#forbidden") || !strings.Contains(fmt.Sprint(reply["detail"]), "joined by itself") {
				t.Fatalf("the refusal's problem: %v", reply)
			}
			return false
		}
		t.Fatalf("invokeAction by %s: %v", caller.id, reply)
		return false
	}
	// invokeMQTT invokes the lock with mosquitto_pub (MQTT 5, QoS 1) and
	// a Thing's credentials: true on success, false on the PUBACK's Not
	// authorized; any other complaint fails the test.
	invokeMQTT := func(h *testHub, user, pass string) bool {
		t.Helper()
		host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
		out, err := exec.CommandContext(ctx, pub, "-h", host, "-p", port, "-V", "mqttv5", "-u", user, "-P", pass,
			"-q", "1", "-t", lmos.ThingTopic(lockID, "actions/add"), "-m", `{"a":1,"b":2}`).CombinedOutput()
		switch {
		case err == nil && len(out) == 0:
			return true
		case strings.Contains(string(out), "Publish 1 failed: Not authorized"):
			return false
		}
		t.Fatalf("mosquitto_pub as %s: %v %q", user, err, out)
		return false
	}
	invocations := func(lock *wsAgent, want int) {
		t.Helper()
		waitFor(t, 5*time.Second, "the invocations at the lock", func() bool { return len(lock.requests("invokeAction")) >= want })
		if n := len(lock.requests("invokeAction")); n != want {
			t.Fatalf("the lock got %d invocations, want %d", n, want)
		}
	}

	// join.mode open: Things that joined by themselves.
	h := startHub(t, nil)
	lock := h.startWSAgentTD(lockID, securedWSTD(lockID), false)
	caller := h.startWSAgent(wsID, false)
	creds := h.mqttDial(nil).join(mqttID, makeTD(mqttID, "Caller"))
	if invokeWS(caller) {
		t.Fatal("a WebSocket agent that joined by itself under join.mode open invoked a Thing that requires security")
	}
	if invokeMQTT(h, creds.Username, creds.Password) {
		t.Fatal("an MQTT Thing that joined by itself under join.mode open invoked a Thing that requires security")
	}
	if wsDoor(t, wsConsumer(t, h, "", false), lockID, "invokeaction") {
		t.Fatal("an anonymous WebSocket consumer invoked a Thing that requires security")
	}
	if mqttDoor(t, h, "", lockID, "invokeaction") {
		t.Fatal("an anonymous MQTT client invoked a Thing that requires security")
	}
	for _, door := range []string{"ws", "mqtt"} {
		if n := h.refusals(fmt.Sprintf(`lmos_%s_refused_total{reason="forbidden"}`, door)); n != 1 {
			t.Errorf("lmos_%s_refused_total{reason=\"forbidden\"} = %d, want the self-joined Thing's 1", door, n)
		}
	}
	// On a nosec Thing it keeps what anonymous clients have (operate).
	if !wsDoor(t, wsConsumer(t, h, "", false), wsID, "invokeaction") {
		t.Fatal("an anonymous consumer may not invoke a nosec Thing on a default hub")
	}
	// An admin's write of their descriptions admits them, while they stay
	// connected.
	for _, id := range []string{wsID, mqttID} {
		if resp, body := h.do(http.MethodPatch, lmos.ThingPath(id), "application/merge-patch+json", []byte(`{}`), testToken); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("admin PATCH %s: %d %s", id, resp.StatusCode, body)
		}
	}
	if !invokeWS(caller) || !invokeMQTT(h, creds.Username, creds.Password) {
		t.Fatal("a Thing an admin wrote may not operate a Thing that requires security")
	}
	invocations(lock, 2) // the admitted two; none of the refused ones

	// join.mode approve: approved Things operate it.
	h2 := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	h2.permit("60")
	lock2 := h2.startWSAgentTD(lockID, securedWSTD(lockID), false)
	h2.permit("0")
	caller2 := h2.startWSAgent(wsID, false) // acknowledged "pending"
	py := startScript(t, ctx, "paho-mqtt waiting agent", "paho_join_wait.py", "mqtt://"+h2.Main.MQTTAddr.String(), mqttID)
	if r := resultOf(py.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil })); r.Status != lmos.JoinPending {
		t.Fatalf("the MQTT agent's join: %+v, want pending", r)
	}
	h2.decide(wsID, "approve", http.StatusNoContent)
	h2.decide(mqttID, "approve", http.StatusNoContent)
	waitFor(t, 5*time.Second, "the WebSocket agent's registration", func() bool {
		for _, m := range caller2.requests("acknowledgement") {
			if m["message"] == "registered" {
				return true
			}
		}
		return false
	})
	r := resultOf(py.next(10*time.Second, func(m map[string]any) bool { return m["result"] != nil }))
	if r.Status != lmos.JoinAccepted || r.Credentials == nil {
		t.Fatalf("the MQTT agent after approval: %+v", r)
	}
	if !invokeWS(caller2) {
		t.Fatal("an approved WebSocket agent may not operate a Thing that requires security")
	}
	if !invokeMQTT(h2, r.Credentials.Username, r.Credentials.Password) {
		t.Fatal("an approved MQTT Thing may not operate a Thing that requires security")
	}
	invocations(lock2, 2)
	py.exit()
	var st struct {
		Access struct{ Anonymous string }
	}
	h2.getJSON("/api/status", http.StatusOK, &st)
	if st.Access.Anonymous != "read" {
		t.Fatalf("/api/status access.anonymous %q under join.mode approve, want read", st.Access.Anonymous)
	}
	if mqttDoor(t, h2, "", lockID, "invokeaction") || wsDoor(t, wsConsumer(t, h2, "", false), lockID, "invokeaction") {
		t.Fatal("an anonymous client operated a Thing under join.mode approve")
	}
}
