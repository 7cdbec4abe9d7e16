package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// An admin's decisions reach a Thing on every door: approval meets a key
// binding, eviction sends a member back to approval, deleting a Thing or
// revoking a token ends the rights and the streams it held, the join mode
// governs a proof-signed PUT; over MQTT with a strict client (Python Paho
// 1.6.1) and over WebSocket.

// pendingIDs is the admin's view of the pending list: its ids.
func (h *testHub) pendingIDs() []string {
	h.t.Helper()
	var st struct {
		List []struct{ ID string }
	}
	resp, body := h.do(http.MethodGet, "/api/join", "", nil, testToken)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
		h.t.Fatalf("GET /api/join: %d %s", resp.StatusCode, body)
	}
	var ids []string
	for _, p := range st.List {
		ids = append(ids, p.ID)
	}
	return ids
}

// permit opens (or with 0 closes) the permit-join window.
func (h *testHub) permit(seconds string) {
	h.t.Helper()
	if resp, body := h.do(http.MethodPost, "/api/join/permit", "application/json", []byte(`{"seconds": `+seconds+`}`), testToken); resp.StatusCode != http.StatusOK {
		h.t.Fatalf("permit %s: %d %s", seconds, resp.StatusCode, body)
	}
}

// Under join mode approve, a join of a bound id (its Thing deregistered:
// the binding outlives it) by another key is rejected at once (403) and
// never reaches the pending list; the owner's fresh join waits, and its
// approval registers the Thing verified by the owner's key.
func TestApproveMeetsBindingOverMQTT(t *testing.T) {
	pahoPython(t)
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	owner, other := newSigningKey(t), newSigningKey(t)
	id := "urn:example:revocation-bound"
	h.permit("60")
	res := joinOverPaho(t, h, id, signedTD(t, id, "Plug", owner, time.Now().Add(-time.Minute)))
	if res.Status != lmos.JoinAccepted || res.Credentials == nil {
		t.Fatalf("signed join in the permit window: %+v", res)
	}
	h.permit("0")
	if res := joinOverPaho(t, h, id, nil, res.Credentials.Username, res.Credentials.Password); res.Status != lmos.JoinDeleted {
		t.Fatalf("deregistration: %+v", res)
	}
	res = joinOverPaho(t, h, id, signedTD(t, id, "Evil", other, time.Now()))
	if res.Status != lmos.JoinRejected || res.Problem == nil || res.Problem.Status != 403 {
		t.Fatalf("another key's join of the bound id: %+v, want rejected 403", res)
	}
	if ids := h.pendingIDs(); len(ids) != 0 {
		t.Fatalf("pending after another key's join: %v", ids)
	}
	if res := joinOverPaho(t, h, id, signedTD(t, id, "Plug", owner, time.Now())); res.Status != lmos.JoinPending {
		t.Fatalf("the owner's fresh join: %+v, want pending", res)
	}
	// The admin sees which key an approval binds the id to.
	if l := h.joinList(); len(l.List) != 1 || l.List[0].Signer != keyDID(owner) {
		t.Fatalf("GET /api/join: %+v, want the pending join signed by %s", l.List, keyDID(owner))
	}
	if resp, body := h.do(http.MethodPost, "/api/join/pending/"+id+"/approve", "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("approve: %d %s", resp.StatusCode, body)
	}
	var doc map[string]any
	h.getJSON(lmos.ThingPath(id), http.StatusOK, &doc)
	if doc["lmos:verified"] != keyDID(owner) || doc["title"] != "Plug" {
		t.Fatalf("approved Thing: title %v, lmos:verified %v; want Plug by %s", doc["title"], doc["lmos:verified"], keyDID(owner))
	}
}

// An admin deletes a member of an approve hub over HTTP (its MQTT
// credential stays, so an agent whose Thing expired can come back): the
// member's next join with that credential waits for approval like any
// new Thing's instead of registering it again.
func TestEvictedMemberWaitsForApprovalOverMQTT(t *testing.T) {
	pahoPython(t)
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	id := "urn:example:revocation-evicted"
	h.permit("60")
	res := joinOverPaho(t, h, id, makeTD(id, "Member"))
	if res.Status != lmos.JoinAccepted || res.Credentials == nil {
		t.Fatalf("join in the permit window: %+v", res)
	}
	h.permit("0")
	if resp, body := h.do(http.MethodDelete, lmos.ThingPath(id), "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("admin delete: %d %s", resp.StatusCode, body)
	}
	again := joinOverPaho(t, h, id, makeTD(id, "Back"), res.Credentials.Username, res.Credentials.Password)
	if again.Status != lmos.JoinPending || again.Credentials != nil {
		t.Fatalf("the evicted member's join: %+v, want pending", again)
	}
	if resp, _ := h.do(http.MethodGet, lmos.ThingPath(id), "", nil, ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the evicted member is back in the directory: %d", resp.StatusCode)
	}
	if ids := h.pendingIDs(); len(ids) != 1 || ids[0] != id {
		t.Fatalf("pending: %v", ids)
	}
}

