package federation_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// listed is what a hub lists: each Thing's id with its origin.
type listed struct {
	ID     string `json:"id"`
	Origin struct {
		Source string `json:"source"`
		Hub    string `json:"hub"`
	} `json:"lmos:origin"`
	Presence struct {
		Status string `json:"status"`
	} `json:"lmos:presence"`
}

func list(t *testing.T, h *hubtest.Hub) []listed {
	t.Helper()
	var all []listed
	h.GetJSON("/things?limit=1000", http.StatusOK, &all)
	return all
}

func find(t *testing.T, h *hubtest.Hub, id string) (listed, bool) {
	t.Helper()
	for _, l := range list(t, h) {
		if l.ID == id {
			return l, true
		}
	}
	return listed{}, false
}

// TestPairedHubsMirrorEachOther: two hubs paired through the API alone
// list each other's Things, marked with their home hub; presence follows;
// a deletion at home removes the mirror; nothing is echoed back; a
// mirrored Thing is read-only; unpairing removes the peer's mirrors.
func TestPairedHubsMirrorEachOther(t *testing.T) {
	hubs := startHubs(t, 2, nil)
	a, b := hubs[0], hubs[1]
	pairAll(t, a, b)
	tool := "urn:example:fed-tool"
	a.Put(tool, tdgen.MakeTD(tool, "tool at A"))
	waitUntil(t, "the tool listed at B", func() bool { _, ok := find(t, b, tool); return ok })
	got, _ := find(t, b, tool)
	if got.Origin.Source != "remote" || got.Origin.Hub != a.URL {
		t.Fatalf("the tool at B: origin %+v, want remote from %s", got.Origin, a.URL)
	}
	// Read-only at B.
	resp, body := b.Do(http.MethodDelete, lmos.ThingPath(tool), "", nil, hubtest.Token)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), a.URL) {
		t.Fatalf("delete the mirror at B: %d %s, want 403 naming %s", resp.StatusCode, body, a.URL)
	}
	// Presence of an agent at A is kept current at B.
	ag := "urn:example:fed-agent"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	agt, err := agent.Connect(ctx, agent.Options{URL: mqttURL(a), TD: counterTD(ag), Logger: hubtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the agent online at B", func() bool { l, ok := find(t, b, ag); return ok && l.Presence.Status == hub.PresenceOnline })
	agt.Close()
	waitUntil(t, "the agent offline at B", func() bool { l, ok := find(t, b, ag); return ok && l.Presence.Status == hub.PresenceOffline })
	// Deleted at A: gone at B.
	if resp, body := a.Do(http.MethodDelete, lmos.ThingPath(tool), "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete at A: %d %s", resp.StatusCode, body)
	}
	waitUntil(t, "the tool gone at B", func() bool { _, ok := find(t, b, tool); return !ok })
	// B's own Thing goes to A and is not echoed back to B.
	own := "urn:example:fed-own-b"
	b.Put(own, tdgen.MakeTD(own, "B's own"))
	barrier(t, a, b, "urn:example:fed-barrier-1")
	for _, l := range list(t, b) {
		if l.ID == own && l.Origin.Source == "remote" {
			t.Fatalf("B's own Thing came back to B as a mirror: %+v", l)
		}
	}
	// The peers' link states.
	var peers []struct {
		DID  string
		Link *hub.LinkState
	}
	b.GetJSON("/api/peers", http.StatusOK, &peers)
	if len(peers) != 1 || peers[0].DID != a.Main.DID() || peers[0].Link == nil || peers[0].Link.Kind != hub.LinkPeer || peers[0].Link.State != hub.LinkConnected || peers[0].Link.Things == 0 {
		t.Fatalf("B's peers: %+v", peers)
	}
	// The peer's link is among B's links in /api/status.
	var status struct{ Links []hub.LinkState }
	b.GetJSON("/api/status", http.StatusOK, &status)
	if n := len(status.Links); n != 1 || status.Links[0].Kind != hub.LinkPeer || status.Links[0].Name != a.Main.DID() || status.Links[0].URL != a.URL {
		t.Fatalf("B's links in /api/status: %+v", status.Links)
	}
	// A's directory TD lists B, with the broker B's own TD names.
	waitUntil(t, "lmos:peers at A with B's broker", func() bool {
		var td struct {
			Peers []struct{ DID, URL, MQTT string } `json:"lmos:peers"`
		}
		a.GetJSON(lmos.DirectoryPath, http.StatusOK, &td)
		return len(td.Peers) == 1 && td.Peers[0].DID == b.Main.DID() && td.Peers[0].URL == b.URL && td.Peers[0].MQTT == mqttURL(b)
	})
	// Unpaired at B: A's Things leave B.
	if resp, body := b.Do(http.MethodDelete, "/api/peers/"+a.Main.DID(), "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("unpair: %d %s", resp.StatusCode, body)
	}
	for _, l := range list(t, b) {
		if l.Origin.Source == "remote" {
			t.Fatalf("after unpairing, B still lists %+v", l)
		}
	}
}

// barrier registers id at from and waits until to lists it: the changes
// from made before are applied at to by then (the feed is in order).
func barrier(t *testing.T, from, to *hubtest.Hub, id string) {
	t.Helper()
	from.Put(id, tdgen.MakeTD(id, "barrier"))
	waitUntil(t, id+" at "+to.URL, func() bool { _, ok := find(t, to, id); return ok })
}

