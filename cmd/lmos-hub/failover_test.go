package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// hubProc is a hub running as a process of its own (the test binary
// re-executed as TestCrashChild runs it: `lmos-hub serve` as main does).
type hubProc struct {
	t          testing.TB
	cmd        *exec.Cmd
	stderr     *cliSyncBuffer
	exited     chan error
	http, mqtt string // bound addresses
}

var (
	httpListening = regexp.MustCompile(`msg="http listening" addr=(\S+)`)
	mqttListening = regexp.MustCompile(`msg="mqtt listening" addr=(\S+)`)
)

// startHubProc starts a hub on dir listening on the given addresses
// (127.0.0.1:0: any port) and waits until it listens.
func startHubProc(t testing.TB, dir, httpAddr, mqttAddr string) *hubProc {
	t.Helper()
	args := strings.Join([]string{"serve", "--data-dir", dir, "--http-addr", httpAddr, "--mqtt-addr", mqttAddr,
		"--mdns=false", "--admin-token", testToken, "--log-level", "info"}, " ")
	p := &hubProc{t: t, stderr: &cliSyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), "LMOS_HUB_CRASH_CHILD=1", "LMOS_HUB_CHILD_ARGS="+args)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(p.kill)
	for deadline := time.Now().Add(15 * time.Second); ; {
		h, m := httpListening.FindStringSubmatch(p.stderr.String()), mqttListening.FindStringSubmatch(p.stderr.String())
		if h != nil && m != nil {
			p.http, p.mqtt = h[1], m[1]
			return p
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("the hub process exited (%v) before listening:\n%s", err, p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub process did not listen within 15s:\n%s", p.stderr.String())
		}
	}
}

// kill sends SIGKILL and reaps the process; calling it twice is fine.
func (p *hubProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(10 * time.Second):
		p.t.Errorf("the hub process did not exit within 10s of SIGKILL")
	}
}

// thingAt reads the Thing id at the hub: its HTTP status, presence and
// origin (lmos:origin.source, and the home hub of a mirror).
type thingView struct {
	status   int
	Presence struct{ Status string }      `json:"lmos:presence"`
	Origin   struct{ Source, Hub string } `json:"lmos:origin"`
}

func thingAt(t testing.TB, base, id string) thingView {
	var v thingView
	resp, err := http.Get(base + "/things/" + url.PathEscape(id))
	if err != nil {
		return v
	}
	defer resp.Body.Close()
	v.status = resp.StatusCode
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// proxyInvoke invokes add of id through the HTTP proxy at base.
func proxyInvoke(base, id string) bool {
	resp, err := http.Post(base+"/proxy/"+url.PathEscape(id)+"/actions/add", "application/json", strings.NewReader(`{"a":1,"b":2}`))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var out struct{ Sum float64 }
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&out) == nil && out.Sum == 3
}

// failoverAgentWith connects an agent with a key, serving add, to the hub
// at mqtt with the other hubs as failover, an MQTT keep alive (0: the
// default) and the hub's directory (its lmos:peers are failover hubs too).
func failoverAgentWith(t testing.TB, id, mqtt string, keepAlive time.Duration, directory string, failover ...string) *agent.Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	a, err := agent.Connect(ctx, agent.Options{URL: "mqtt://" + mqtt, TD: map[string]any{"id": id, "title": "Mover",
		"actions": map[string]any{"add": map[string]any{}}}, StateDir: t.TempDir(), Failover: failover, Directory: directory,
		Timeout: 5 * time.Second, MaxBackoff: 2 * time.Second, KeepAlive: keepAlive, Logger: hubtest.Logger(t)})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	a.HandleAction("add", func(ctx context.Context, in agent.Input) (any, error) {
		var s struct{ A, B float64 }
		if err := in.Decode(&s); err != nil {
			return nil, err
		}
		return map[string]any{"sum": s.A + s.B}, nil
	})
	return a
}

// pairProcs pairs the hub at base with the hub at peer (admin token).
func pairProcs(t testing.TB, base, peer string) {
	t.Helper()
	var st struct{ DID string }
	resp, err := http.Get(peer + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/api/peers", strings.NewReader(`{"url":"`+peer+`","did":"`+st.DID+`"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("pair %s with %s: %d", base, peer, resp.StatusCode)
	}
}

// TestFailoverHubKilled: of two paired hub processes, the one an agent is
// on is killed with SIGKILL while a consumer invokes the agent through
// the other (forwarded): the agent, which learnt the other hub from its
// hub's lmos:peers, re-joins it with its key and invocations through that
// hub's proxy resume. The killed hub restarted on its data and ports
// mirrors the agent from B (its home now) instead of keeping its own
// stale copy, and forwards invocations there.
func TestFailoverHubKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a hub process")
	}
	dirA := t.TempDir()
	a := startHubProc(t, dirA, "127.0.0.1:0", "127.0.0.1:0")
	b := startHubProc(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0")
	baseA, baseB := "http://"+a.http, "http://"+b.http
	pairProcs(t, baseA, baseB)
	pairProcs(t, baseB, baseA)
	const id = "urn:test:mover"
	// No failover hub given: the agent learns B from A's lmos:peers.
	mover := failoverAgentWith(t, id, a.mqtt, 0, baseA)
	testwait.Eventually(t, 10*time.Second, "invocations through hub A", func() bool { return proxyInvoke(baseA, id) })
	testwait.Eventually(t, 20*time.Second, "invocations through hub B, forwarded to A", func() bool { return proxyInvoke(baseB, id) })
	// The agent reads A's lmos:peers after joining: killed before, A
	// would leave it nowhere to go.
	testwait.Eventually(t, 20*time.Second, "the agent knows hub B", func() bool { return slices.Contains(mover.Hubs(), "mqtt://"+b.mqtt) })

	a.kill()
	testwait.Eventually(t, 20*time.Second, "the agent online at hub B, B's own (no longer A's mirrored there)", func() bool {
		v := thingAt(t, baseB, id)
		return v.status == http.StatusOK && v.Origin.Source != "remote" && v.Presence.Status == "online"
	})
	if mover.Hub() != "mqtt://"+b.mqtt {
		t.Errorf("the agent is on %s, want hub B (%s)", mover.Hub(), b.mqtt)
	}
	testwait.Eventually(t, 10*time.Second, "invocations through hub B", func() bool { return proxyInvoke(baseB, id) })

	a = startHubProc(t, dirA, a.http, a.mqtt)
	// A's own copy, stored while the agent was there, gives way to B's:
	// A mirrors it, home B, online; B keeps it as its own.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v := thingAt(t, baseA, id)
		if v.status == http.StatusOK && v.Origin.Source == "remote" && v.Origin.Hub == baseB && v.Presence.Status == "online" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub A shows the agent %+v, not B's mirror online:\n%s", v, a.stderr.String())
		}
	}
	if v := thingAt(t, baseB, id); v.Origin.Source == "remote" || v.Presence.Status != "online" {
		t.Errorf("hub B shows the agent %+v after A came back", v)
	}
	testwait.Eventually(t, 10*time.Second, "invocations through hub A, forwarded to B", func() bool { return proxyInvoke(baseA, id) })
	if !proxyInvoke(baseB, id) || mover.Hub() != "mqtt://"+b.mqtt {
		t.Errorf("after A's restart the agent is on %s", mover.Hub())
	}
}