// A Thing the admin deleted is no authenticated Thing any more, even one
// the admin had admitted: its MQTT
// credential (kept so that it may re-join) and the WebSocket connection
// that registered it lose a Thing's right to operate Things that require
// security (mosquitto_pub with the credential, the agent's own socket),
// as an anonymous client has none; before the deletion both could.
func TestDeletedThingLosesThingRights(t *testing.T) {
	mosquittoTool(t, "mosquitto_pub")
	h := startHub(t, nil)
	const lockID, wsID, mqttID = "urn:uuid:3c6a1f52-0000-4000-8000-00000000ad40", "urn:uuid:3c6a1f52-0000-4000-8000-00000000ad41", "urn:example:revocation-deleted-caller"
	lock := h.startWSAgentTD(lockID, securedWSTD(lockID), false)
	caller := h.startWSAgent(wsID, false)
	creds := h.mqttDial(nil).join(mqttID, makeTD(mqttID, "Caller"))
	// Joined by themselves under join.mode open: an admin's write admits
	// them, so they may operate secured Things (PROTOCOL §10 "Access").
	for _, id := range []string{wsID, mqttID} {
		if resp, body := h.do(http.MethodPatch, lmos.ThingPath(id), "application/merge-patch+json", []byte(`{}`), testToken); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("admin PATCH %s: %d %s", id, resp.StatusCode, body)
		}
	}
	invoke := func() bool {
		host, port, _ := strings.Cut(h.Main.MQTTAddr.String(), ":")
		cmd := exec.Command(mosquittoTool(t, "mosquitto_pub"), "-h", host, "-p", port, "-V", "mqttv5", "-u", creds.Username, "-P", creds.Password,
			"-q", "1", "-t", lmos.ThingTopic(lockID, "actions/add"), "-m", `{"a":1,"b":2}`)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		switch msg := stderr.String(); {
		case err == nil && msg == "":
			return true
		case strings.Contains(msg, "Publish 1 failed: Not authorized"):
			return false
		default:
			t.Fatalf("mosquitto_pub: %v %q", err, msg)
		}
		return false
	}
	wsInvoke := func() bool {
		mid := caller.send(map[string]any{"messageType": "invokeAction", "thingId": lockID, "action": "add", "input": map[string]any{"a": 1, "b": 2}}, false)
		var ok *bool
		waitFor(t, 5*time.Second, "the answer to the agent's invocation", func() bool {
			for _, m := range caller.requests("actionStatus") {
				if m["correlationId"] == mid && m["status"] == "completed" {
					ok = new(bool)
					*ok = true
				}
			}
			for _, m := range caller.requests("error") {
				if m["correlationId"] == mid {
					ok = new(bool)
				}
			}
			return ok != nil
		})
		return *ok
	}
	if !invoke() || !wsInvoke() {
		t.Fatal("registered Things could not operate the secured Thing")
	}
	for _, id := range []string{mqttID, wsID} {
		if resp, body := h.do(http.MethodDelete, lmos.ThingPath(id), "", nil, testToken); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("admin delete %s: %d %s", id, resp.StatusCode, body)
		}
	}
	if invoke() {
		t.Error("the credential of a deleted Thing still operates a Thing that requires security")
	}
	if wsInvoke() {
		t.Error("the socket of a deleted WebSocket Thing still operates a Thing that requires security")
	}
	waitFor(t, 5*time.Second, "the lock's invocations", func() bool { return len(lock.requests("invokeAction")) >= 2 })
	if n := len(lock.requests("invokeAction")); n != 2 {
		t.Fatalf("the lock got %d invocations, want the 2 made before the deletions", n)
	}
}

