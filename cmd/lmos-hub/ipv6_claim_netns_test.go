package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// v6Hub talks to a hub in the namespace "hub" of lan as an admin.
type v6Hub struct {
	t    *testing.T
	c    *http.Client
	base string
}

func (h v6Hub) do(method, path, body string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.base+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// claimView is what a refused claim must leave alone, as the hub serves
// it: the description (title, verification, origin), the key binding and
// the groups.
type claimView struct {
	Title, Verified, Source string
	Binding                 int
	Groups                  string
}

func (h v6Hub) view(id string) claimView {
	h.t.Helper()
	st, body := h.do(http.MethodGet, "/things/"+url.PathEscape(id), "")
	var td struct {
		Title    string `json:"title"`
		Verified string `json:"lmos:verified"`
		Origin   struct {
			Source string `json:"source"`
		} `json:"lmos:origin"`
	}
	if st != http.StatusOK || json.Unmarshal([]byte(body), &td) != nil {
		h.t.Fatalf("GET %s: %d %s", id, st, body)
	}
	binding, _ := h.do(http.MethodGet, "/api/things/"+url.PathEscape(id)+"/binding", "")
	_, groups := h.do(http.MethodGet, "/api/groups/home", "")
	return claimView{Title: td.Title, Verified: td.Verified, Source: td.Origin.Source, Binding: binding, Groups: groups}
}

// dialMQTT connects an anonymous MQTT 5 client (paho) from node's
// namespace to the hub's [addr]:1883.
func dialMQTT(t *testing.T, lan *netnstest.LAN, node, addr string) *mqttclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := lan.Dialer(node)(ctx, "tcp", "["+addr+"]:1883")
	if err != nil {
		t.Fatalf("dial the hub from %s: %v", node, err)
	}
	c, _, err := mqttclient.Connect(t, conn, nil)
	if err != nil {
		t.Fatalf("connect from %s: %v", node, err)
	}
	return c
}

// Issue 24 point 1, review: two IPv6 hosts of one /64, as on a home LAN.
// An agent on a1 (fd00:24::a) joins F over MQTT under join.mode approve,
// an admin approves it (the agent gets its credential) and adds it to a
// group, then resets its credential. A join of F from a2 (fd00:24::b, the
// same /64), unsigned as the agent's, was accepted: a2 got F's credential,
// admission and group. It is refused 403 and changes nothing; the agent
// from its exact address gets back in.
func TestIPv6NeighbourCannotClaimAResetThingOverMQTT(t *testing.T) {
	lan := netnstest.New(t, []string{"hub", "a1", "a2"})
	const hubAddr, agentAddr, neighbourAddr = "fd00:24::1", "fd00:24::a", "fd00:24::b"
	lan.AddAddr("hub", hubAddr+"/64")
	lan.AddAddr("a1", agentAddr+"/64")
	lan.AddAddr("a2", neighbourAddr+"/64")
	_, base := startMDNSHubWith(t, t.TempDir(), lan, "hub", "Test Hub", "join:\n  mode: approve\n")
	h := v6Hub{t: t, c: lan.HTTPClient("hub"), base: base}
	const id = "urn:test:v6-plug"
	tid := lmos.TopicKey(id)

	agent := dialMQTT(t, lan, "a1", hubAddr)
	if res := joinResultOf(t, agent.Join(tid, hubtest.BareTD(id, "Plug"), "")); res.Status != lmos.JoinPending {
		t.Fatalf("the agent's join: %+v", res)
	}
	if st, body := h.do(http.MethodPost, "/api/join/pending/"+url.PathEscape(id)+"/approve", ""); st != http.StatusNoContent {
		t.Fatalf("approve: %d %s", st, body)
	}
	if res := joinResultOf(t, agent.Next(lmos.ThingsPrefix+tid+"/td/result").Payload); res.Status != lmos.JoinAccepted || res.Credentials == nil {
		t.Fatalf("the approved join's result: %+v", res)
	}
	agent.Close()
	if st, body := h.do(http.MethodPost, "/api/groups", `{"id":"home","title":"Home","members":["`+id+`"]}`); st != http.StatusCreated {
		t.Fatalf("create group: %d %s", st, body)
	}
	if st, body := h.do(http.MethodDelete, "/api/things/"+url.PathEscape(id)+"/credential", ""); st != http.StatusNoContent {
		t.Fatalf("reset the credential: %d %s", st, body)
	}
	want := h.view(id)
	if want.Title != "Plug" || want.Binding != http.StatusNotFound || !strings.Contains(want.Groups, id) {
		t.Fatalf("F before the claim: %+v", want)
	}

	for _, c := range []struct{ name, title string }{{"its own description", "Plug"}, {"another description", "Evil"}} {
		neighbour := dialMQTT(t, lan, "a2", hubAddr)
		res := joinResultOf(t, neighbour.Join(tid, hubtest.BareTD(id, c.title), ""))
		if res.Status != lmos.JoinRejected || res.Credentials != nil || res.Problem == nil || res.Problem.Status != http.StatusForbidden ||
			res.Problem.Type != lmos.ErrorTypeBase+lmos.CodeForbidden || !strings.Contains(res.Problem.Detail, "registered from another address") {
			t.Errorf("the neighbour's join with %s: %+v (problem %+v)", c.name, res, res.Problem)
		}
		neighbour.Close()
		if got := h.view(id); got != want {
			t.Errorf("the neighbour's join with %s changed F:\n got %+v\nwant %+v", c.name, got, want)
		}
	}
	// F still holds no credential: the refused joins issued none.
	if st, body := h.do(http.MethodDelete, "/api/things/"+url.PathEscape(id)+"/credential", ""); st != http.StatusNotFound {
		t.Errorf("F's credential after the refused joins: %d %s, want 404 (none)", st, body)
	}

	back := dialMQTT(t, lan, "a1", hubAddr)
	if res := joinResultOf(t, back.Join(tid, hubtest.BareTD(id, "Plug"), "")); res.Status != lmos.JoinAccepted || res.Credentials == nil {
		t.Errorf("the agent back from its address: %+v (problem %+v)", res, res.Problem)
	}
	back.Close()
	if got := h.view(id); got != want {
		t.Errorf("F after its agent came back:\n got %+v\nwant %+v", got, want)
	}
}

