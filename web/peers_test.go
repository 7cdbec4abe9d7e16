package web_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/regtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// peerHub is the adapter with federation: its own key, the paired peers
// in its bbolt store, and a remote hub's key to sign with.
type peerHub struct {
	*directory
	peers  *hub.Peers
	db     hub.PeerStore
	self   ed25519.PrivateKey
	remote ed25519.PrivateKey
}

func didOf(k ed25519.PrivateKey) string { return proof.DID(k.Public().(ed25519.PublicKey)) }

func newPeerHub(t *testing.T, anonymous string, maxPeers int) *peerHub {
	t.Helper()
	reg, db := regtest.Open(t, hub.RegistryOptions{})
	tokens := hub.NewTokens(db, nil)
	secret, _, err := tokens.Create("test")
	if err != nil {
		t.Fatal(err)
	}
	self := newKey(t)
	peers, err := hub.NewPeers(db, didOf(self), maxPeers, nil)
	if err != nil {
		t.Fatal(err)
	}
	access, err := hub.NewAccess(anonymous, "open", tokens)
	if err != nil {
		t.Fatal(err)
	}
	srv := web.New(reg, tokens, web.Config{HubID: db.HubID(), HubName: "test-hub", Version: "test", Key: self, Access: access, Peers: peers})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.CloseStreams)
	return &peerHub{directory: &directory{t: t, url: ts.URL, token: secret, reg: reg, srv: srv}, peers: peers, db: db, self: self, remote: newKey(t)}
}

// signed sends a request signed by key at time at (LMOS-Peer).
func (h *peerHub) signed(key ed25519.PrivateKey, at time.Time, method, path, ctype, body string) response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if err := lmos.SignPeerRequest(req, key, at); err != nil {
		h.t.Fatal(err)
	}
	return h.do(method, path, ctype, body, "Authorization", req.Header.Get("Authorization"))
}

// TestPeerRequestHasOperateRights: on a hub that lets anonymous clients do
// nothing, a paired peer's signed request reads the directory and the
// peer list, but manages nothing (never admin); the same signature from a
// hub that is not paired gets an anonymous client's rights.
func TestPeerRequestHasOperateRights(t *testing.T) {
	h := newPeerHub(t, hub.AnonymousNone, 0)
	now := time.Now()
	h.signed(h.remote, now, "GET", "/things", "", "").problem(t, "unpaired peer reads", 401, hub.EUNAUTHORIZED)
	h.do("POST", "/api/peers", lmos.MediaJSON, `{"url":"http://127.0.0.1:1","did":"`+didOf(h.remote)+`"}`).want(t, "pair", http.StatusCreated)
	h.signed(h.remote, now, "GET", "/things", "", "").want(t, "paired peer reads", http.StatusOK)
	h.signed(h.remote, now, "GET", "/api/peers", "", "").want(t, "paired peer lists peers", http.StatusOK)
	p := h.signed(h.remote, now, "POST", "/api/tokens", lmos.MediaJSON, `{"scope":"admin"}`).problem(t, "paired peer makes a token", 403, hub.EFORBIDDEN)
	if !strings.Contains(p.Detail, "peer "+didOf(h.remote)) {
		t.Fatalf("refusal %q does not name the peer", p.Detail)
	}
	h.signed(h.remote, now, "POST", "/api/peers", lmos.MediaJSON, `{"url":"http://127.0.0.1:2","did":"`+didOf(newKey(t))+`"}`).problem(t, "paired peer pairs", 403, hub.EFORBIDDEN)
	if n := len(h.peers.List()); n != 1 {
		t.Fatalf("%d peers after a peer tried to pair another, want 1", n)
	}
	var toks []tokenJSON
	h.do("GET", "/api/tokens", "", "").want(t, "tokens", http.StatusOK).json(t, &toks)
	if len(toks) != 1 {
		t.Fatalf("%d tokens after the peer's refused create, want 1", len(toks))
	}
	// Unpaired again: back to anonymous.
	h.do("DELETE", "/api/peers/"+didOf(h.remote), "", "").want(t, "unpair", http.StatusNoContent)
	h.signed(h.remote, now, "GET", "/things", "", "").problem(t, "unpaired peer reads again", 401, hub.EUNAUTHORIZED)
}