// A token revoked while a WebSocket consumer holds an event subscription
// with it stops the subscription's deliveries at once (PROTOCOL §3.5: "also
// on connections opened with it"), as over MQTT: the consumer gets an
// error 401 instead of the next event. A witness with a token of its own
// gets that event, which bounds the wait.
func TestRevokedTokenEndsWebSocketSubscription(t *testing.T) {
	h := startHub(t, nil)
	const lockID = "urn:uuid:3c6a1f52-0000-4000-8000-00000000ae40"
	lock := h.startWSAgentTD(lockID, securedWSTD(lockID), false)
	revoked, revokedID := createToken(t, h, "operate", "")
	kept, _ := createToken(t, h, "operate", "")
	consumer, witness := wsConsumer(t, h, revoked, true), wsConsumer(t, h, kept, false)
	for _, c := range []*wsClient{consumer, witness} {
		if r := c.reply(c.send(map[string]any{"messageType": "subscribeEvent", "thingId": lockID, "event": "alarm"}, false)); r["messageType"] != "acknowledgement" {
			t.Fatalf("subscribe: %v", r)
		}
	}
	isEvent := func(n float64) func(map[string]any) bool {
		return func(m map[string]any) bool { return m["messageType"] == "event" && m["data"] == n }
	}
	lock.emit("alarm", 1)
	consumer.next(isEvent(1))
	witness.next(isEvent(1))
	if resp, body := h.do(http.MethodDelete, "/api/tokens/"+revokedID, "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", resp.StatusCode, body)
	}
	lock.emit("alarm", 2)
	witness.next(isEvent(2))
	m := consumer.next(func(m map[string]any) bool { return m["messageType"] == "error" || isEvent(2)(m) })
	if m["messageType"] != "error" || m["status"] != float64(401) {
		t.Fatalf("after the revocation the consumer got %v, want an error 401 and no event", m)
	}
}

// A token revoked while an HTTP event stream is open with it ends the
// stream: the proxy's event stream of a Thing (operate token) and the
// directory's change feed (read token) send an error event (401) and
// close instead of the next event; witnesses with tokens of their own get
// that event, which bounds the wait.
func TestRevokedTokenEndsHTTPStreams(t *testing.T) {
	h := startHub(t, nil)
	const lockID = "urn:uuid:3c6a1f52-0000-4000-8000-00000000af40"
	lock := h.startWSAgentTD(lockID, securedWSTD(lockID), false)
	operate, operateID := createToken(t, h, "operate", "")
	read, readID := createToken(t, h, "read", "")
	keptOperate, _ := createToken(t, h, "operate", "")
	keptRead, _ := createToken(t, h, "read", "")
	proxyPath := "/proxy/" + url.PathEscape(lockID) + "/events/alarm"
	proxy, proxyWitness := h.openSSEWith(proxyPath, operate), h.openSSEWith(proxyPath, keptOperate)
	feed, feedWitness := h.openSSEWith("/events", read), h.openSSEWith("/events", keptRead)
	lock.emit("alarm", 1)
	for _, s := range []*sseStream{proxy, proxyWitness} {
		if ev := s.next(5 * time.Second); ev.Type != "alarm" || ev.Data != "1" {
			t.Fatalf("proxy stream before the revocation: %+v", ev)
		}
	}
	for _, id := range []string{operateID, readID} {
		if resp, body := h.do(http.MethodDelete, "/api/tokens/"+id, "", nil, testToken); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("revoke: %d %s", resp.StatusCode, body)
		}
	}
	lock.emit("alarm", 2)
	if ev := proxyWitness.next(5 * time.Second); ev.Data != "2" {
		t.Fatalf("proxy witness: %+v", ev)
	}
	h.put("urn:example:revocation-feed", makeTD("urn:example:revocation-feed", "Feed"))
	if ev := feedWitness.next(5 * time.Second); ev.Type != "thing_created" {
		t.Fatalf("feed witness: %+v", ev)
	}
	for name, s := range map[string]*sseStream{"proxy event stream": proxy, "change feed": feed} {
		ev := s.next(5 * time.Second)
		if ev.Type != "error" || !strings.Contains(ev.Data, `"status":401`) {
			t.Errorf("%s after the revocation: %+v, want an error 401", name, ev)
			continue
		}
		select {
		case ev, ok := <-s.C:
			if ok {
				t.Errorf("%s went on after its error: %+v", name, ev)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s stayed open after its error", name)
		}
	}
}

