package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// credentialPath is a member's credential over HTTP.
func credentialPath(gid, id string) string { return lmos.CredentialPath(gid, id) }

// statusList fetches the public status list and its ETag.
func (h *testHub) statusList() ([]byte, string) {
	h.t.Helper()
	resp, b := h.do(http.MethodGet, lmos.StatusListPath, "", nil, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != vc.MediaType {
		h.t.Fatalf("status list: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return b, resp.Header.Get("ETag")
}

// Over HTTP: a member's credential is given to admin and operate tokens,
// verifies offline against the public status list by the hub's DID, and
// stops verifying once the member is removed; the status list is cached
// (ETag, 304) and re-signed only when a bit changes; the directory TD
// links it.
func TestCredentialOverHTTP(t *testing.T) {
	h := startHub(t, nil)
	const a, b = "urn:uuid:c0000000-0000-4000-8000-00000000000a", "urn:uuid:c0000000-0000-4000-8000-00000000000b"
	h.put(a, makeTD(a, "Lamp A"))
	h.put(b, makeTD(b, "Lamp B"))
	if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "living-room", Title: "Living room", Members: []string{a, b}}); err != nil {
		t.Fatal(err)
	}
	operate, _, err := h.Main.Tokens.CreateScoped("op", hub.ScopeOperate, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	resp, cred := h.do(http.MethodGet, credentialPath("living-room", a), "", nil, operate)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != vc.MediaType || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("GET credential: %d %v %s", resp.StatusCode, resp.Header, cred)
	}
	list, etag := h.statusList()
	m, err := vc.VerifyMembership(cred, list, time.Now(), vc.ExpectIssuer(h.Main.DID()))
	if err != nil {
		t.Fatal(err)
	}
	if m.Thing != a || m.Group.ID != "living-room" || m.StatusListURL != h.URL+lmos.StatusListPath {
		t.Fatalf("membership %+v", m)
	}
	resp, _ = h.send(http.MethodGet, lmos.StatusListPath, nil, map[string]string{"If-None-Match": etag})
	if resp.StatusCode != http.StatusNotModified || !strings.Contains(resp.Header.Get("Cache-Control"), "max-age=30") {
		t.Fatalf("If-None-Match: %d %v", resp.StatusCode, resp.Header)
	}

	// The directory TD names the list.
	var td struct {
		Links []map[string]any `json:"links"`
	}
	h.getJSON(lmos.DirectoryPath, http.StatusOK, &td)
	found := false
	for _, l := range td.Links {
		found = found || (l["rel"] == "lmos:statusList" && l["href"] == strings.TrimPrefix(lmos.StatusListPath, "/"))
	}
	if !found {
		t.Fatalf("no lmos:statusList link in %v", td.Links)
	}

	if _, err := h.Main.Registry.RemoveMember(context.Background(), "living-room", a); err != nil {
		t.Fatal(err)
	}
	list2, etag2 := h.statusList()
	if etag2 == etag {
		t.Fatal("the status list did not change with a revocation")
	}
	if _, err := vc.VerifyMembership(cred, list2, time.Now()); !errors.Is(err, vc.ErrRevoked) {
		t.Fatalf("the removed member's credential: %v", err)
	}
	resp, body := h.do(http.MethodGet, credentialPath("living-room", a), "", nil, testToken)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a removed member's credential: %d %s", resp.StatusCode, body)
	}
	resp, credB := h.do(http.MethodGet, credentialPath("living-room", b), "", nil, testToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin GET: %d %s", resp.StatusCode, credB)
	}
	// A read token bound to B is B: it reads B's credential (an SSE-only
	// member has no other door to it).
	boundB, _, err := h.Main.Tokens.CreateBound("b", hub.ScopeRead, time.Time{}, b)
	if err != nil {
		t.Fatal(err)
	}
	if resp, own := h.do(http.MethodGet, credentialPath("living-room", b), "", nil, boundB); resp.StatusCode != http.StatusOK || string(own) != string(credB) {
		t.Fatalf("B's bound read token: %d %s", resp.StatusCode, own)
	}
	if _, err := vc.VerifyMembership(credB, list2, time.Now()); err != nil {
		t.Fatalf("the remaining member: %v", err)
	}
}