// TestBadPeerAuthorizationRefused: a present LMOS-Peer header that does
// not verify is refused 401 even where anonymous clients may operate
// (like a dead token), saying why; a request without it is anonymous.
func TestBadPeerAuthorizationRefused(t *testing.T) {
	h := newPeerHub(t, hub.AnonymousOperate, 0)
	did := didOf(h.remote)
	h.do("POST", "/api/peers", lmos.MediaJSON, `{"url":"http://127.0.0.1:1","did":"`+did+`"}`).want(t, "pair", http.StatusCreated)
	now := time.Now()
	good := lmos.SignPeer(h.remote, "GET", strings.TrimPrefix(h.url, "http://"), "/things", nil, now)
	cases := []struct{ what, header, want string }{
		{"stale", lmos.SignPeer(h.remote, "GET", strings.TrimPrefix(h.url, "http://"), "/things", nil, now.Add(-10*time.Minute)), "clock skew"},
		{"other path", lmos.SignPeer(h.remote, "GET", strings.TrimPrefix(h.url, "http://"), "/things?x=1", nil, now), "does not verify"},
		{"other host", lmos.SignPeer(h.remote, "GET", "evil:80", "/things", nil, now), "does not verify"},
		{"other key", strings.Replace(good, did, didOf(newKey(t)), 1), "does not verify"},
		{"malformed", "LMOS-Peer keyId=nope", "quoted"},
		{"not did:key", `LMOS-Peer keyId="did:web:x",created=1,signature="` + strings.Repeat("A", 86) + `"`, "did:key"},
	}
	for _, c := range cases {
		p := h.do("GET", "/things", "", "", "Authorization", c.header).problem(t, c.what, 401, hub.EUNAUTHORIZED)
		if !strings.Contains(p.Detail, "LMOS-Peer") || !strings.Contains(p.Detail, c.want) {
			t.Errorf("%s: detail %q, want it to say LMOS-Peer and %q", c.what, p.Detail, c.want)
		}
	}
	h.do("GET", "/things", "", "", "Authorization", good).want(t, "good signature", http.StatusOK)
	h.do("GET", "/things", "", "", "Authorization", "").want(t, "anonymous", http.StatusOK)
	// The body is covered: a signed write sent again with another body is
	// refused before anything is written.
	id := "urn:test:peer-body"
	signedPut := lmos.SignPeer(h.remote, "PUT", strings.TrimPrefix(h.url, "http://"), "/things/"+id, []byte(`{"title":"a"}`), now)
	p := h.do("PUT", "/things/"+id, "application/td+json", `{"id":"`+id+`","title":"b","security":"nosec_sc","securityDefinitions":{"nosec_sc":{"scheme":"nosec"}}}`,
		"Authorization", signedPut).problem(t, "another body", 401, hub.EUNAUTHORIZED)
	if !strings.Contains(p.Detail, "does not verify") {
		t.Errorf("another body: detail %q", p.Detail)
	}
	h.do("GET", "/things/"+id, "", "").want(t, "nothing stored", http.StatusNotFound)
}

