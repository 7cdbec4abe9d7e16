package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/hubtest/mqttclient"
	"github.com/eclipse-lmos/lmos-hub/lmos"
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
