package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// runFailoverAgent is an agent that finds its hub over mDNS, with a key,
// and says which hub it is on when asked ("hub"). args: id.
func runFailoverAgent(c *netnstest.Child, args []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "lmos-failover-agent")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	a, err := agent.Connect(ctx, agent.Options{TD: map[string]any{"id": args[0], "title": "Mover"}, StateDir: dir,
		FailoverGrace: 500 * time.Millisecond, Timeout: 5 * time.Second, MaxBackoff: 2 * time.Second, Logger: c.Log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("joined", a.Hub())
	c.Serve(func(l string) {
		if l == "hub" {
			fmt.Println("on", a.Hub())
		}
	}, func() { a.Close() })
	os.Exit(0)
}

// pairIn pairs the hub at base (in node) with peer's DID under url.
func pairIn(t *testing.T, c *http.Client, base, url, did string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/api/peers", strings.NewReader(`{"url":"`+url+`","did":"`+did+`"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", lmos.MediaJSON)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("pair at %s: %d", base, resp.StatusCode)
	}
}

// TestMDNSAgentFailover: an agent that found its hub over mDNS fails over
// to the hub's paired peer that it finds over mDNS too, when the URL the
// hubs were paired by is of no use to it (a name it cannot resolve, or an
// address changed since): the peer's DID, from the lmos:peers of its
// hub's directory TD, is what it looks for, proved by the peer's signed
// directory TD. The hub it was on is killed; the agent joins the other,
// where it is online.
func TestMDNSAgentFailover(t *testing.T) {
	lan := netnstest.New(t, []string{"h1", "h2", "ag"})
	p1, base1 := mdnsHub(t, lan, "h1", "Hub One")
	p2, base2 := mdnsHub(t, lan, "h2", "Hub Two")
	c1, c2 := lan.HTTPClient("h1"), lan.HTTPClient("h2")
	did1, did2 := statusDID(t, c1, base1), statusDID(t, c2, base2)
	pairIn(t, c1, base1, "http://hub-two.invalid:8080", did2)
	pairIn(t, c2, base2, "http://hub-one.invalid:8080", did1)

	const id = "urn:test:mdns-mover"
	ag := lan.Helper("ag", "TestMDNSChild", childEnv+"=failoveragent", "LMOS_MDNS_ARGS="+id)
	// The agent joins and reads its hub's paired hubs from the directory
	// TD (either line may come first): only then has it a hub to fail
	// over to.
	var line string
	found := false
	for line == "" || !found {
		l, ok := ag.WaitLine(30*time.Second, func(l string) bool {
			return strings.Contains(l, "joined mqtt://") || strings.Contains(l, "learnt the hub's paired hubs")
		})
		if !ok {
			t.Fatalf("the agent did not join and find its hub's peer (joined %q, found %v)", line, found)
		}
		if strings.Contains(l, "joined mqtt://") {
			line = l
		} else {
			found = true
		}
	}
	onOne := strings.Contains(line, lan.Addr("h1")+":")
	dead, other, otherBase, otherC := p1, "h2", base2, c2
	if !onOne {
		dead, other, otherBase, otherC = p2, "h1", base1, c1
	}
	testwait.Eventually(t, 10*time.Second, "the agent registered", func() bool {
		base, c := base1, c1
		if !onOne {
			base, c = base2, c2
		}
		return getThing(t, c, base, id).Presence.Status == "online"
	})
	dead.Kill()
	testwait.Eventually(t, 30*time.Second, "the agent online at the other hub, its own", func() bool {
		s := getThing(t, otherC, otherBase, id)
		return s.status == http.StatusOK && s.Origin.Source != "remote" && s.Presence.Status == "online"
	})
	ag.Send("hub")
	ag.WaitContains(10*time.Second, "on mqtt://"+lan.Addr(other)+":1883")
}