// Who may not read a credential, and what is not one: each refused with
// its status and problem, counted, and nothing changed (the status list's
// bytes stay the same).
func TestCredentialRefusals(t *testing.T) {
	h := startHub(t, nil)
	const a, c = "urn:uuid:c0000000-0000-4000-8000-0000000000a1", "urn:uuid:c0000000-0000-4000-8000-0000000000c1"
	h.put(a, makeTD(a, "A"))
	h.put(c, makeTD(c, "C"))
	if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "g", Title: "G", Members: []string{a}}); err != nil {
		t.Fatal(err)
	}
	read, _, err := h.Main.Tokens.CreateScoped("reader", hub.ScopeRead, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// A token bound to a Thing speaks for that Thing: not for another
	// member, whatever its scope (issue 15 review: an operate token bound
	// to C read A's credential and could pass for A).
	boundC, _, err := h.Main.Tokens.CreateBound("c", hub.ScopeOperate, time.Time{}, c)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := h.statusList()
	for _, tc := range []struct {
		name, path, token string
		status            int
		code              string
	}{
		{"anonymous", credentialPath("g", a), "", http.StatusUnauthorized, lmos.CodeUnauthorized},
		{"read token", credentialPath("g", a), read, http.StatusForbidden, lmos.CodeForbidden},
		{"operate token bound to another Thing", credentialPath("g", a), boundC, http.StatusForbidden, lmos.CodeForbidden},
		{"bad token", credentialPath("g", a), "lmos_not-a-token-at-all-0000", http.StatusUnauthorized, lmos.CodeUnauthorized},
		{"not a member", credentialPath("g", c), testToken, http.StatusNotFound, lmos.CodeNotFound},
		{"unknown group", credentialPath("h", a), testToken, http.StatusNotFound, lmos.CodeNotFound},
		{"bad group id", credentialPath("%2E%2E", a), testToken, http.StatusBadRequest, lmos.CodeInvalid},
	} {
		resp, body := h.do(http.MethodGet, tc.path, "", nil, tc.token)
		var p struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
		}
		_ = json.Unmarshal(body, &p)
		if resp.StatusCode != tc.status || p.Status != tc.status || !strings.HasSuffix(p.Type, "#"+tc.code) ||
			resp.Header.Get("Content-Type") != lmos.MediaProblem || strings.Contains(string(body), "proofValue") {
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, body)
		}
	}
	if n := h.refusals(`lmos_http_refused_total{reason="unauthorized"}`); n != 2 {
		t.Errorf("unauthorized refusals %d, want 2", n)
	}
	if n := h.refusals(`lmos_http_refused_total{reason="forbidden"}`); n != 2 {
		t.Errorf("forbidden refusals %d, want 2", n)
	}
	after, _ := h.statusList()
	if string(after) != string(before) {
		t.Fatal("a refusal changed the status list")
	}
	if g, _ := h.Main.Registry.Group("g"); len(g.Members) != 1 {
		t.Fatalf("members %v", g.MemberIDs())
	}
}

