package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// Issue 24, point 1: a registered Thing without a key binding is not
// anybody's to bind. A first binding of an existing Thing needs the same
// proof as any other change of it — its own connection or credential, or
// an admin — on every door; a refusal changes nothing.

// claimState is everything a stranger's claim must leave alone: the
// stored document, lmos:verified and the binding (bindingState), the
// admission, the groups and members, and the MQTT credential.
func (h *testHub) claimState(id string) string {
	h.t.Helper()
	th, err := h.Main.Registry.Get(id)
	if err != nil {
		h.t.Fatalf("the Thing %s is gone: %v", id, err)
	}
	cred, err := h.Main.Admission.HasCredential(id)
	if err != nil {
		h.t.Fatal(err)
	}
	_, groups := h.do(http.MethodGet, "/api/groups", "", nil, testToken)
	return fmt.Sprintf("%s admitted=%v groupsOf=%v groups=%s credential=%v",
		h.bindingState(id), th.Meta.Admitted, h.Main.Registry.GroupsOf(id), groups, cred)
}

// trustAndGroup makes id a Thing the hub picked (an admin's PATCH {}) and
// a member of group home, with other.
func (h *testHub) trustAndGroup(id, other string) {
	h.t.Helper()
	if resp, body := h.do(http.MethodPatch, lmos.ThingPath(id), "application/merge-patch+json", []byte(`{}`), testToken); resp.StatusCode != http.StatusNoContent {
		h.t.Fatalf("PATCH %s {}: %d %s", id, resp.StatusCode, body)
	}
	if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "home", Title: "Home", Members: []string{id, other}}); err != nil {
		h.t.Fatal(err)
	}
	if th, _ := h.Main.Registry.Get(id); !th.Meta.Admitted {
		h.t.Fatalf("%s is not admitted after the admin's PATCH", id)
	}
}

