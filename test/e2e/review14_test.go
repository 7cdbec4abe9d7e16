package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Where the parts of issue 14 meet (the review of issue 14), over MQTT
// with a strict client (Python Paho 1.6.1).

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
	id := "urn:example:review14-bound"
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
	id := "urn:example:review14-evicted"
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