// The same over mDNS, on IPv6 only (every link-local address is in
// fe80::/64): the agent on a1 announces F, unsigned; an admin approves it
// while it is alive and adds it to a group; the hub restarts, so it knows
// no instance of F. An instance on a2 announcing F — signed by its own key
// — was taken, since a2's address is in F's /64. It is refused and changes
// nothing; the agent from its own address resumes F.
func TestIPv6NeighbourCannotClaimAnApprovedThingOverMDNS(t *testing.T) {
	lan := netnstest.New(t, []string{"hub", "a1", "a2"})
	lan.DropIPv4("a1")
	lan.DropIPv4("a2")
	dir := t.TempDir()
	hubProc, base := startMDNSHubWith(t, dir, lan, "hub", "Test Hub", "join:\n  mode: approve\n")
	h := v6Hub{t: t, c: lan.HTTPClient("hub"), base: base}
	const id = "urn:test:v6-mdns-plug"
	a1 := lan.Helper("a1", "TestMDNSChild", childEnv+"=agent", "LMOS_MDNS_ARGS="+id+"|Plug|0")
	a1.WaitContains(10*time.Second, "advertised")
	testwait.Eventually(t, 15*time.Second, "F waits for approval", func() bool {
		_, body := h.do(http.MethodGet, "/api/join", "")
		return strings.Contains(body, id)
	})
	if _, body := h.do(http.MethodGet, "/api/join", ""); !strings.Contains(body, `"fe80::/64"`) {
		t.Fatalf("F was not announced from an IPv6 address: %s", body)
	}
	if st, body := h.do(http.MethodPost, "/api/join/pending/"+url.PathEscape(id)+"/approve", ""); st != http.StatusNoContent {
		t.Fatalf("approve: %d %s", st, body)
	}
	if st, body := h.do(http.MethodPost, "/api/groups", `{"id":"home","title":"Home","members":["`+id+`"]}`); st != http.StatusCreated {
		t.Fatalf("create group: %d %s", st, body)
	}
	want := h.view(id)
	if want.Title != "Plug" || want.Binding != http.StatusNotFound || want.Source != "mdns" || !strings.Contains(want.Groups, id) {
		t.Fatalf("F approved: %+v", want)
	}
	// The hub restarts: it knows no instance of F. The agent's instance
	// stays quiet for now (it re-announces when told).
	a1.Stop()
	hubProc.Stop()
	hubProc, _ = startMDNSHubWith(t, dir, lan, "hub", "Test Hub", "join:\n  mode: approve\n")

	evil := lan.Helper("a2", "TestMDNSClaimChild", claimChildEnv+"=signed", "LMOS_MDNS_ARGS="+id+"|Evil")
	evil.WaitContains(10*time.Second, "advertised")
	line, ok := hubProc.WaitLine(15*time.Second, func(l string) bool {
		return strings.Contains(l, id) && strings.Contains(l, "instance=Evil") &&
			(strings.Contains(l, "mdns thing refused") || strings.Contains(l, "mdns thing registered"))
	})
	if !ok || !strings.Contains(line, "mdns thing refused") || !strings.Contains(line, "registered from another address") {
		t.Errorf("the neighbour's announcement: %q, want refused as registered from another address", line)
	}
	got := h.view(id)
	if got != want {
		t.Errorf("the neighbour's announcement changed F:\n got %+v\nwant %+v", got, want)
	}
	evil.Stop()

	a1 = lan.Helper("a1", "TestMDNSChild", childEnv+"=agent", "LMOS_MDNS_ARGS="+id+"|Plug|0")
	a1.WaitContains(10*time.Second, "advertised")
	a1.Send("title Brighter")
	a1.WaitContains(5*time.Second, "retitled")
	testwait.Eventually(t, 15*time.Second, "the agent back from its address", func() bool { return h.view(id).Title == "Brighter" })
	if got := h.view(id); !bytes.Contains([]byte(got.Groups), []byte(id)) || got.Binding != http.StatusNotFound {
		t.Errorf("F after its agent came back: %+v", got)
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