// Over WebSocket (coder/websocket): the victim registers F unsigned, an
// admin trusts it and puts it in group home, its socket closes. An
// anonymous socket's registerThing of F signed by a fresh key is refused
// (403, the rule in the problem): F stays unbound and admitted, in its
// group, offline, and the stranger's socket got no group credential and is
// no member of home. A socket may still bind the Thing it registered
// itself, on that socket.
func TestWSStrangerKeyCannotClaimAnUnsignedThing(t *testing.T) {
	h := startHub(t, nil)
	const id, other = "urn:claim:ws-f", "urn:claim:ws-b"
	victim := wsMember(t, h, id) // unsigned: the thermostat example's default
	b := wsMember(t, h, other)
	h.trustAndGroup(id, other)
	wantAck(t, groupReq(t, b, "subscribeGroup", "home", "#", nil, false), "B subscribes home/#")
	_ = victim.c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, 5*time.Second, "the victim's socket gone", func() bool { st, _ := h.Presence(id); return st == "offline" })
	want := h.claimState(id)
	forbidden := h.refusals(`lmos_ws_refused_total{reason="forbidden"}`)

	thief := newGWS(h.wsDial("lmosprotocol", nil))
	raw, _ := json.Marshal(wsTD(id))
	doc, err := proof.Sign(raw, newSigningKey(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expectWSError(t, wsRegister(t, thief.wsClient, id, doc), 403, lmos.CodeForbidden, "registered without a key binding")
	if got := h.claimState(id); got != want {
		t.Errorf("the refused claim changed the Thing:\n got %s\nwant %s", got, want)
	}
	if st, _ := h.Presence(id); st != "offline" {
		t.Errorf("presence after the refused claim: %s", st)
	}
	if n := h.refusals(`lmos_ws_refused_total{reason="forbidden"}`) - forbidden; n != 1 {
		t.Errorf("forbidden registrations counted: %d, want 1", n)
	}
	// The stranger is nobody on the group's channel: it gets and sends
	// nothing there. The answer to its subscribe comes after anything the
	// hub queued for it before.
	wantRefused(t, groupReq(t, thief, "subscribeGroup", "home", "#", nil, false), 401, "the stranger's subscribe")
	wantRefused(t, groupReq(t, thief, "publishGroup", "home", "forged", "x", false), 401, "the stranger's publish")
	for _, m := range thief.stash {
		if m["messageType"] == "groupCredential" || m["messageType"] == "groupMessage" {
			t.Errorf("the stranger got %v", m)
		}
	}
	wantAck(t, groupReq(t, b, "publishGroup", "home", "marker", 1, false), "B's marker")
	if m := groupMessages(t, b, 1)[0]; m["topic"] != "marker" {
		t.Errorf("B got %v, want only its marker", m)
	}

	// A Thing registered unsigned by a socket is bound by that same socket.
	const own = "urn:claim:ws-own"
	mine := wsMember(t, h, own)
	key := newSigningKey(t)
	raw, _ = json.Marshal(wsTD(own))
	if doc, err = proof.Sign(raw, key, time.Now()); err != nil {
		t.Fatal(err)
	}
	if r := wsRegister(t, mine.wsClient, own, doc); r["messageType"] != "acknowledgement" {
		t.Fatalf("its own socket's signed registerThing: %v", r)
	}
	var got map[string]any
	h.getJSON(lmos.ThingPath(own), 200, &got)
	if got["lmos:verified"] != keyDID(key) {
		t.Errorf("lmos:verified after its own socket signed: %v", got["lmos:verified"])
	}
}

// A socket that took an unsigned Thing over (allowed: the hub cannot tell
// its agent from anyone) has proved nothing: it may not then bind the
// Thing to its key on that socket and so become the Thing on its groups'
// channels. Nothing changes; the takeover already cost the admission.
func TestWSUnsignedTakeoverCannotBindAfterwards(t *testing.T) {
	h := startHub(t, nil)
	const id, other = "urn:claim:ws-t", "urn:claim:ws-t2"
	victim := wsMember(t, h, id)
	wsMember(t, h, other)
	h.trustAndGroup(id, other)
	_ = victim.c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, 5*time.Second, "the victim's socket gone", func() bool { st, _ := h.Presence(id); return st == "offline" })

	thief := wsMember(t, h, id) // the unsigned takeover
	if th, _ := h.Main.Registry.Get(id); th.Meta.Admitted {
		t.Fatal("an unsigned takeover kept the Thing's admission")
	}
	want := h.claimState(id)
	raw, _ := json.Marshal(wsTD(id))
	doc, err := proof.Sign(raw, newSigningKey(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expectWSError(t, wsRegister(t, thief.wsClient, id, doc), 403, lmos.CodeForbidden, "registered without a key binding")
	if got := h.claimState(id); got != want {
		t.Errorf("the refused binding changed the Thing:\n got %s\nwant %s", got, want)
	}
	wantRefused(t, groupReq(t, thief, "subscribeGroup", "home", "#", nil, false), 401, "the taken-over Thing's subscribe")
	for _, m := range thief.stash {
		if m["messageType"] == "groupCredential" {
			t.Errorf("the taken-over socket got %v", m)
		}
	}
}

// Over MQTT (paho.golang): under join.mode approve an agent's join waits;
// its connection is gone when the admin approves, so F is registered,
// admitted, without a credential (its agent's next join takes it). An
// anonymous join of F signed by a fresh key is rejected (403) without
// credentials: F stays unbound, admitted, in its group, and still holds
// no credential. From another address than the agent's, an unsigned join
// is rejected too; the agent's own join from its address takes F.
func TestMQTTStrangerKeyCannotClaimAnApprovedThing(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Join.Mode = "approve" })
	const id, other = "urn:claim:mqtt-f", "urn:claim:mqtt-b"
	tid := lmos.TopicKey(id)
	victim := h.MQTT(nil)
	if res := joinResultOf(t, victim.Join(tid, makeTD(id, "Plug"), "")); res.Status != lmos.JoinPending {
		t.Fatalf("the victim's join: %+v", res)
	}
	victim.Close()
	waitFor(t, 5*time.Second, "the victim's connection gone", func() bool { return h.Main.Broker.Clients() == 0 })
	h.decide(id, "approve", http.StatusNoContent)
	if cred, _ := h.Main.Admission.HasCredential(id); cred {
		t.Fatal("the approval issued a credential to a connection that was gone")
	}
	if _, err := h.Main.Registry.Put(context.Background(), other, makeTD(other, "B"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "home", Title: "Home", Members: []string{id, other}}); err != nil {
		t.Fatal(err)
	}
	if th, _ := h.Main.Registry.Get(id); !th.Meta.Admitted {
		t.Fatal("the approved Thing is not admitted")
	}
	want := h.claimState(id)
	forbidden := h.refusals(`lmos_mqtt_refused_total{reason="forbidden"}`)

	thief := h.MQTT(nil)
	res := joinResultOf(t, thief.Join(tid, signedTD(t, id, "Evil", newSigningKey(t), time.Now()), ""))
	if res.Status != lmos.JoinRejected || res.Credentials != nil || res.Problem == nil || res.Problem.Status != 403 ||
		res.Problem.Type != lmos.ErrorTypeBase+lmos.CodeForbidden || !strings.Contains(res.Problem.Detail, "registered without a key binding") {
		t.Fatalf("the stranger's signed join: %+v (problem %+v)", res, res.Problem)
	}
	if got := h.claimState(id); got != want {
		t.Errorf("the refused join changed the Thing:\n got %s\nwant %s", got, want)
	}
	if n := h.refusals(`lmos_mqtt_refused_total{reason="forbidden"}`) - forbidden; n != 1 {
		t.Errorf("forbidden joins counted: %d, want 1", n)
	}
	if !slices.Equal(h.Main.Registry.GroupsOf(id), []string{"home"}) {
		t.Errorf("groups of the Thing: %v", h.Main.Registry.GroupsOf(id))
	}

	// From another address, not even an unsigned join takes it: the
	// credential it would issue is the Thing's, with its groups.
	for _, c := range []struct {
		name string
		doc  []byte
	}{
		{"unsigned", makeTD(id, "Evil")},
		{"signed", signedTD(t, id, "Evil", newSigningKey(t), time.Now())},
	} {
		far, _, err := mqttclient.DialFrom(t, "127.0.0.2", h.Main.MQTTAddr.String(), nil)
		if err != nil {
			t.Fatalf("dial from 127.0.0.2: %v", err)
		}
		res := joinResultOf(t, far.Join(tid, c.doc, ""))
		if res.Status != lmos.JoinRejected || res.Credentials != nil || res.Problem == nil || res.Problem.Status != 403 ||
			res.Problem.Type != lmos.ErrorTypeBase+lmos.CodeForbidden || !strings.Contains(res.Problem.Detail, "registered from another address") {
			t.Errorf("%s join from another address: %+v (problem %+v)", c.name, res, res.Problem)
		}
		if got := h.claimState(id); got != want {
			t.Errorf("%s join from another address changed the Thing:\n got %s\nwant %s", c.name, got, want)
		}
		far.Close()
	}
	// Its agent, back from its address, takes it with a credential (the
	// approved join it missed) and keeps its admission and group.
	back := h.MQTT(nil)
	back.MustJoin(tid, makeTD(id, "Plug"))
	if th, _ := h.Main.Registry.Get(id); !th.Meta.Admitted || !slices.Equal(h.Main.Registry.GroupsOf(id), []string{"home"}) {
		t.Errorf("the agent back: admitted %v, groups %v", th.Meta.Admitted, h.Main.Registry.GroupsOf(id))
	}
}

