package agent

import (
	"context"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
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
	// The consumer invokes all along, through the hub's going away.
	var answered atomic.Int64
	stop := make(chan struct{})
	looped := make(chan struct{})
	go func() {
		defer close(looped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if addOnce(t, cli, id) {
				answered.Add(1)
			} else {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	defer func() { close(stop); <-looped }()
	waitFor(t, 10*time.Second, "invocations before the hub goes", func() bool { return answered.Load() > 0 })
	a.Close()
	waitFor(t, 20*time.Second, "the agent online at the other hub", func() bool { return b.presence(id) == "online" })
	if srv.Hub() != b.url() || cli.Hub() != b.url() {
		t.Errorf("agents on %s and %s, want %s", srv.Hub(), cli.Hub(), b.url())
	}
	before := answered.Load()
	waitFor(t, 20*time.Second, "invocations through the other hub", func() bool { return answered.Load() > before })
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
		{Options{URL: "ws://127.0.0.1:1/ws", Failover: []string{"mqtt://127.0.0.1:2"}}, "fails over to ws://"},
		{Options{URL: "wss://127.0.0.1:1/ws", TLSFingerprint: strings.Repeat("ab", 32), Failover: []string{"ws://127.0.0.1:2/ws"}}, "only over TLS"},
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
	waitFor(t, 10*time.Second, "the paired hub learnt", func() bool { return len(srv.Hubs()) == 2 })
	if got := srv.Hubs(); got[0] != srv.Hub() || got[1] != "mqtt://"+b.addr {
		t.Fatalf("Hubs %v, want the agent's own (%s), then mqtt://%s", got, srv.Hub(), b.addr)
	}
	deaf := a.connect("urn:test:deaf", func(o *Options) {
		o.Directory, o.NoPeerFailover = "http://"+a.httpAddr, true
	})
	a.Close()
	waitFor(t, 20*time.Second, "the agent online at the peer", func() bool { return b.presence(id) == "online" })
	waitFor(t, 10*time.Second, "the peer's proxy reaches the agent", func() bool { return proxyAdd(t, b, id) == http.StatusOK })
	if got := deaf.Hubs(); len(got) != 1 {
		t.Errorf("NoPeerFailover: Hubs %v", got)
	}
}

// servedTD is the Thing id as the hub h serves it (enriched, with its
// proof), what a federation peer's puller reads.
func servedTD(t *testing.T, h *testHub, id string) []byte {
	t.Helper()
	resp, body := h.Do(http.MethodGet, "/things/"+url.PathEscape(id), "", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", id, resp.StatusCode, body)
	}
	return body
}

// listed returns how often id is listed by h's GET /things, and its
// origin and presence.
func listed(t *testing.T, h *testHub, id string) (n int, source, home, presence string) {
	t.Helper()
	var things []struct {
		ID       string                       `json:"id"`
		Origin   struct{ Source, Hub string } `json:"lmos:origin"`
		Presence struct{ Status string }      `json:"lmos:presence"`
	}
	h.GetJSON("/things", http.StatusOK, &things)
	for _, th := range things {
		if th.ID == id {
			n++
			source, home, presence = th.Origin.Source, th.Origin.Hub, th.Presence.Status
		}
	}
	return n, source, home, presence
}

// TestMovedAgentHomeFollows: the hub side of a moved agent, with the
// mirrors a federation's pullers make (Registry.Mirror, as they call it).
// Agent on A, mirrored at B → A goes away → the agent re-joins B with its
// key: B takes it as its own (no longer a mirror), online → A restarted
// on its data: a copy of A's stale local Thing offered to B is refused
// (B's is online here); A pulling B's copy replaces its own offline one
// (the key's proof verifies): the Thing is listed once on both hubs, its
// home B, online.
func TestMovedAgentHomeFollows(t *testing.T) {
	dirA := t.TempDir()
	a := &testHub{t: t, log: testLogger(t), link: "mqtt"}
	a.start(dirA, "127.0.0.1:0", "127.0.0.1:0")
	b := startHub(t)
	urlA, urlB := "http://"+a.httpAddr, "http://"+b.httpAddr
	const id = "urn:test:moved"
	srv := a.connect(id, func(o *Options) {
		o.Failover, o.FailoverGrace, o.StateDir = []string{b.url()}, 500*time.Millisecond, t.TempDir()
	})
	serveTestActions(srv)
	ctx := ctxT(t, 30*time.Second)
	if _, err := b.reg.Mirror(ctx, id, servedTD(t, a, id), urlA); err != nil {
		t.Fatalf("B mirrors the agent from A: %v", err)
	}
	if n, src, home, _ := listed(t, b, id); n != 1 || src != "remote" || home != urlA {
		t.Fatalf("at B before the move: %d %s %s", n, src, home)
	}
	staleA := servedTD(t, a, id)

	a.Close()
	waitFor(t, 20*time.Second, "the agent online at B as B's own", func() bool {
		n, src, _, presence := listed(t, b, id)
		return n == 1 && src != "remote" && presence == "online"
	})

	a.start(dirA, a.addr, a.httpAddr)
	if _, err := b.reg.Mirror(ctx, id, staleA, urlA); err == nil {
		t.Errorf("B took A's stale copy over its online agent")
	}
	if n, src, _, presence := listed(t, b, id); n != 1 || src == "remote" || presence != "online" {
		t.Errorf("at B after A's stale copy: %d %s %s", n, src, presence)
	}
	if _, err := a.reg.Mirror(ctx, id, servedTD(t, b, id), urlB); err != nil {
		t.Fatalf("A mirrors the moved agent from B: %v", err)
	}
	for name, h := range map[string]*testHub{"A": a, "B": b} {
		n, src, home, presence := listed(t, h, id)
		wantSrc, wantHome := "remote", urlB
		if h == b {
			wantSrc, wantHome = src, ""
		}
		if n != 1 || src != wantSrc || home != wantHome || presence != "online" || (h == b && src == "remote") {
			t.Errorf("at %s: listed %d, origin %s %s, %s", name, n, src, home, presence)
		}
	}
	waitFor(t, 10*time.Second, "B's proxy reaches the agent", func() bool { return proxyAdd(t, b, id) == http.StatusOK })
	if srv.Hub() != b.url() {
		t.Errorf("the agent went back to %s", srv.Hub())
	}
}

// TestFailoverFromFrozenHub: a hub that goes silent (its connections
// stay open, nothing is answered: unplugged or hung) is noticed by the
// keep alive, and the attempts to reach it again end with the grace, not
// with the agent's Timeout (an hour here): the agent moves to the other
// hub.
func TestFailoverFromFrozenHub(t *testing.T) {
	a, b := startHub(t), startHub(t)
	r := startFreezer(t, a.addr)
	const id = "urn:test:frozen"
	srv := a.connect(id, func(o *Options) {
		o.URL, o.Timeout, o.KeepAlive = "mqtt://"+r.addr, time.Hour, time.Second
		o.Failover, o.FailoverGrace, o.StateDir = []string{b.url()}, 500*time.Millisecond, t.TempDir()
	})
	serveTestActions(srv)
	r.frozen.Store(true)
	waitFor(t, 30*time.Second, "the agent online at the other hub", func() bool { return b.presence(id) == "online" })
	if srv.Hub() != b.url() {
		t.Errorf("on %s, want %s", srv.Hub(), b.url())
	}
	waitFor(t, 10*time.Second, "the other hub's proxy reaches the agent", func() bool { return proxyAdd(t, b, id) == http.StatusOK })
}

// freezer forwards TCP connections to a hub until frozen; then, as a hub
// that went silent, it forwards nothing either way and accepts new
// connections that it never answers, keeping them all open.
type freezer struct {
	addr   string
	frozen atomic.Bool
}

func startFreezer(t *testing.T, to string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	f := &freezer{addr: ln.Addr().String()}
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			if !f.frozen.Load() {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if f.frozen.Load() {
				continue // held open, never answered
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, up)
			mu.Unlock()
			go pipe(c, up)
			go pipe(up, c)
		}
	}()
	return f
}

// TestMovedAgentFederated: the same moves between two paired hubs, with
// the federation's own mirrors. The agent, on A, learns B from A's
// lmos:peers; B mirrors it (home A) and B's proxy reaches it through A.
// A goes away: the agent re-joins B, which takes it as its own, and B's
// proxy reaches it. A restarted on its data mirrors it from B instead of
// keeping its own stale copy: listed once on both hubs, home B, online,
// and B keeps it as its own. B goes away in turn: the agent goes back to
// A with A's credentials, and A takes it back.
func TestMovedAgentFederated(t *testing.T) {
	dirA := t.TempDir()
	a := &testHub{t: t, log: testLogger(t), link: "mqtt"}
	a.start(dirA, "127.0.0.1:0", "127.0.0.1:0")
	b := startHub(t)
	pair(t, a, b)
	pair(t, b, a)
	urlA, urlB := "http://"+a.httpAddr, "http://"+b.httpAddr
	const id = "urn:test:federated"
	srv := a.connect(id, func(o *Options) {
		o.Directory, o.FailoverGrace, o.StateDir = urlA, 500*time.Millisecond, t.TempDir()
	})
	serveTestActions(srv)
	home := func(h *testHub, n int, src, at, presence string) func() bool {
		return func() bool {
			gotN, gotSrc, gotAt, gotPresence := listed(t, h, id)
			return gotN == n && (gotSrc == "remote") == (src == "remote") && gotAt == at && gotPresence == presence
		}
	}
	waitFor(t, 20*time.Second, "B mirrors the agent, home A", home(b, 1, "remote", urlA, "online"))
	waitFor(t, 10*time.Second, "the agent learnt B", func() bool { return len(srv.link.(*mqttLink).targetsNow()) == 2 })
	waitFor(t, 10*time.Second, "B's proxy reaches the agent on A", func() bool { return proxyAdd(t, b, id) == http.StatusOK })

	a.Close()
	waitFor(t, 20*time.Second, "the agent B's own, online", home(b, 1, "mqtt", "", "online"))
	waitFor(t, 10*time.Second, "B's proxy reaches the agent on B", func() bool { return proxyAdd(t, b, id) == http.StatusOK })

	a.start(dirA, a.addr, a.httpAddr)
	waitFor(t, 20*time.Second, "A mirrors the agent, home B", home(a, 1, "remote", urlB, "online"))
	if !home(b, 1, "mqtt", "", "online")() {
		n, src, at, presence := listed(t, b, id)
		t.Errorf("at B after A came back: %d %s %s %s", n, src, at, presence)
	}
	waitFor(t, 10*time.Second, "A's proxy reaches the agent on B", func() bool { return proxyAdd(t, a, id) == http.StatusOK })

	b.Close()
	waitFor(t, 20*time.Second, "the agent A's own again, online", home(a, 1, "mqtt", "", "online"))
	waitFor(t, 10*time.Second, "A's proxy reaches the agent on A", func() bool { return proxyAdd(t, a, id) == http.StatusOK })
}

// TestFailoverWebSocket: a WebSocket agent fails over as an MQTT one does:
// to the hub of Options.Failover, or to a paired peer it learnt from the
// lmos:peers of its hub's directory (Options.Directory), registering
// its signed TD there; the consumer's invocations through that hub's
// proxy resume.
func TestFailoverWebSocket(t *testing.T) {
	for _, learn := range []bool{false, true} {
		t.Run(map[bool]string{false: "given", true: "learnt"}[learn], func(t *testing.T) {
			a, b := startHub(t), startHub(t)
			a.link, b.link = "ws", "ws"
			if learn {
				pair(t, a, b)
			}
			const id = "urn:test:ws-failover"
			srv := a.connect(id, func(o *Options) {
				o.FailoverGrace, o.StateDir = 500*time.Millisecond, t.TempDir()
				if !learn {
					o.Failover = []string{b.url()}
				} else {
					o.Directory = "http://" + a.httpAddr
				}
			})
			serveTestActions(srv)
			if learn {
				waitFor(t, 10*time.Second, "the paired hub learnt", func() bool { return len(srv.link.(*wsLink).urlsNow()) == 2 })
			}
			waitFor(t, 10*time.Second, "A's proxy reaches the agent", func() bool { return proxyAdd(t, a, id) == http.StatusOK })
			a.Close()
			waitFor(t, 20*time.Second, "the agent online at B", func() bool {
				n, src, _, presence := listed(t, b, id)
				return n == 1 && src != "remote" && presence == "online"
			})
			if srv.Hub() != b.url() {
				t.Errorf("on %s, want %s", srv.Hub(), b.url())
			}
			waitFor(t, 10*time.Second, "B's proxy reaches the agent", func() bool { return proxyAdd(t, b, id) == http.StatusOK })
		})
	}
}

// TestFailoverWebSocketFromFrozenHub: a WebSocket agent notices a hub gone
// silent by its pings (Options.KeepAlive) and fails over.
func TestFailoverWebSocketFromFrozenHub(t *testing.T) {
	a, b := startHub(t), startHub(t)
	a.link, b.link = "ws", "ws"
	r := startFreezer(t, a.httpAddr)
	const id = "urn:test:ws-frozen"
	srv := a.connect(id, func(o *Options) {
		o.URL, o.Timeout, o.KeepAlive = "ws://"+r.addr+"/ws", time.Hour, time.Second
		o.Failover, o.FailoverGrace, o.StateDir = []string{b.url()}, 500*time.Millisecond, t.TempDir()
	})
	serveTestActions(srv)
	r.frozen.Store(true)
	waitFor(t, 30*time.Second, "the agent online at the other hub", func() bool { return b.presence(id) == "online" })
	waitFor(t, 10*time.Second, "the other hub's proxy reaches the agent", func() bool { return proxyAdd(t, b, id) == http.StatusOK })
}
