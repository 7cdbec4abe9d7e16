package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// credHash is the hash of the Thing's MQTT credential the hub stores (""
// when it holds none).
func (h *testHub) credHash(id string) string {
	h.t.Helper()
	got, err := h.Main.DB.CredentialHash(id)
	if hub.ErrorCode(err) == hub.ENOTFOUND {
		return ""
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return got
}

// ownerState is what a refused re-join must not change: the stored
// description, its verification and binding, the credential, the origin.
func (h *testHub) ownerState(id string) string {
	h.t.Helper()
	th, err := h.Main.Registry.Get(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.bindingState(id) + " cred=" + h.credHash(id) + " origin=" + string(th.Meta.Origin.Source) +
		" modified=" + th.Meta.Modified.String()
}

func secretHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// joinResult publishes doc on id's td topic from a new anonymous
// connection and returns the result.
func (h *testHub) anonymousJoin(id string, doc []byte) lmos.JoinResult {
	h.t.Helper()
	c := h.mqttDial(nil)
	defer c.Close()
	var res lmos.JoinResult
	if err := json.Unmarshal(c.Join(lmos.TopicKey(id), doc, ""), &res); err != nil {
		h.t.Fatal(err)
	}
	return res
}

// connackOf is the CONNACK reason code of a connection with creds (0:
// accepted).
func (h *testHub) connackOf(c *lmos.Credentials) byte {
	h.t.Helper()
	cli, ack, err := mqttclient.Dial(h.t, h.MQTTAddr(), mqttclient.WithCreds(c.Username, c.Password))
	if err == nil {
		cli.Close()
		return 0
	}
	if ack == nil {
		h.t.Fatalf("connect: %v", err)
	}
	return ack.ReasonCode
}

// A Thing joined over MQTT whose agent lost its credentials gets back in
// with a fresh proof by the key its id is bound to, over MQTT (a new
// credential; the old one stops working and its live connection ends) and
// over WebSocket (the credential is deleted). A stranger without the key
// or the credential cannot replace it over either door: not unsigned, not
// with another key, not with the owner's stored description (a replay),
// not tampered; each refusal is a problem naming its cause, and nothing
// stored changes.
func TestOwnerRejoinsByKeyAStrangerCannot(t *testing.T) {
	h := startHub(t, nil)
	owner, other := newSigningKey(t), newSigningKey(t)
	const id = "urn:example:owner-rejoin"
	first := h.anonymousJoin(id, signedTD(t, id, "Plug", owner, time.Now().Add(-time.Minute)))
	if first.Status != lmos.JoinAccepted || first.Credentials == nil {
		t.Fatalf("first join: %+v", first)
	}
	live := h.mqttDial(mqttclient.WithCreds(first.Credentials.Username, first.Credentials.Password))
	_, stored := h.do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
	want := h.ownerState(id)

	strangers := []struct {
		name   string
		doc    []byte
		status int
		code   string
		detail string
	}{
		{"unsigned", makeTD(id, "Evil"), 403, lmos.CodeForbidden, "lmos-hub things reset-credential"},
		{"another key", signedTD(t, id, "Evil", other, time.Now()), 403, lmos.CodeForbidden, "reset-credential"},
		{"the stored description, read from the directory", stored, 409, lmos.CodeConflict, "replayed"},
		{"the owner's key, an older proof", signedTD(t, id, "Old", owner, time.Now().Add(-time.Hour)), 409, lmos.CodeConflict, "replayed"},
		{"tampered", []byte(strings.Replace(string(signedTD(t, id, "Plug 2", owner, time.Now())), `"Plug 2"`, `"Evil"`, 1)), 400, lmos.CodeInvalid, "signature"},
	}
	for _, c := range strangers {
		res := h.anonymousJoin(id, c.doc)
		if res.Status != lmos.JoinRejected || res.Credentials != nil || res.Problem == nil || res.Problem.Status != c.status ||
			!strings.HasSuffix(res.Problem.Type, "#"+c.code) || !strings.Contains(res.Problem.Detail, c.detail) {
			t.Errorf("MQTT, %s: %+v (problem %+v)", c.name, res, res.Problem)
		}
		if got := h.ownerState(id); got != want {
			t.Errorf("MQTT, %s changed state:\n%s\nwant\n%s", c.name, got, want)
		}
		var td map[string]any
		if json.Unmarshal(c.doc, &td) != nil {
			continue
		}
		w := h.wsDial("lmosprotocol", nil)
		expectWSError(t, wsRegister(t, w, id, c.doc), c.status, c.code, c.detail)
		_ = w.c.Close(websocket.StatusNormalClosure, "")
		if got := h.ownerState(id); got != want {
			t.Errorf("WebSocket, %s changed state:\n%s\nwant\n%s", c.name, got, want)
		}
	}
	if code := h.connackOf(first.Credentials); code != 0 {
		t.Fatalf("the owner's credential refused after the strangers: 0x%02x", code)
	}

	// The owner, its credentials lost, joins with a fresh proof.
	again := h.anonymousJoin(id, signedTD(t, id, "Plug", owner, time.Now()))
	if again.Status != lmos.JoinAccepted || again.Credentials == nil || again.Credentials.Password == first.Credentials.Password {
		t.Fatalf("the owner's re-join by its key: %+v", again)
	}
	if got := h.credHash(id); got != secretHash(again.Credentials.Password) {
		t.Fatal("the hub does not hold the new credential")
	}
	select {
	case <-live.C.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the connection with the old credential still runs")
	}
	if code := h.connackOf(first.Credentials); code != 0x86 && code != 0x87 {
		t.Fatalf("the old credential connects: 0x%02x", code)
	}
	if code := h.connackOf(again.Credentials); code != 0 {
		t.Fatalf("the new credential is refused: 0x%02x", code)
	}

	// Over WebSocket with a fresh proof: the Thing is that socket's now,
	// and its MQTT credential is gone.
	w := h.wsDial("lmosprotocol", nil)
	raw, _ := json.Marshal(wsTD(id))
	doc := signedRaw(t, raw, owner, time.Now().Add(2*time.Second)) // after the MQTT re-join's, to the second
	if r := wsRegister(t, w, id, doc); r["messageType"] != "acknowledgement" {
		t.Fatalf("the owner's registerThing by its key: %v", r)
	}
	if got := h.credHash(id); got != "" {
		t.Fatal("the MQTT credential outlived the Thing's move to WebSocket")
	}
	if code := h.connackOf(again.Credentials); code != 0x86 && code != 0x87 {
		t.Fatalf("the MQTT credential connects after the move: 0x%02x", code)
	}
	if st, via := h.Presence(id); st != "online" || via != "ws" {
		t.Fatalf("presence %s via %s", st, via)
	}
}

// DELETE /api/things/{id}/credential: only an admin resets a credential
// (401 without a token, 403 with a read token, nothing changed); a Thing
// without one is 404 with a problem. A reset ends the agent's connection,
// and the agent library (its credentials refused) joins again by itself
// and keeps the new credentials in its state directory.
func TestResetThingCredential(t *testing.T) {
	h := startHub(t, nil)
	const id = "urn:example:reset-credential"
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + h.MQTTAddr(), TD: map[string]any{"id": id, "title": "Plug"},
		StateDir: state, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	old := a.JoinCredentials()
	if old == nil || h.credHash(id) != secretHash(old.Password) {
		t.Fatalf("joined with %+v", old)
	}
	want := h.ownerState(id)
	path := "/api/things/" + pathEscape(id) + "/credential"

	resp, body := h.do(http.MethodDelete, path, "", nil, "")
	expectProblem(t, resp, body, http.StatusUnauthorized, "")
	read, _ := createToken(t, h, "read", "")
	resp, body = h.do(http.MethodDelete, path, "", nil, read)
	expectProblem(t, resp, body, http.StatusForbidden, "")
	if got := h.ownerState(id); got != want {
		t.Fatalf("a refused reset changed state:\n%s\nwant\n%s", got, want)
	}
	// A Thing registered over HTTP holds no credential.
	h.Put("urn:example:no-credential", makeTD("urn:example:no-credential", "HTTP"))
	resp, body = h.do(http.MethodDelete, "/api/things/"+pathEscape("urn:example:no-credential")+"/credential", "", nil, testToken)
	expectProblem(t, resp, body, http.StatusNotFound, "holds no MQTT credential")
	resp, body = h.do(http.MethodDelete, "/api/things/"+pathEscape("urn:example:nobody")+"/credential", "", nil, testToken)
	expectProblem(t, resp, body, http.StatusNotFound, "holds no MQTT credential")
	resp, body = h.do(http.MethodDelete, "/api/things/not%20an%20id/credential", "", nil, testToken)
	expectProblem(t, resp, body, http.StatusBadRequest, "invalid Thing id")
	if got := h.ownerState(id); got != want {
		t.Fatalf("a refused reset changed state:\n%s\nwant\n%s", got, want)
	}

	resp, body = h.do(http.MethodDelete, path, "", nil, testToken)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: %d %s", resp.StatusCode, body)
	}
	if code := h.connackOf(old); code != 0x86 && code != 0x87 {
		t.Fatalf("the reset credential connects: 0x%02x", code)
	}
	if _, err := h.Main.Registry.Get(id); err != nil {
		t.Fatalf("the reset removed the Thing: %v", err)
	}
	// The agent, cut off, is refused with its old credentials and joins
	// anew by itself.
	waitFor(t, 30*time.Second, "the agent's new credential", func() bool {
		c := a.JoinCredentials()
		return c != nil && c.Password != old.Password && h.credHash(id) == secretHash(c.Password)
	})
	waitFor(t, 30*time.Second, "the agent online again", func() bool { st, _ := h.Presence(id); return st == "online" })
	b, err := os.ReadFile(filepath.Join(state, "credentials.json"))
	var kept agent.Credentials
	if err != nil || json.Unmarshal(b, &kept) != nil || kept.Password != a.JoinCredentials().Password {
		t.Fatalf("kept credentials %s: %v", b, err)
	}
}

// signedRaw is raw signed by k, its proof created at created.
func signedRaw(t *testing.T, raw []byte, k ed25519.PrivateKey, created time.Time) []byte {
	t.Helper()
	doc, err := proof.Sign(raw, k, created)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// Under join mode approve and closed, an admin's reset lets the Thing's
// agent back (approve: at once, it is no new Thing; closed: refused, 403,
// nothing changed); a reset after `things rm` makes its next join a new
// Thing's, pending approval.
func TestResetCredentialUnderJoinModes(t *testing.T) {
	for _, mode := range []string{"approve", "closed"} {
		t.Run(mode, func(t *testing.T) {
			h := startHub(t, func(c *Config) { c.Join.Mode = mode })
			permit := func(seconds int) {
				body := []byte(`{"seconds":` + strconv.Itoa(seconds) + `}`)
				if resp, b := h.do(http.MethodPost, "/api/join/permit", "application/json", body, testToken); resp.StatusCode != http.StatusOK {
					t.Fatalf("permit %d: %d %s", seconds, resp.StatusCode, b)
				}
			}
			const id = "urn:example:reset-modes"
			td := makeTD(id, "Unsigned")
			permit(120)
			if res := h.anonymousJoin(id, td); res.Status != lmos.JoinAccepted {
				t.Fatalf("join in the permit window: %+v", res)
			}
			permit(0)
			reset := func() {
				if resp, b := h.do(http.MethodDelete, "/api/things/"+pathEscape(id)+"/credential", "", nil, testToken); resp.StatusCode != http.StatusNoContent {
					t.Fatalf("reset: %d %s", resp.StatusCode, b)
				}
			}
			reset()
			want := h.ownerState(id)
			res := h.anonymousJoin(id, td)
			if mode == "closed" {
				if res.Status != lmos.JoinRejected || res.Problem == nil || res.Problem.Status != 403 || res.Credentials != nil {
					t.Fatalf("a join after the reset on a closed hub: %+v", res)
				}
				if got := h.ownerState(id); got != want {
					t.Fatalf("the refused join changed state:\n%s\nwant\n%s", got, want)
				}
				return
			}
			if res.Status != lmos.JoinAccepted || res.Credentials == nil {
				t.Fatalf("a join after the reset under approve: %+v", res)
			}
			if resp, b := h.do(http.MethodDelete, lmos.ThingPath(id), "", nil, testToken); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("rm: %d %s", resp.StatusCode, b)
			}
			reset()
			if res := h.anonymousJoin(id, td); res.Status != lmos.JoinPending {
				t.Fatalf("a join after rm and reset under approve: %+v", res)
			}
		})
	}
}