// Over HTTP: a PUT without a token is authenticated by a proof by the
// id's bound key only, so a stranger's signed PUT of a registered unbound
// Thing is refused (401) and changes nothing; an admin's signed PUT binds
// it.
func TestHTTPStrangerKeyCannotClaimAnUnsignedThing(t *testing.T) {
	h := startHub(t, nil)
	const id, other = "urn:claim:http-f", "urn:claim:http-b"
	h.put(id, makeTD(id, "Plug"))
	h.put(other, makeTD(other, "B"))
	h.trustAndGroup(id, other)
	want := h.claimState(id)
	resp, body := h.do(http.MethodPut, lmos.ThingPath(id), "application/td+json", signedTD(t, id, "Evil", newSigningKey(t), time.Now()), "")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), lmos.ErrorTypeBase+lmos.CodeUnauthorized) {
		t.Fatalf("the stranger's signed PUT: %d %s", resp.StatusCode, body)
	}
	if got := h.claimState(id); got != want {
		t.Errorf("the refused PUT changed the Thing:\n got %s\nwant %s", got, want)
	}
	key := newSigningKey(t)
	if resp, body := h.do(http.MethodPut, lmos.ThingPath(id), "application/td+json", signedTD(t, id, "Plug", key, time.Now()), testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the admin's signed PUT: %d %s", resp.StatusCode, body)
	}
	if b, err := h.Main.Registry.Binding(id); err != nil || b.DID != keyDID(key) {
		t.Errorf("binding after the admin's PUT: %+v %v", b, err)
	}
}

func joinResultOf(t *testing.T, payload []byte) lmos.JoinResult {
	t.Helper()
	var r lmos.JoinResult
	if err := json.Unmarshal(payload, &r); err != nil {
		t.Fatalf("join result %q: %v", payload, err)
	}
	return r
}