// TestThreeHubsListEachThingOnce: three hubs paired each with each list
// every Thing exactly once, each marked with its own home hub: a mirror
// is never mirrored further, so nothing goes round.
func TestThreeHubsListEachThingOnce(t *testing.T) {
	hubs := startHubs(t, 3, nil)
	pairAll(t, hubs...)
	home := map[string]string{}
	for i, h := range hubs {
		id := "urn:example:fed-three-" + string(rune('a'+i))
		h.Put(id, tdgen.MakeTD(id, "thing"))
		home[id] = h.URL
	}
	for _, h := range hubs {
		waitUntil(t, "every Thing at "+h.URL, func() bool {
			n := 0
			for _, l := range list(t, h) {
				if home[l.ID] != "" {
					n++
				}
			}
			return n == 3
		})
	}
	// Changes made since are applied everywhere once these arrive.
	for i, h := range hubs {
		barrier(t, h, hubs[(i+1)%3], "urn:example:fed-three-barrier-"+string(rune('a'+i)))
		barrier(t, h, hubs[(i+2)%3], "urn:example:fed-three-barrier-"+string(rune('a'+i)))
	}
	for _, h := range hubs {
		seen := map[string]int{}
		for _, l := range list(t, h) {
			seen[l.ID]++
			want := home[l.ID]
			if want == "" {
				continue
			}
			switch {
			case want == h.URL && l.Origin.Source == "remote":
				t.Errorf("%s lists its own %s as a mirror from %s", h.URL, l.ID, l.Origin.Hub)
			case want != h.URL && (l.Origin.Source != "remote" || l.Origin.Hub != want):
				t.Errorf("%s lists %s with origin %+v, want a mirror from %s", h.URL, l.ID, l.Origin, want)
			}
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%s lists %s %d times", h.URL, id, n)
			}
		}
	}
}

// TestPeerCannotOverrideAKeyBinding: an id bound to a key at B is not
// taken by the Thing of that id a peer registered without that key's
// proof; B's link reports the refusal, and B's other mirrors go on.
func TestPeerCannotOverrideAKeyBinding(t *testing.T) {
	hubs := startHubs(t, 2, nil)
	a, b := hubs[0], hubs[1]
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	bound := "urn:example:fed-bound"
	b.Put(bound, tdgen.MakeTD(bound, "B's bound Thing"))
	body, _ := json.Marshal(map[string]string{"did": proof.DID(key.Public().(ed25519.PublicKey))})
	if resp, rb := b.Do(http.MethodPut, "/api/things/"+bound+"/binding", lmos.MediaJSON, body, hubtest.Token); resp.StatusCode != http.StatusOK {
		t.Fatalf("bind at B: %d %s", resp.StatusCode, rb)
	}
	if resp, rb := b.Do(http.MethodDelete, lmos.ThingPath(bound), "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete at B: %d %s", resp.StatusCode, rb)
	}
	a.Put(bound, tdgen.MakeTD(bound, "A's impostor"))
	other := "urn:example:fed-unbound"
	a.Put(other, tdgen.MakeTD(other, "A's other"))
	pairAll(t, a, b)
	waitUntil(t, "the other Thing at B", func() bool { _, ok := find(t, b, other); return ok })
	if l, ok := find(t, b, bound); ok {
		t.Fatalf("B lists the Thing bound to another key, from A: %+v", l)
	}
	var peers []struct{ Link *hub.LinkState }
	b.GetJSON("/api/peers", http.StatusOK, &peers)
	if len(peers) != 1 || peers[0].Link == nil || !strings.Contains(peers[0].Link.LastError, bound) {
		t.Fatalf("B's link does not report the refusal: %+v", peers)
	}
}

// TestUnpairedHubGetsAnonymousRights: B pairs A, A does not pair B and
// lets anonymous clients do nothing: B's mirror of A is refused (401) and
// its link says so; once A pairs B, it mirrors.
func TestUnpairedHubGetsAnonymousRights(t *testing.T) {
	a := hubtest.Start(t, func(c *app.Config) { c.Access.Anonymous = hub.AnonymousNone })
	b := hubtest.Start(t, nil)
	id := "urn:example:fed-private"
	a.Put(id, tdgen.MakeTD(id, "private"))
	pair(t, b, a)
	var peers []struct{ Link *hub.LinkState }
	waitUntil(t, "B's link down with 401", func() bool {
		b.GetJSON("/api/peers", http.StatusOK, &peers)
		return len(peers) == 1 && peers[0].Link != nil && peers[0].Link.State == hub.LinkDown && strings.Contains(peers[0].Link.LastError, "401")
	})
	if _, ok := find(t, b, id); ok {
		t.Fatal("B mirrored a Thing of a hub that did not pair it")
	}
	pair(t, a, b)
	// B's mirror would retry after its backoff (up to a minute after a
	// 401); pairing A again at B starts it anew.
	if resp, body := b.Do(http.MethodDelete, "/api/peers/"+a.Main.DID(), "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("unpair: %d %s", resp.StatusCode, body)
	}
	pair(t, b, a)
	waitUntil(t, "B mirrors A once A paired it", func() bool { _, ok := find(t, b, id); return ok })
}
