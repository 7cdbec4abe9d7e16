package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
)

// groupState is what a refused membership write must leave as it was:
// the group's members and the signed status list.
func (h *testHub) groupState(gid string) string {
	h.t.Helper()
	var g struct{ Members []string }
	h.getJSON("/api/groups/"+gid, http.StatusOK, &g)
	list, _ := h.statusList()
	return fmt.Sprintf("members=%v list=%x", g.Members, list)
}

// refusedBy reads lmos_http_refused_total{reason}.
func (h *testHub) refusedBy(reason string) string {
	h.t.Helper()
	_, body := h.do(http.MethodGet, "/metrics", "", nil, testToken)
	prefix := `lmos_http_refused_total{reason="` + reason + `"} `
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return v
		}
	}
	return "0"
}

// Issue 24 point 3: one operate token adding and removing members in a
// loop issued a credential per add until the hub's 131,072 status list
// entries were used up for good. Now its credentials are paced
// (groups.issueRate, here a burst of 16): the 17th add is 429 with a
// problem, changes nothing, and is counted; another token and an admin go
// on.
func TestMembershipLoopPacedPerToken(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Groups.IssueRate, c.Groups.IssueBurst = 1, 16 })
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = fmt.Sprintf("urn:uuid:b0000000-0000-4000-8000-%012d", i)
		h.put(ids[i], makeTD(ids[i], "Member"))
	}
	if resp, b := h.do(http.MethodPut, "/api/groups/burn", "application/json", []byte(`{"title":"Burn"}`), testToken); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT group: %d %s", resp.StatusCode, b)
	}
	operate, _ := createToken(t, h, "operate", "")
	member := func(i int) string { return "/api/groups/burn/members/" + pathEscape(ids[i%len(ids)]) }
	added := 0
	var resp *http.Response
	var body []byte
	for i := 0; i < 64; i++ {
		if resp, body = h.do(http.MethodPut, member(i), "", nil, operate); resp.StatusCode != http.StatusOK {
			break
		}
		added++
		if r, b := h.do(http.MethodDelete, member(i), "", nil, operate); r.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE member: %d %s", r.StatusCode, b)
		}
	}
	if added != 16 {
		t.Fatalf("%d credentials issued to one token in a loop, then %d %s; want 16, then 429", added, resp.StatusCode, body)
	}
	before := h.groupState("burn")
	resp, body = h.do(http.MethodPut, member(added), "", nil, operate)
	p := expectProblem(t, resp, body, http.StatusTooManyRequests, "too many membership credentials")
	if !strings.HasSuffix(p.Type, "#"+lmos.CodeRateLimit) {
		t.Fatalf("problem type %q", p.Type)
	}
	if after := h.groupState("burn"); after != before {
		t.Fatalf("a refused add changed the group or the list:\n%s\n%s", before, after)
	}
	if n := h.refusedBy("groups.issueRate"); n != "2" {
		t.Fatalf("refused by groups.issueRate: %s, want 2", n)
	}
	other, _ := createToken(t, h, "operate", "")
	for who, tok := range map[string]string{"another token": other, "an admin": testToken} {
		if r, b := h.do(http.MethodPut, member(1), "", nil, tok); r.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", who, r.StatusCode, b)
		}
		h.do(http.MethodDelete, member(1), "", nil, tok)
	}
}

