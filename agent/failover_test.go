package agent

import (
	"context"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// addOnce invokes add of id through cli and reports whether it answered.
func addOnce(t *testing.T, cli *Agent, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := cli.Invoke(ctx, id, "add", sum{A: 1, B: 2})
	if err != nil {
		t.Logf("invoke: %v", err)
		return false
	}
	var res struct{ Sum float64 }
	return out.Decode(&res) == nil && res.Sum == 3
}

// proxyAdd invokes add of id through the HTTP proxy of the hub h.
func proxyAdd(t *testing.T, h *testHub, id string) int {
	resp, body := h.Do(http.MethodPost, "/proxy/"+url.PathEscape(id)+"/actions/add", "application/json", []byte(`{"A":1,"B":2}`), "")
	if resp.StatusCode == http.StatusOK && !strings.Contains(string(body), `3`) {
		t.Fatalf("proxy answered %s", body)
	}
	if resp.StatusCode != http.StatusOK {
		t.Logf("proxy: %d %s", resp.StatusCode, body)
	}
	return resp.StatusCode
}

// TestFailoverToAnotherHub: an agent with a failover hub whose hub goes
// away re-joins the other hub with its key (its credentials are the first
// hub's, unknown there), within the grace and a join; a consumer agent on
// the same hub follows, and invocations resume, through the agents and
// through the surviving hub's HTTP proxy. The failover hub's credentials
// are not kept in StateDir (the agent starts again on its own hub).
func TestFailoverToAnotherHub(t *testing.T) {
	a, b := startHub(t), startHub(t)
	const id = "urn:test:failover"
	state := t.TempDir()
	srv := a.connect(id, func(o *Options) {
		o.Failover, o.FailoverGrace, o.StateDir = []string{b.url()}, 500*time.Millisecond, state
	})
	serveTestActions(srv)
	cli := a.connect("urn:test:failover-client", func(o *Options) {
		o.Failover, o.FailoverGrace, o.StateDir = []string{b.url()}, 500*time.Millisecond, t.TempDir()
	})
	if !addOnce(t, cli, id) {
		t.Fatal("no answer before the failover")
	}
	kept, err := loadCredentials(state, srv.tid)
	if err != nil || kept == nil {
		t.Fatalf("credentials kept: %v %v", kept, err)
	}
	if srv.Hub() != a.url() {
		t.Fatalf("on %s, want %s", srv.Hub(), a.url())
	}
	a.Close()
	waitFor(t, 20*time.Second, "the agent online at the other hub", func() bool { return b.presence(id) == "online" })
	if srv.Hub() != b.url() || cli.Hub() != b.url() {
		t.Errorf("agents on %s and %s, want %s", srv.Hub(), cli.Hub(), b.url())
	}
	waitFor(t, 20*time.Second, "an invocation through the other hub", func() bool { return addOnce(t, cli, id) })
	waitFor(t, 10*time.Second, "the other hub's proxy reaches the agent", func() bool { return proxyAdd(t, b, id) == http.StatusOK })
	if now, err := loadCredentials(state, srv.tid); err != nil || *now != *kept {
		t.Errorf("StateDir credentials changed to %+v (%v), want the first hub's", now, err)
	}
}

// TestFailoverOptionsRefused: failover hubs of another transport, or
// plain ones for a pinned agent, are refused at Connect with the reason.
func TestFailoverOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{URL: "mqtt://127.0.0.1:1", Failover: []string{"ws://127.0.0.1:2/ws"}}, "fails over to mqtt://"},
		{Options{URL: "mqtt://127.0.0.1:1", Failover: []string{"http://127.0.0.1:2"}}, "scheme must be mqtt://"},
		{Options{URL: "mqtts://127.0.0.1:1", TLSFingerprint: strings.Repeat("ab", 32), Failover: []string{"mqtt://127.0.0.1:2"}}, "only over TLS"},
		{Options{URL: "ws://127.0.0.1:1/ws", Failover: []string{"ws://127.0.0.1:2/ws"}}, "failover is for mqtt"},
		{Options{URL: "mqtt://127.0.0.1:1", Directory: "mqtt://x"}, "invalid Options.Directory"},
	} {
		c.opts.TD = testTD("urn:test:refused")
		_, err := Connect(ctxT(t, 5*time.Second), c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opts.Failover, err, c.want)
		}
	}
}

// pair pairs the hub h with the hub peer through h's API (POST /api/peers).
func pair(t *testing.T, h, peer *testHub) {
	t.Helper()
	var st struct{ DID string }
	peer.GetJSON("/api/status", http.StatusOK, &st)
	body := `{"url":"http://` + peer.httpAddr + `","did":"` + st.DID + `"}`
	resp, out := h.Do(http.MethodPost, "/api/peers", "application/json", []byte(body), hubtest.Token)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("pair: %d %s", resp.StatusCode, out)
	}
}

// TestFailoverLearnsPeers: an agent given its hub's directory (and no
// failover hub) learns the brokers of the hub's paired peers from its
// directory TD's lmos:peers, and fails over to one when its hub goes
// away. With NoPeerFailover it learns nothing.
func TestFailoverLearnsPeers(t *testing.T) {
	a, b := startHub(t), startHub(t)
	pair(t, a, b)
	const id = "urn:test:learns"
	srv := a.connect(id, func(o *Options) {
		o.Directory, o.FailoverGrace, o.StateDir = "http://"+a.httpAddr, 500*time.Millisecond, t.TempDir()
	})
	serveTestActions(srv)
	l := srv.link.(*mqttLink)
	waitFor(t, 10*time.Second, "the paired hub learnt", func() bool { return len(l.targetsNow()) == 2 })
	if got := l.targetsNow()[1].addr; got != b.addr {
		t.Fatalf("learnt %s, want %s", got, b.addr)
	}
	deaf := a.connect("urn:test:deaf", func(o *Options) {
		o.Directory, o.NoPeerFailover = "http://"+a.httpAddr, true
	})
	a.Close()
	waitFor(t, 20*time.Second, "the agent online at the peer", func() bool { return b.presence(id) == "online" })
	waitFor(t, 10*time.Second, "the peer's proxy reaches the agent", func() bool { return proxyAdd(t, b, id) == http.StatusOK })
	if n := len(deaf.link.(*mqttLink).targetsNow()); n != 1 {
		t.Errorf("NoPeerFailover learnt %d hubs", n-1)
	}
}