// Over MQTT: a Thing subscribed to its inbox gets a new membership's
// credential live; a strict client (mosquitto_sub) subscribing later gets
// each current credential as a retained message read from the registry;
// nobody else may subscribe to the inbox (SUBACK refused, counted, nothing
// delivered), and not even the Thing may publish there.
func TestCredentialInboxOverMQTT(t *testing.T) {
	_, subBin := requireMosquitto(t)
	h := startHub(t, nil)
	const a, b = "urn:uuid:c0000000-0000-4000-8000-0000000001aa", "urn:uuid:c0000000-0000-4000-8000-0000000001bb"
	ta := lmos.TopicKey(a)
	credsA := h.mqttDial(nil).join(a, makeTD(a, "Agent A"))
	credsB := h.mqttDial(nil).join(b, makeTD(b, "Agent B"))
	inbox := lmos.ThingsPrefix + ta + "/credentials/+"

	agentA := h.mqttDial(mqttclient.WithCreds(credsA.Username, credsA.Password))
	if sa, err := agentA.Sub(inbox); err != nil || sa.Reasons[0] != 1 {
		t.Fatalf("the Thing's own inbox: %v %v", sa, err)
	}
	// B tries A's inbox, by name and by wildcard: refused, nothing delivered.
	agentB := h.mqttDial(mqttclient.WithCreds(credsB.Username, credsB.Password))
	for _, f := range []string{inbox, lmos.ThingsPrefix + "+/credentials/+", "$share/x/" + inbox} {
		if sb, err := agentB.Sub(f); err == nil && sb.Reasons[0] < 0x80 {
			t.Fatalf("B subscribed to %s: %v", f, sb.Reasons)
		}
	}
	anon := h.mqttDial(nil)
	if sb, err := anon.Sub(inbox); err == nil && sb.Reasons[0] < 0x80 {
		t.Fatalf("an anonymous client subscribed to A's inbox: %v", sb.Reasons)
	}
	if n := h.refusals(`lmos_mqtt_refused_total{reason="forbidden"}`); n != 4 {
		t.Errorf("forbidden refusals %d, want 4", n)
	}

	ctx := context.Background()
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "kitchen", Title: "Kitchen", Members: []string{a, b}}); err != nil {
		t.Fatal(err)
	}
	topic := lmos.CredentialTopic(a, "kitchen")
	live := agentA.next(topic)
	if live.Retain || live.Properties == nil || live.Properties.ContentType != vc.MediaType {
		t.Fatalf("live credential: retain %v, properties %+v", live.Retain, live.Properties)
	}
	list, _ := h.statusList()
	if m, err := vc.VerifyMembership(live.Payload, list, time.Now(), vc.ExpectIssuer(h.Main.DID())); err != nil || m.Thing != a || m.Group.ID != "kitchen" {
		t.Fatalf("live credential: %+v %v", m, err)
	}
	// Not even the Thing publishes to its inbox.
	if r, err := agentA.Pub(topic, []byte(`{}`), 1, false, ""); err == nil && (r == nil || r.ReasonCode < 0x80) {
		t.Fatalf("the Thing published to its own inbox: %+v", r)
	}
	agentB.None(topic, 200*time.Millisecond)
	anon.None(topic, 0)

	// A second group: mosquitto_sub, as A, gets both credentials retained.
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "garden", Title: "Garden", Members: []string{a}}); err != nil {
		t.Fatal(err)
	}
	out, err := h.mosq(subBin, "-V", "5", "-u", credsA.Username, "-P", credsA.Password, "-i", "cred-sub-a",
		"-t", inbox, "-q", "1", "-C", "2", "-W", "5", "-v", "-F", "%t %r %p")
	if err != nil {
		t.Fatalf("mosquitto_sub: %v %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	got := map[string]bool{}
	for _, l := range lines {
		tp, rest, _ := strings.Cut(l, " ")
		retain, payload, _ := strings.Cut(rest, " ")
		if retain != "1" {
			t.Errorf("%s: retain flag %q", tp, retain)
		}
		m, err := vc.VerifyMembership([]byte(payload), list, time.Now())
		if err != nil {
			t.Errorf("%s: %v", tp, err)
		}
		got[tp+"="+m.Group.ID] = true
	}
	if len(lines) != 2 || !got[lmos.CredentialTopic(a, "kitchen")+"=kitchen"] || !got[lmos.CredentialTopic(a, "garden")+"=garden"] {
		t.Fatalf("mosquitto_sub got %q", out)
	}
	// A's credentials never reached B.
	agentB.None(lmos.CredentialTopic(a, "garden"), 100*time.Millisecond)
}

// Across a restart on another port: memberships and revocations survive,
// a stored credential that names the old status list URL is renewed on
// read for the same entry, and the status list stays public under
// access.anonymous none.
func TestCredentialsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	none := func(c *Config) { c.Access.Anonymous = "none" }
	h := startHubIn(t, dir, none)
	const a, b = "urn:uuid:c0000000-0000-4000-8000-0000000002aa", "urn:uuid:c0000000-0000-4000-8000-0000000002bb"
	h.put(a, makeTD(a, "A"))
	h.put(b, makeTD(b, "B"))
	ctx := context.Background()
	if _, err := h.Main.Registry.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{a, b}}); err != nil {
		t.Fatal(err)
	}
	_, oldA := h.do(http.MethodGet, credentialPath("g", a), "", nil, testToken)
	_, oldB := h.do(http.MethodGet, credentialPath("g", b), "", nil, testToken)
	if _, err := h.Main.Registry.RemoveMember(ctx, "g", b); err != nil {
		t.Fatal(err)
	}
	oldURL := h.URL
	did := h.Main.DID()
	h.Close()

	h = startHubIn(t, dir, none)
	if h.URL == oldURL {
		t.Skip("the hub came back on the same port")
	}
	list, _ := h.statusList() // no token: public
	resp, cred := h.do(http.MethodGet, credentialPath("g", a), "", nil, testToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d %s", resp.StatusCode, cred)
	}
	m, err := vc.VerifyMembership(cred, list, time.Now(), vc.ExpectIssuer(did))
	if err != nil {
		t.Fatalf("the renewed credential: %v", err)
	}
	old, _ := vc.ParseMembership(oldA)
	if m.StatusListURL != h.URL+lmos.StatusListPath || m.StatusIndex != old.StatusIndex || m.ID == old.ID {
		t.Fatalf("renewed %+v, old %+v", m, old)
	}
	// B's revocation is in the list served now.
	sl, err := vc.VerifyStatusList(list, time.Now(), vc.ExpectIssuer(did))
	if err != nil {
		t.Fatal(err)
	}
	mb, err := vc.ParseMembership(oldB)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := h.Main.Registry.Group("g"); len(g.Members) != 1 || sl.Bits[mb.StatusIndex/8]&(0x80>>(mb.StatusIndex%8)) == 0 {
		t.Fatalf("members %v; B's entry not revoked", g.MemberIDs())
	}
}