// Issue 24 point 3, anonymously: in a selfJoin group a loop of fresh,
// signed ids joining and leaving from one address took an entry per join.
// Now one address's self-joins are paced (here a burst of 4): the 5th is
// 429 and changes nothing, while another address still joins.
func TestSelfJoinLoopPacedPerAddress(t *testing.T) {
	h := startHub(t, func(c *Config) { c.Groups.IssueRate, c.Groups.IssueBurst = 1, 4 })
	if resp, b := h.do(http.MethodPut, "/api/groups/open", "application/json", []byte(`{"title":"Open","selfJoin":true}`), testToken); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT group: %d %s", resp.StatusCode, b)
	}
	// Statements must be signed after the hub started, within the skew.
	created := time.Now().Add(time.Minute)
	type thing struct {
		id  string
		key ed25519.PrivateKey
	}
	things := make([]thing, 6)
	for i := range things {
		_, key, _ := ed25519.GenerateKey(nil)
		id := fmt.Sprintf("urn:uuid:5e1f0000-0000-4000-8000-%012d", i)
		td, err := proof.Sign(makeTD(id, "Self"), key, time.Now().Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		resp, b := h.do(http.MethodPut, "/things/"+pathEscape(id), "application/td+json", td, testToken)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT signed %s: %d %s", id, resp.StatusCode, b)
		}
		things[i] = thing{id, key}
	}
	n := 0
	self := func(c *http.Client, th thing, action string) (*http.Response, []byte) {
		t.Helper()
		n++
		doc, _ := json.Marshal(map[string]string{"group": "open", "thing": th.id, "action": action})
		st, err := proof.SignMilli(doc, th.key, created.Add(time.Duration(n)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		method := http.MethodPut
		if action == "leave" {
			method = http.MethodDelete
		}
		req, _ := http.NewRequestWithContext(context.Background(), method, h.URL+"/api/groups/open/members/"+pathEscape(th.id), bytes.NewReader(st))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	one, two := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	for _, th := range things[:4] {
		if resp, b := self(one, th, "join"); resp.StatusCode != http.StatusOK {
			t.Fatalf("join %s: %d %s", th.id, resp.StatusCode, b)
		}
		if resp, b := self(one, th, "leave"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("leave %s: %d %s", th.id, resp.StatusCode, b)
		}
	}
	before := h.groupState("open")
	resp, body := self(one, things[4], "join")
	expectProblem(t, resp, body, http.StatusTooManyRequests, "too many membership credentials")
	if after := h.groupState("open"); after != before {
		t.Fatalf("a refused self-join changed the group or the list:\n%s\n%s", before, after)
	}
	if resp, b := self(two, things[5], "join"); resp.StatusCode != http.StatusOK {
		t.Fatalf("another address: %d %s", resp.StatusCode, b)
	}
}

// The admin's recovery over HTTP: POST /api/credentials/status/rotate
// starts a new status list generation. A token that is not admin and an
// anonymous client are refused with a problem and change nothing; after
// the rotation the old URL serves a list revoking every earlier
// credential, the new one the members' renewed credentials, and the
// directory TD links the new one.
func TestStatusListRotationOverHTTP(t *testing.T) {
	dir := t.TempDir()
	h := startHubIn(t, dir, nil)
	const a = "urn:uuid:c0000000-0000-4000-8000-0000000000a1"
	h.put(a, makeTD(a, "Lamp"))
	if resp, b := h.do(http.MethodPut, "/api/groups/g", "application/json", []byte(`{"title":"G","members":["`+a+`"]}`), testToken); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT group: %d %s", resp.StatusCode, b)
	}
	_, old := h.do(http.MethodGet, credentialPath("g", a), "", nil, testToken)
	operate, _ := createToken(t, h, "operate", "")
	before, _ := h.statusList()
	for _, c := range []struct {
		name, token string
		status      int
	}{{"anonymous", "", http.StatusUnauthorized}, {"operate token", operate, http.StatusForbidden}} {
		resp, body := h.do(http.MethodPost, "/api/credentials/status/rotate", "", nil, c.token)
		expectProblem(t, resp, body, c.status, "")
		if after, _ := h.statusList(); !bytes.Equal(after, before) || h.Main.Registry.StatusListGeneration() != 0 {
			t.Fatalf("%s: a refused rotation changed the list", c.name)
		}
	}
	resp, body := h.do(http.MethodPost, "/api/credentials/status/rotate", "", nil, testToken)
	var rot struct {
		Generation, Members int
		StatusList          string
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &rot) != nil || rot.Generation != 1 || rot.Members != 1 ||
		rot.StatusList != lmos.StatusListPath+"/1" {
		t.Fatalf("rotate: %d %s", resp.StatusCode, body)
	}
	oldList, _ := h.statusList()
	resp, newList := h.do(http.MethodGet, rot.StatusList, "", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", rot.StatusList, resp.StatusCode, newList)
	}
	if _, err := vc.VerifyMembership(old, oldList, time.Now(), vc.ExpectIssuer(h.Main.DID())); !errors.Is(err, vc.ErrRevoked) {
		t.Fatalf("a credential from before the rotation: %v", err)
	}
	_, renewed := h.do(http.MethodGet, credentialPath("g", a), "", nil, testToken)
	if m, err := vc.VerifyMembership(renewed, newList, time.Now(), vc.ExpectIssuer(h.Main.DID())); err != nil || m.StatusListURL != h.URL+rot.StatusList {
		t.Fatalf("the renewed credential: %+v %v", m, err)
	}
	for _, p := range []string{"/2", "/01", "/x", "/-1"} {
		resp, body := h.do(http.MethodGet, lmos.StatusListPath+p, "", nil, "")
		expectProblem(t, resp, body, http.StatusNotFound, "")
	}
	_, td := h.do(http.MethodGet, "/.well-known/wot", "", nil, "")
	if !bytes.Contains(td, []byte(`"href":"`+strings.TrimPrefix(rot.StatusList, "/")+`"`)) {
		t.Fatalf("the directory TD does not link %s: %s", rot.StatusList, td)
	}
	// After a restart the hub is still on generation 1.
	h.Close()
	h = startHubIn(t, dir, nil)
	if g := h.Main.Registry.StatusListGeneration(); g != 1 {
		t.Fatalf("generation %d after a restart", g)
	}
	_, renewed = h.do(http.MethodGet, credentialPath("g", a), "", nil, testToken)
	_, newList = h.do(http.MethodGet, rot.StatusList, "", nil, "")
	if m, err := vc.VerifyMembership(renewed, newList, time.Now(), vc.ExpectIssuer(h.Main.DID())); err != nil || m.StatusListURL != h.URL+rot.StatusList {
		t.Fatalf("after a restart: %+v %v", m, err)
	}
}
