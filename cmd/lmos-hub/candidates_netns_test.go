package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// candidateList is GET /api/peers/candidates of the hub at base.
type candidateList struct {
	Candidates []struct {
		DID, URL, Name string
		LastSeen       time.Time
		Paired         bool
	}
}

func candidatesOf(t *testing.T, c *http.Client, base string) (candidateList, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/peers/candidates", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l candidateList
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
			t.Fatal(err)
		}
	}
	return l, resp.StatusCode
}

// statusDID is the DID in GET /api/status of the hub at base.
func statusDID(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	var st struct{ DID string }
	getJSONIn(t, c, base+"/api/status", &st)
	return st.DID
}

// TestMDNSPeerCandidates: two hubs on one LAN list each other, and not
// themselves, as peer candidates, with the DID their status shows and the
// URL pairing takes; a Thing announced over mDNS and a directory that is
// not an lmos-hub (its TD unsigned) are no candidates. Seeing a candidate
// changes nothing else: a Thing registered at one hub is not listed by the
// other. A candidate an admin pairs says so (paired). A hub gone
// (goodbye) leaves the other's list.
func TestMDNSPeerCandidates(t *testing.T) {
	lan := netnstest.New(t, []string{"h1", "h2", "x"})
	h1, base1 := mdnsHub(t, lan, "h1", "Hub One")
	h2, base2 := mdnsHub(t, lan, "h2", "Hub Two")
	c1, c2 := lan.HTTPClient("h1"), lan.HTTPClient("h2")
	did1, did2 := statusDID(t, c1, base1), statusDID(t, c2, base2)
	if !strings.HasPrefix(did1, "did:key:") || did1 == did2 {
		t.Fatalf("DIDs %q %q", did1, did2)
	}
	thing := lan.Helper("x", "TestMDNSChild", childEnv+"=agent", "LMOS_MDNS_ARGS=urn:test:x|Lamp|0")
	thing.WaitContains(10*time.Second, "advertised")
	fake := lan.Helper("x", "TestMDNSChild", childEnv+"=directory", "LMOS_MDNS_ARGS=Not A Hub|8081")
	fake.WaitContains(10*time.Second, "advertised")
	// A Thing registered at h2 only.
	putThingIn(t, c2, base2, "urn:test:only-h2")

	for _, h := range []struct {
		c              *http.Client
		base, peerName string
		peerDID, peer  string
	}{{c1, base1, "Hub Two", did2, base2}, {c2, base2, "Hub One", did1, base1}} {
		testwait.Eventually(t, 15*time.Second, h.base+" lists "+h.peerName, func() bool {
			l, code := candidatesOf(t, h.c, h.base)
			return code == http.StatusOK && len(l.Candidates) == 1 && l.Candidates[0].DID == h.peerDID &&
				l.Candidates[0].URL == h.peer && l.Candidates[0].Name == h.peerName && !l.Candidates[0].LastSeen.IsZero() &&
				!l.Candidates[0].Paired
		})
	}
	// Both the Thing and the fake directory were looked at by now (the
	// Thing is registered; the fake's TD was fetched): still one each.
	testwait.Eventually(t, 10*time.Second, "the Lamp registered at h1", func() bool {
		return getThing(t, c1, base1, "urn:test:x").status == http.StatusOK
	})
	for _, h := range []*netnstest.Proc{h1, h2} {
		h.WaitContains(10*time.Second, "not a peer candidate", "Not A Hub", "not signed by its key")
	}
	for _, h := range []struct {
		c    *http.Client
		base string
	}{{c1, base1}, {c2, base2}} {
		if l, _ := candidatesOf(t, h.c, h.base); len(l.Candidates) != 1 {
			t.Errorf("%s candidates %+v", h.base, l)
		}
	}
	// Only proposed: nothing of h2 is listed at h1.
	if s := getThing(t, c1, base1, "urn:test:only-h2"); s.status != http.StatusNotFound {
		t.Errorf("h2's Thing at h1: %d", s.status)
	}
	// Not an admin: refused, nothing listed.
	resp, err := c1.Get(base1 + "/api/peers/candidates")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d", resp.StatusCode)
	}
	// Paired by an admin: the candidate says so.
	req, _ := http.NewRequest(http.MethodPost, base1+"/api/peers", strings.NewReader(`{"url":"`+base2+`","did":"`+did2+`"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", lmos.MediaJSON)
	resp, err = c1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("pair: %d", resp.StatusCode)
	}
	if l, _ := candidatesOf(t, c1, base1); len(l.Candidates) != 1 || !l.Candidates[0].Paired {
		t.Errorf("after pairing: %+v", l)
	}
	h2.Stop()
	testwait.Eventually(t, 10*time.Second, "Hub Two gone from h1's candidates", func() bool {
		l, _ := candidatesOf(t, c1, base1)
		return len(l.Candidates) == 0
	})
}

// putThingIn registers a bare Thing at the hub at base with the admin token.
func putThingIn(t *testing.T, c *http.Client, base, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, base+"/things/"+id, strings.NewReader(string(hubtest.BareTD(id, "Only"))))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", lmos.MediaTD)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT %s: %d", id, resp.StatusCode)
	}
}

// runFakeDirectory advertises a _directory._sub._wot._tcp that looks like
// an lmos-hub (a ThingDirectory with an lmos:broker link) but whose TD is
// not signed. args: name|port.
func runFakeDirectory(c *netnstest.Child, args []string) {
	ln, err := net.Listen("tcp", ":"+args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	td := `{"@context":"https://www.w3.org/2022/wot/td/v1.1","@type":"ThingDirectory","id":"urn:test:fake","title":"Fake",` +
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc","links":[{"rel":"lmos:broker","href":"mqtt://127.0.0.1:1883"}]}`
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(td))
		fmt.Println("served", r.URL.Path)
	}))
	port := ln.Addr().(*net.TCPAddr).Port
	a, err := dnssd.Advertise(context.Background(), dnssd.AdvertiserConfig{Host: "fakedir", Interfaces: []string{"eth0"}, Logger: c.Log},
		dnssd.Service{Instance: args[0], Type: lmos.ServiceWoT, Subtypes: []string{lmos.SubtypeDirectory}, Port: port,
			Text: []string{lmos.TXTPath + "=" + lmos.DirectoryPath, lmos.TXTType + "=" + lmos.TypeDirectory, lmos.TXTScheme + "=http"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("advertised", a.Services()[0].Instance)
	c.Serve(nil, func() { a.Close() })
	os.Exit(0)
}