// Under join.mode approve, an HTTP PUT without a token, authenticated by
// the proof alone, updates its own Thing but does not bring back a Thing
// the admin deleted (the binding outlives it): that is a new Thing's join,
// which the admin approves (403, nothing registered). An id the admin
// reserved for a key (re-bind, no description accepted since) is
// registered by that key's PUT, and a permit window admits the evicted
// one as an open hub does.
func TestProofPutObeysJoinMode(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	owner, reserved := newSigningKey(t), newSigningKey(t)
	id, rid := "urn:example:revocation-proofput", "urn:example:revocation-reserved"
	path := lmos.ThingPath(id)
	if resp, body := h.do(http.MethodPut, path, "application/td+json", signedTD(t, id, "Lamp", owner, time.Now().Add(-time.Minute)), testToken); resp.StatusCode != 201 {
		t.Fatalf("admin's signed PUT: %d %s", resp.StatusCode, body)
	}
	if resp, body := h.do(http.MethodPut, path, "application/td+json", signedTD(t, id, "Lamp 2", owner, time.Now().Add(-time.Second)), ""); resp.StatusCode != 204 {
		t.Fatalf("the owner's update without a token: %d %s", resp.StatusCode, body)
	}
	if resp, body := h.do(http.MethodDelete, path, "", nil, testToken); resp.StatusCode != 204 {
		t.Fatalf("admin DELETE: %d %s", resp.StatusCode, body)
	}
	resp, body := h.do(http.MethodPut, path, "application/td+json", signedTD(t, id, "Back", owner, time.Now()), "")
	expectProblem(t, resp, body, 403, "join")
	if resp, _ := h.do(http.MethodGet, path, "", nil, ""); resp.StatusCode != 404 {
		t.Fatalf("the deleted Thing is back without approval: %d", resp.StatusCode)
	}
	bindPath := "/api/things/" + pathEscape(rid) + "/binding"
	if resp, body := h.do(http.MethodPut, bindPath, "application/json", []byte(`{"did":"`+keyDID(reserved)+`"}`), testToken); resp.StatusCode != 200 {
		t.Fatalf("reserve: %d %s", resp.StatusCode, body)
	}
	if resp, body := h.do(http.MethodPut, lmos.ThingPath(rid), "application/td+json", signedTD(t, rid, "Reserved", reserved, time.Now()), ""); resp.StatusCode != 201 {
		t.Fatalf("the reserved key's PUT: %d %s", resp.StatusCode, body)
	}
	h.permit("60")
	if resp, body := h.do(http.MethodPut, path, "application/td+json", signedTD(t, id, "Back", owner, time.Now().Add(time.Millisecond)), ""); resp.StatusCode != 201 {
		t.Fatalf("the owner's PUT in a permit window: %d %s", resp.StatusCode, body)
	}
}

// Under join.mode approve, a WebSocket agent whose Thing the admin deleted
// while its socket stayed open is evicted too: its next registerThing on
// that socket waits for approval (pending) instead of registering the
// Thing again.
func TestEvictedWebSocketAgentWaitsForApproval(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	id := "urn:example:revocation-ws-evicted"
	h.permit("60")
	w := h.wsDial("lmosprotocol", nil)
	if r := wsRegister(t, w, id, makeTD(id, "Member")); r["messageType"] != "acknowledgement" || r["message"] != "registered" {
		t.Fatalf("register in the permit window: %v", r)
	}
	h.permit("0")
	if resp, body := h.do(http.MethodDelete, lmos.ThingPath(id), "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("admin delete: %d %s", resp.StatusCode, body)
	}
	if r := wsRegister(t, w, id, makeTD(id, "Back")); r["messageType"] != "acknowledgement" || r["message"] != "pending" {
		t.Fatalf("the evicted agent's registerThing: %v, want pending", r)
	}
	if resp, _ := h.do(http.MethodGet, lmos.ThingPath(id), "", nil, ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the evicted Thing is back without approval: %d", resp.StatusCode)
	}
	if ids := h.pendingIDs(); len(ids) != 1 || ids[0] != id {
		t.Fatalf("pending: %v", ids)
	}
}

// A token sent in /ws?token= (browsers cannot set headers on a WebSocket)
// is never echoed: the 401 problem of a dead one names the path without
// the query, so the secret ends up in no client log or error report.
func TestWSTokenInQueryNotEchoed(t *testing.T) {
	h := startHub(t, nil)
	secret, id := createToken(t, h, "operate", "")
	if resp, body := h.do(http.MethodDelete, "/api/tokens/"+id, "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", resp.StatusCode, body)
	}
	resp, body := h.do(http.MethodGet, "/ws?token="+url.QueryEscape(secret), "", nil, "")
	p := expectProblem(t, resp, body, http.StatusUnauthorized, "")
	if strings.Contains(string(body), secret) || p.Instance != "/ws" {
		t.Fatalf("the 401 echoes the token: instance %q, body %s", p.Instance, body)
	}
}
