package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// A registered MQTT Thing bound to a key that holds no credential (an
// admin approved its join while its agent was gone, or reset its
// credential) is taken by the join whose credential the hub issues. The
// description it holds is public (GET /things/{id}, proof included): a
// stranger sending it again from any address must be refused as a replay
// (409), get no credential and change nothing; the agent's fresh proof
// still takes the Thing, with its admission and groups.
func TestMQTTStrangerCannotReplayABoundThingWithoutCredential(t *testing.T) {
	for _, c := range []struct {
		name string
		mode string
		// free leaves the bound Thing registered without a credential.
		free func(h *testHub, id string)
	}{
		{"approved while its agent was gone", "approve", func(h *testHub, id string) {
			h.decide(id, "approve", http.StatusNoContent)
		}},
		{"credential reset by an admin", "open", func(h *testHub, id string) {
			if resp, body := h.do(http.MethodDelete, "/api/things/"+pathEscape(id)+"/credential", "", nil, testToken); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("reset: %d %s", resp.StatusCode, body)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := startHub(t, func(cfg *Config) { cfg.Join.Mode = c.mode })
			const id, other = "urn:replay:plug", "urn:replay:other"
			tid := lmos.TopicKey(id)
			key := newSigningKey(t)
			agent := h.MQTT(nil)
			res := joinResultOf(t, agent.Join(tid, signedTD(t, id, "Plug", key, time.Now().Add(-time.Minute)), ""))
			if res.Status != lmos.JoinPending && res.Status != lmos.JoinAccepted {
				t.Fatalf("the agent's join: %+v", res)
			}
			agent.Close()
			waitFor(t, 5*time.Second, "the agent's connection gone", func() bool { return h.Main.Broker.Clients() == 0 })
			c.free(h, id)
			if held, _ := h.Main.Admission.HasCredential(id); held {
				t.Fatal("the Thing still holds a credential")
			}
			if _, err := h.Main.Registry.Put(context.Background(), other, makeTD(other, "B"), hub.Origin{Source: hub.SourceHTTP, Admin: true}); err != nil {
				t.Fatal(err)
			}
			if resp, body := h.do(http.MethodPatch, lmos.ThingPath(id), "application/merge-patch+json", []byte(`{}`), testToken); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("PATCH {}: %d %s", resp.StatusCode, body)
			}
			if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "home", Title: "Home", Members: []string{id, other}}); err != nil {
				t.Fatal(err)
			}
			want := h.claimState(id)
			_, stored := h.do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
			if !strings.Contains(string(stored), `"proof"`) {
				t.Fatalf("the stored description carries no proof: %s", stored)
			}

			for _, from := range []string{"127.0.0.2", ""} {
				thief, _, err := mqttclient.DialFrom(t, from, h.Main.MQTTAddr.String(), nil)
				if err != nil {
					t.Fatalf("dial from %q: %v", from, err)
				}
				res := joinResultOf(t, thief.Join(tid, stored, ""))
				thief.Close()
				if res.Status != lmos.JoinRejected || res.Credentials != nil || res.Problem == nil || res.Problem.Status != 409 ||
					res.Problem.Type != lmos.ErrorTypeBase+lmos.CodeConflict || !strings.Contains(res.Problem.Detail, "replayed") {
					t.Errorf("the stored description sent again from %q: %+v (problem %+v)", from, res, res.Problem)
				}
				if got := h.claimState(id); got != want {
					t.Errorf("the replay from %q changed the Thing:\n got %s\nwant %s", from, got, want)
				}
			}

			// The agent's fresh proof takes it, with its admission and group.
			back := h.MQTT(nil)
			res = joinResultOf(t, back.Join(tid, signedTD(t, id, "Plug", key, time.Now()), ""))
			if res.Status != lmos.JoinAccepted || res.Credentials == nil {
				t.Fatalf("the agent's fresh join: %+v (problem %+v)", res, res.Problem)
			}
			if th, _ := h.Main.Registry.Get(id); !th.Meta.Admitted || !slices.Equal(h.Main.Registry.GroupsOf(id), []string{"home"}) {
				t.Errorf("the agent back: admitted %v, groups %v", th.Meta.Admitted, h.Main.Registry.GroupsOf(id))
			}
		})
	}
}

// An anonymous PUT is authenticated by the proof by the id's bound key
// alone (§3.5). The stored description of a Thing its agent keeps over
// WebSocket or MQTT is public, and sent again from another door it is a
// replay (409): it must not move the Thing to HTTP, which would lock its
// agent out (a WebSocket or MQTT join of a Thing registered by other means
// is refused). Nothing changes; the agent comes back with a fresh proof.
func TestHTTPReplayOfAnotherDoorsThingIsRefused(t *testing.T) {
	h := startHub(t, nil)
	key := newSigningKey(t)
	const wsID, mqttID = "urn:replay:ws", "urn:replay:mqtt"

	raw, _ := json.Marshal(wsTD(wsID))
	w := h.wsDial("lmosprotocol", nil)
	if r := wsRegister(t, w, wsID, signedRaw(t, raw, key, time.Now().Add(-time.Minute))); r["messageType"] != "acknowledgement" {
		t.Fatalf("registerThing: %v", r)
	}
	_ = w.c.Close(websocket.StatusNormalClosure, "")

	first := h.anonymousJoin(mqttID, signedTD(t, mqttID, "Plug", key, time.Now().Add(-time.Minute)))
	if first.Status != lmos.JoinAccepted {
		t.Fatalf("join: %+v", first)
	}
	if resp, body := h.do(http.MethodDelete, "/api/things/"+pathEscape(mqttID)+"/credential", "", nil, testToken); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: %d %s", resp.StatusCode, body)
	}

	for _, id := range []string{wsID, mqttID} {
		want := h.claimState(id)
		th, _ := h.Main.Registry.Get(id)
		origin := th.Meta.Origin.Source
		_, stored := h.do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
		resp, body := h.do(http.MethodPut, lmos.ThingPath(id), lmos.MediaJSON, stored, "")
		if p := expectProblem(t, resp, body, http.StatusConflict, "replayed"); p.Type != lmos.ErrorTypeBase+lmos.CodeConflict {
			t.Errorf("%s: anonymous PUT of the stored description: %+v", id, p)
		}
		if got := h.claimState(id); got != want {
			t.Errorf("%s: the replay changed the Thing:\n got %s\nwant %s", id, got, want)
		}
		if th, _ := h.Main.Registry.Get(id); th.Meta.Origin.Source != origin {
			t.Errorf("%s: origin %s, want %s", id, th.Meta.Origin.Source, origin)
		}
	}

	// Their agents come back with fresh proofs.
	w = h.wsDial("lmosprotocol", nil)
	if r := wsRegister(t, w, wsID, signedRaw(t, raw, key, time.Now())); r["messageType"] != "acknowledgement" {
		t.Errorf("the WebSocket agent's fresh registerThing: %v", r)
	}
	if res := h.anonymousJoin(mqttID, signedTD(t, mqttID, "Plug", key, time.Now())); res.Status != lmos.JoinAccepted || res.Credentials == nil {
		t.Errorf("the MQTT agent's fresh join: %+v (problem %+v)", res, res.Problem)
	}
}
