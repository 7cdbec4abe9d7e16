package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

const claimChildEnv = "LMOS_MDNS_CLAIM_CHILD"

// TestMDNSClaimChild is not a test: TestMDNSStrangerCannotClaimAnApprovedThing
// re-executes the binary to run an agent announcing a TD signed by a key
// of its own (args id|title).
func TestMDNSClaimChild(t *testing.T) {
	c := netnstest.StartChild(t, claimChildEnv)
	args := strings.Split(os.Getenv("LMOS_MDNS_ARGS"), "|")
	_, key, err := ed25519.GenerateKey(nil)
	if err == nil {
		var td []byte
		if td, err = proof.Sign(hubtest.BareTD(args[0], args[1]), key, time.Now()); err == nil {
			var a *agent.Advertisement
			a, err = agent.Advertise(context.Background(), agent.AdvertiseOptions{
				TD: td, Addr: ":8000", Interfaces: []string{"eth0"}, Logger: c.Log})
			if err == nil {
				fmt.Printf("advertised %s\n", a.Name())
				c.Serve(nil, func() { a.Close() })
			}
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// Issue 24, point 1, over mDNS in network namespaces: under join.mode
// approve an agent on a1 announces F (unsigned) and an admin approves it
// while it is alive. An instance on a2 announcing F with a TD signed by
// its own key is refused ("registered from another address") and changes
// nothing: F stays unbound, unverified, with its title; the real agent's
// next announcement is taken.
func TestMDNSStrangerCannotClaimAnApprovedThing(t *testing.T) {
	lan := netnstest.New(t, []string{"hub", "a1", "a2"}, "a1", "a2")
	hubProc, base := startMDNSHubWith(t, t.TempDir(), lan, "hub", "Test Hub", "join:\n  mode: approve\n")
	c := lan.HTTPClient("hub")
	const id = "urn:test:claimed"
	do := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	a1 := lan.Helper("a1", "TestMDNSChild", childEnv+"=agent", "LMOS_MDNS_ARGS="+id+"|Plug|0")
	a1.WaitContains(10*time.Second, "advertised")
	testwait.Eventually(t, 10*time.Second, "F waits for approval", func() bool {
		_, body := do(http.MethodGet, "/api/join")
		return strings.Contains(body, id)
	})
	if st, body := do(http.MethodPost, "/api/join/pending/"+url.PathEscape(id)+"/approve"); st != http.StatusNoContent {
		t.Fatalf("approve: %d %s", st, body)
	}
	type view struct {
		Title    string `json:"title"`
		Verified string `json:"lmos:verified"`
	}
	read := func() (v view, binding int) {
		st, body := do(http.MethodGet, "/things/"+url.PathEscape(id))
		if st != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
			t.Fatalf("GET F: %d %s", st, body)
		}
		binding, _ = do(http.MethodGet, "/api/things/"+url.PathEscape(id)+"/binding")
		return v, binding
	}
	if v, b := read(); v.Title != "Plug" || v.Verified != "" || b != http.StatusNotFound {
		t.Fatalf("approved F: %+v, binding %d", v, b)
	}

	evil := lan.Helper("a2", "TestMDNSClaimChild", claimChildEnv+"=signed", "LMOS_MDNS_ARGS="+id+"|Evil")
	evil.WaitContains(10*time.Second, "advertised")
	// The hub's answer to the stranger: refused, or (the hole) registered.
	line, ok := hubProc.WaitLine(15*time.Second, func(l string) bool {
		return strings.Contains(l, id) && strings.Contains(l, "instance=Evil") &&
			(strings.Contains(l, "mdns thing refused") || strings.Contains(l, "mdns thing registered"))
	})
	if !ok || !strings.Contains(line, "mdns thing refused") || !strings.Contains(line, "registered from another address") {
		t.Errorf("the stranger's announcement: %q, want refused as registered from another address", line)
	}
	if v, b := read(); v.Title != "Plug" || v.Verified != "" || b != http.StatusNotFound {
		t.Errorf("after the stranger's claim: %+v, binding %d", v, b)
	}
	evil.Stop()

	a1.Send("title Brighter")
	a1.WaitContains(5*time.Second, "retitled")
	testwait.Eventually(t, 10*time.Second, "the real agent's new title", func() bool { v, _ := read(); return v.Title == "Brighter" })
}