// TestPeerAPI: pair, list, unpair; every refusal says why and stores
// nothing.
func TestPeerAPI(t *testing.T) {
	h := newPeerHub(t, hub.AnonymousRead, 2)
	a, b := didOf(newKey(t)), didOf(newKey(t))
	var got peerJSONView
	h.do("POST", "/api/peers", lmos.MediaJSON, `{"url":"http://hub-a.local:8080/","did":"`+a+`"}`).want(t, "pair a", http.StatusCreated).json(t, &got)
	if got.DID != a || got.URL != "http://hub-a.local:8080" || got.Added.IsZero() {
		t.Fatalf("paired %+v", got)
	}
	h.do("POST", "/api/peers", lmos.MediaJSON, `{"url":"http://hub-a.local:8080","did":"`+a+`"}`).want(t, "pair a again", http.StatusOK)
	list := func() []peerJSONView {
		var all []peerJSONView
		h.do("GET", "/api/peers", "", "", "Authorization", "").want(t, "anonymous reader lists", http.StatusOK).json(t, &all)
		return all
	}
	var rt struct{ Token string }
	h.do("POST", "/api/tokens", lmos.MediaJSON, `{"scope":"read"}`).want(t, "read token", http.StatusCreated).json(t, &rt)
	own := didOf(h.self)
	body := func(url, did string) string { return `{"url":"` + url + `","did":"` + did + `"}` }
	for _, c := range []struct {
		refusal
		detail string
	}{
		{refusal{what: "no token", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://x:1", b), header: []string{"Authorization", ""}, status: 401, code: hub.EUNAUTHORIZED}, "admin token"},
		{refusal{what: "read token", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://x:1", b), header: []string{"Authorization", "Bearer " + rt.Token}, status: 403, code: hub.EFORBIDDEN}, "scope admin"},
		{refusal{what: "ftp URL", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("ftp://x:1", b), status: 400, code: hub.EINVALID}, "invalid peer"},
		{refusal{what: "relative URL", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("x:1", b), status: 400, code: hub.EINVALID}, "invalid peer"},
		{refusal{what: "URL with credentials", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://u:p@x:1", b), status: 400, code: hub.EINVALID}, "invalid peer"},
		{refusal{what: "URL with query", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://x:1/?a=b", b), status: 400, code: hub.EINVALID}, "invalid peer"},
		{refusal{what: "no URL", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: `{"did":"` + b + `"}`, status: 400, code: hub.EINVALID}, "invalid peer"},
		{refusal{what: "bad DID", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://x:1", "did:key:zNope"), status: 400, code: hub.EINVALID}, "invalid peer"},
		{refusal{what: "did:web", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://x:1", "did:web:example.com"), status: 400, code: hub.EINVALID}, "invalid peer"},
		{refusal{what: "own DID", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://x:1", own), status: 400, code: hub.EINVALID}, "invalid peer"},
		{refusal{what: "not JSON", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: "{", status: 400, code: hub.EINVALID}, "the body must be"},
		{refusal{what: "DID at another URL", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://hub-a2:8080", a), status: 409, code: hub.ECONFLICT}, "unpair it first"},
		{refusal{what: "URL of another DID", method: "POST", path: "/api/peers", ctype: lmos.MediaJSON, body: body("http://hub-a.local:8080", b), status: 409, code: hub.ECONFLICT}, "already paired as peer"},
		{refusal{what: "unpair unknown", method: "DELETE", path: "/api/peers/" + b, status: 404, code: hub.ENOTFOUND}, "no paired peer"},
		{refusal{what: "unpair with a read token", method: "DELETE", path: "/api/peers/" + a, header: []string{"Authorization", "Bearer " + rt.Token}, status: 403, code: hub.EFORBIDDEN}, "scope admin"},
	} {
		r := c.check(t, h.directory)
		if !strings.Contains(string(r.body), c.detail) {
			t.Errorf("%s: %s does not say %q", c.what, r.body, c.detail)
		}
		if all := list(); len(all) != 1 || all[0].DID != a || all[0].URL != "http://hub-a.local:8080" {
			t.Fatalf("%s: the peers changed: %+v", c.what, all)
		}
	}
	// The field errors say which member is wrong.
	var p struct {
		Errors []lmos.FieldError `json:"validationErrors"`
	}
	raw := h.do("POST", "/api/peers", lmos.MediaJSON, body("http://u:p@x:1", own)).want(t, "both wrong", 400).body
	if err := json.Unmarshal(raw, &p); err != nil || !strings.Contains(string(raw), "/url") || !strings.Contains(string(raw), "own DID") {
		t.Fatalf("field errors %s (%v)", raw, err)
	}
	h.do("POST", "/api/peers", lmos.MediaJSON, body("https://hub-b:8443", b)).want(t, "pair b", http.StatusCreated)
	c := didOf(newKey(t))
	r := h.do("POST", "/api/peers", lmos.MediaJSON, body("http://hub-c:8080", c)).problem(t, "third peer over the limit", 507, hub.EFULL)
	if !strings.Contains(r.Detail, "federation.maxPeers") {
		t.Fatalf("limit refusal %q", r.Detail)
	}
	if n := len(list()); n != 2 {
		t.Fatalf("%d peers after the refused third, want 2", n)
	}
	// The directory TD lists the peers (lmos:peers).
	var td map[string]any
	h.do("GET", "/.well-known/wot", "", "").want(t, "directory TD", http.StatusOK).json(t, &td)
	peers, _ := td["lmos:peers"].([]any)
	urls := map[any]any{}
	for _, p := range peers {
		urls[p.(map[string]any)["did"]] = p.(map[string]any)["url"]
	}
	if len(peers) != 2 || urls[a] != "http://hub-a.local:8080" || urls[b] != "https://hub-b:8443" {
		t.Fatalf("lmos:peers %v", td["lmos:peers"])
	}
	h.do("DELETE", "/api/peers/"+a, "", "").want(t, "unpair a", http.StatusNoContent)
	if all := list(); len(all) != 1 || all[0].DID != b {
		t.Fatalf("after unpairing a: %+v", all)
	}
	// Kept in the store: a new Peers over it sees the same.
	again, err := hub.NewPeers(h.db, didOf(h.self), 2, nil)
	if err != nil || len(again.List()) != 1 || again.List()[0].DID != b {
		t.Fatalf("reloaded peers %+v, %v", again, err)
	}
}

type peerJSONView struct {
	DID   string         `json:"did"`
	URL   string         `json:"url"`
	Added time.Time      `json:"added"`
	Link  *hub.LinkState `json:"link"`
}

// TestUnpairedPeerStreamEnds: a peer's open change feed ends with an
// error event once it is unpaired, as a stream of a revoked token does.
func TestUnpairedPeerStreamEnds(t *testing.T) {
	h := newPeerHub(t, hub.AnonymousNone, 0)
	h.do("POST", "/api/peers", lmos.MediaJSON, `{"url":"http://127.0.0.1:1","did":"`+didOf(h.remote)+`"}`).want(t, "pair", http.StatusCreated)
	// A feed that stays open fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	if err := lmos.SignPeerRequest(req, h.remote, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("peer's feed: %d", resp.StatusCode)
	}
	h.do("DELETE", "/api/peers/"+didOf(h.remote), "", "").want(t, "unpair", http.StatusNoContent)
	h.do("PUT", "/things/urn:example:after", "application/td+json", string(tdgen.MakeTD("urn:example:after", "after"))).want(t, "a change", http.StatusCreated)
	body, err := io.ReadAll(resp.Body) // ends: the hub closes the stream
	if err != nil {
		t.Fatalf("the unpaired peer's feed did not end: %v (%s)", err, body)
	}
	if !strings.Contains(string(body), "event: error") || !strings.Contains(string(body), "was unpaired") || strings.Contains(string(body), "thing_created") {
		t.Fatalf("the unpaired peer's feed: %s", body)
	}
}
