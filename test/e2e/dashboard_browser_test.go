package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// chromiumPath is Debian's Chromium, which `make test` installs (package
// chromium). Without it the browser tests skip, except where they must
// run: in CI, or with LMOS_INTEROP=1 as `make test` sets.
func chromiumPath(t testing.TB) string {
	t.Helper()
	const exe = "/usr/bin/chromium"
	if _, err := os.Stat(exe); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("Debian chromium not installed (run scripts/test-deps.sh as root): %v", err)
		}
		t.Skipf("skipping: the dashboard's browser tests need Debian chromium (%s), which `make test` installs; set CI or LMOS_INTEROP=1 to make this a failure", exe)
	}
	return exe
}

// browser is a session of test/interop/dashboard-browser.mjs: headless
// Chromium on the dashboard, one page for the whole session, driven by
// commands, answering with verdicts (see the script's header).
type browser struct {
	parent *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan map[string]any
	exited chan struct{}
	stderr hubtest.SyncBuffer
	mu     sync.Mutex
	bad    []string // lines that are no report: harness failures
}

func startBrowser(t *testing.T, hubURL, shots string, env ...string) *browser {
	t.Helper()
	exe := chromiumPath(t)
	script := hubtest.InteropScript(t, "dashboard-browser.mjs", "playwright-core")
	b := &browser{parent: t, lines: make(chan map[string]any, 1024), exited: make(chan struct{})}
	// The script bounds each of its steps; this bounds the whole session
	// should it hang anyway.
	b.cmd = exec.Command("node", script, hubURL, hubtest.Token, shots, exe)
	if len(env) > 0 {
		b.cmd.Env = append(os.Environ(), env...)
	}
	b.cmd.Stderr = &b.stderr
	b.stdin, _ = b.cmd.StdinPipe()
	stdout, _ := b.cmd.StdoutPipe()
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(b.exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"error": fmt.Sprintf("not JSON: %q", sc.Text())}
			}
			select {
			case b.lines <- m:
			default:
				b.mu.Lock()
				b.bad = append(b.bad, "more than 1024 unread reports")
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		_ = b.stdin.Close() // the script closes Chromium and exits
		select {
		case <-b.exited:
		case <-time.After(30 * time.Second):
			_ = b.cmd.Process.Kill()
		}
		if err := b.cmd.Wait(); err != nil && !t.Failed() {
			t.Errorf("dashboard-browser.mjs exited: %v\n%s", err, b.stderr.String())
		}
	})
	for {
		m := b.next(t, 60*time.Second)
		switch {
		case m["ready"] != nil:
			t.Logf("Chromium %v on %v", m["browser"], m["ready"])
			return b
		case m["pageError"] != nil:
			t.Errorf("page error while loading: %v", m["pageError"])
		case m["info"] != nil:
			t.Logf("page: %v", m["info"])
		default:
			t.Fatalf("dashboard-browser.mjs did not start: %v\n%s", m, b.stderr.String())
		}
	}
}

// next is the script's next line within d.
func (b *browser) next(t *testing.T, d time.Duration) map[string]any {
	t.Helper()
	select {
	case m := <-b.lines:
		return m
	case <-b.exited:
		select {
		case m := <-b.lines:
			return m
		default:
		}
		t.Fatalf("dashboard-browser.mjs exited\n%s", b.stderr.String())
	case <-time.After(d):
		t.Fatalf("dashboard-browser.mjs: nothing within %v\n%s", d, b.stderr.String())
	}
	return nil
}

// run sends one command and reads until the script is done with it: a
// failed check, a page error (console error, uncaught exception, failed
// request, HTTP error answer) or a harness error fails t. It returns the
// command's other reports.
func (b *browser) run(t *testing.T, c map[string]any) []map[string]any {
	t.Helper()
	line, _ := json.Marshal(c)
	if _, err := b.stdin.Write(append(line, '\n')); err != nil {
		t.Fatalf("dashboard-browser.mjs: write command: %v", err)
	}
	var out []map[string]any
	for {
		// Every step of the script ends within its own 15 s; a command
		// is a handful of steps.
		m := b.next(t, 5*time.Minute)
		switch {
		case m["done"] != nil:
			if m["done"] != c["cmd"] {
				t.Fatalf("dashboard-browser.mjs: done %v for command %v", m["done"], c["cmd"])
			}
			b.mu.Lock()
			for _, e := range b.bad {
				t.Errorf("dashboard-browser.mjs: %s", e)
			}
			b.bad = nil
			b.mu.Unlock()
			return out
		case m["check"] != nil:
			if m["pass"] == true {
				t.Logf("ok   %v: %v", m["check"], m["detail"])
			} else {
				t.Errorf("FAIL %v: %v", m["check"], m["detail"])
			}
		case m["pageError"] != nil:
			t.Errorf("page error during %v: %v", c["cmd"], m["pageError"])
		case m["info"] != nil:
			t.Logf("page: %v", m["info"])
		case m["error"] != nil:
			t.Fatalf("dashboard-browser.mjs: %v\n%s", m["error"], b.stderr.String())
		default:
			out = append(out, m)
		}
	}
}

// Dashboard Things of the browser test.
const (
	dashThermo    = "urn:lmos:test:greenhouse-thermostat" // Go agent, MQTT
	dashLamp      = "urn:lmos:test:porch-lamp"            // Go agent, WebSocket
	dashJS        = "urn:example:js-agent"                // mqtt.js agent
	dashLate      = "urn:lmos:test:late-sensor"           // started while the page watches
	dashRemote    = "urn:lmos:test:barn-sensor"           // on a paired hub, mirrored here
	dashPending   = "urn:lmos:test:pending-doorbell"      // waits for approval
	dashPermitted = "urn:lmos:test:permitted-plug"        // joins in the page's permit window
	dashHostile   = "urn:lmos:test:hostile"               // TD text is HTML and script
)

// thermostatTD: a capability only its lmos:capabilities names
// ("humidity"), a plain action with a generated form (number with bounds,
// enum), a streamed action, an observable writable property, an event and
// the group action every Go agent here serves.
func thermostatTD() map[string]any {
	return map[string]any{
		"@type": "lmos:Agent", "id": dashThermo, "title": "Greenhouse thermostat",
		"description": "Keeps the greenhouse at its setpoint.",
		"lmos:capabilities": []any{map[string]any{
			"id": "climate-control", "name": "climate control", "version": "1.0.0",
			"description": "regulates humidity and temperature of plant beds",
			"examples":    []any{"make the seedlings warmer"},
		}},
		"properties": map[string]any{"level": map[string]any{"type": "number", "observable": true}},
		"actions": map[string]any{
			"setpoint": map[string]any{"input": map[string]any{"type": "object", "required": []any{"celsius"},
				"properties": map[string]any{
					"celsius": map[string]any{"type": "number", "minimum": 5, "maximum": 35},
					"mode":    map[string]any{"type": "string", "enum": []any{"eco", "comfort"}},
				}}, "output": map[string]any{"type": "object"}},
			"count": map[string]any{"input": map[string]any{"type": "object",
				"properties": map[string]any{"n": map[string]any{"type": "integer", "minimum": 0, "maximum": 10}, "tag": map[string]any{"type": "string"}}},
				"output": map[string]any{"type": "object"}},
			"ping": map[string]any{"output": map[string]any{"type": "object"}},
		},
		"events": map[string]any{"tick": map[string]any{"data": map[string]any{"type": "object"}}},
	}
}

// dashAgent connects a Go agent (mqtt:// or ws://) serving td and ping;
// t is the whole test's (the agent logs to it and lives until it ends),
// whichever subtest starts it.
func dashAgent(t *testing.T, ctx context.Context, url string, td map[string]any) (*agent.Agent, error) {
	id := td["id"].(string)
	a, err := agent.Connect(ctx, agent.Options{URL: url, TD: td, Timeout: 10 * time.Second, Logger: hubtest.Logger(t)})
	if err != nil {
		return nil, fmt.Errorf("cannot connect agent %s: %w", id, err)
	}
	t.Cleanup(func() { _ = a.Close() })
	a.HandleAction("ping", func(context.Context, agent.Input) (any, error) {
		return map[string]any{"pong": "pong-" + id}, nil
	})
	return a, nil
}

// TestDashboardInBrowser drives the dashboard (GET /) in headless Chromium
// against a hub in join mode approve with real agents: the Go agent over
// MQTT and over WebSocket, an mqtt.js agent, and agents started, stopped
// and approved while the page watches; at the end the hub restarts under
// the page on its addresses. Each subtest is one thing a person
// does; they share the page (as a person's visit would) and each starts
// from the Things list, so one failing does not hide the others. Any
// console error, uncaught exception, failed request or HTTP error answer
// of the page fails the subtest it happened in. Screenshots go to a temp
// dir (kept when the test fails, or always with LMOS_SCREENSHOTS=dir).
func TestDashboardInBrowser(t *testing.T) {
	top := t
	if testing.Short() {
		t.Skip("a browser session; not in -short")
	}
	chromiumPath(t)
	hubtest.InteropScript(t, "dashboard-browser.mjs", "playwright-core")
	// No write rate limit: the load subtest registers 1,000 Things from
	// one client as fast as it can.
	h := startHub(t, func(c *Config) { c.Join.Mode, c.HTTP.WriteRate = "approve", 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	// After the agents' and scripts' own cleanups (registered later, run
	// first): the mqtt.js agent ends by closing its stdin, not killed.
	t.Cleanup(cancel)
	mqttURL := "mqtt://" + h.Main.MQTTAddr.String()
	wsURL := "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"

	shots := os.Getenv("LMOS_SCREENSHOTS")
	if shots == "" {
		dir, err := os.MkdirTemp("", "lmos-dashboard-shots-")
		if err != nil {
			t.Fatal(err)
		}
		shots = dir
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("screenshots of every check: %s", dir)
				return
			}
			t.Logf("screenshots removed (the test passed; LMOS_SCREENSHOTS=dir keeps them)")
			_ = os.RemoveAll(dir)
		})
	} else {
		t.Cleanup(func() { t.Logf("screenshots of every check: %s", shots) })
	}

	// The first agents join in a permit window an admin opens over the
	// API; the page's own permit-join is a subtest below.
	permitJoin(t, h, 120)
	thermo, err := dashAgent(t, ctx, mqttURL, thermostatTD())
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	var setpoints atomic.Int64
	thermo.HandleAction("setpoint", func(_ context.Context, in agent.Input) (any, error) {
		setpoints.Add(1)
		var v struct {
			Celsius float64
			Mode    string
		}
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		return map[string]any{"setpoint": v.Celsius, "mode": v.Mode, "note": fmt.Sprintf("set-%v-%s", v.Celsius, v.Mode)}, nil
	})
	// count streams n partial results; for tag "hold" it stops after two
	// until the test has seen them in the page.
	thermo.HandleActionStream("count", func(ctx context.Context, in agent.Input, emit func(any) error) (any, error) {
		var v struct {
			N   int
			Tag string
		}
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		for i := range v.N {
			if i == 2 && v.Tag == "hold" {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if err := emit(map[string]any{"tag": v.Tag, "i": i, "word": fmt.Sprintf("part-%s-%d", v.Tag, i)}); err != nil {
				return nil, err
			}
		}
		return map[string]any{"tag": v.Tag, "n": v.N, "word": "final-" + v.Tag}, nil
	})
	if err := thermo.SetProperty("level", 0); err != nil {
		t.Fatal(err)
	}
	lampTD := map[string]any{
		"@type": "lmos:Agent", "id": dashLamp, "title": "Porch lamp", "description": "Lights the porch at dusk.",
		"properties": map[string]any{"on": map[string]any{"type": "boolean", "observable": true}},
		"actions":    map[string]any{"ping": map[string]any{"output": map[string]any{"type": "object"}}},
	}
	lamp, err := dashAgent(t, ctx, wsURL, lampTD)
	if err != nil {
		t.Fatal(err)
	}
	if err := lamp.SetProperty("on", true); err != nil {
		t.Fatal(err)
	}
	jsAgent := startScript(t, ctx, "mqtt.js agent", "mqttjs-agent.mjs", mqttURL, dashJS, "5", "1")
	permitJoin(t, h, 0)

	b := startBrowser(t, h.URL, shots)

	t.Run("list", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "list", "first": true, "ids": []string{dashThermo, dashLamp, dashJS}, "online": []string{dashThermo, dashLamp, dashJS}})
	})
	t.Run("search", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "search", "q": "humidity", "want": dashThermo, "not": []string{dashLamp, dashJS}, "mark": "humidity"})
	})
	t.Run("action form", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "invoke", "id": dashThermo, "action": "setpoint",
			"fields": map[string]any{"celsius": 21.5, "mode": "comfort"}, "want": []string{"set-21.5-comfort"}})
	})
	t.Run("invalid action input", func(t *testing.T) {
		before := setpoints.Load()
		b.run(t, map[string]any{"cmd": "invalid", "id": dashThermo, "action": "setpoint", "fields": map[string]any{"celsius": 99}})
		// Neither the form nor the hub let it reach the agent.
		if n := setpoints.Load() - before; n != 0 {
			t.Errorf("the agent's setpoint ran %d times on invalid input", n)
		}
	})
	t.Run("streamed action", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "streamStart", "id": dashThermo, "action": "count",
			"fields": map[string]any{"n": 3, "tag": "hold"}, "want": []string{"part-hold-0", "part-hold-1"}, "finalMark": "final-hold"})
		releaseOnce.Do(func() { close(release) })
		b.run(t, map[string]any{"cmd": "streamEnd", "action": "count", "want": []string{"final-hold"},
			"partials": []string{"part-hold-0", "part-hold-1", "part-hold-2"}})
	})
	t.Run("live event", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "openThing", "id": dashThermo, "wait": []string{"event-log-tick"}})
		// The page subscribes when it shows the log; ticks keep coming
		// until it has shown one (at most 2 minutes of them).
		defer ticking(t, thermo, 480, 250*time.Millisecond, "tick-live")()
		b.run(t, map[string]any{"cmd": "seeText", "name": "event appears live", "testid": "event-log-tick", "text": "tick-live"})
	})
	t.Run("live property", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "openThing", "id": dashThermo, "wait": []string{"prop-value-level"}})
		for _, v := range []float64{17.25, 18.75} {
			if err := thermo.SetProperty("level", v); err != nil {
				t.Fatal(err)
			}
			b.run(t, map[string]any{"cmd": "seeText", "name": fmt.Sprintf("property shows %v live", v), "testid": "prop-value-level", "text": fmt.Sprint(v)})
		}
	})
	t.Run("hub figures", func(t *testing.T) {
		// Ticks flow (20 a second, at most 2 minutes of them) while the
		// page reads the broker's rate; the test hub runs without mDNS.
		defer ticking(t, thermo, 2400, 50*time.Millisecond, "tick")()
		b.run(t, map[string]any{"cmd": "hubFigures", "mdns": "off"})
	})
	t.Run("federation", func(t *testing.T) {
		// A second hub on loopback, paired from the page as an admin
		// would; its Thing is mirrored here and listed with its home.
		other := startHub(t, nil)
		other.put(dashRemote, hubtest.BareTD(dashRemote, "Barn sensor on the other hub"))
		b.run(t, map[string]any{"cmd": "federation", "url": other.URL, "did": other.Main.DID(),
			"thing": dashRemote, "origin": "remote · " + strings.TrimPrefix(other.URL, "http://")})
		if resp, body := h.do(http.MethodGet, "/api/peers", "", nil, testToken); resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
			t.Errorf("after unpairing in the page: GET /api/peers %d %s, want 200 []", resp.StatusCode, body)
		}
	})
	t.Run("agent comes and goes", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "watch", "ids": []string{dashThermo}, "absent": dashLate})
		permitJoin(t, h, 60)
		late, err := dashAgent(top, ctx, mqttURL, map[string]any{"@type": "lmos:Agent", "id": dashLate, "title": "Late soil sensor",
			"properties": map[string]any{"moisture": map[string]any{"type": "number", "observable": true}}})
		permitJoin(t, h, 0)
		if err != nil {
			t.Fatal(err)
		}
		b.run(t, map[string]any{"cmd": "appear", "id": dashLate})
		if err := late.Close(); err != nil {
			t.Errorf("close %s: %v", dashLate, err)
		}
		b.run(t, map[string]any{"cmd": "gone", "id": dashLate, "online": dashThermo})
	})
	t.Run("approve", func(t *testing.T) {
		permitJoin(t, h, 0)
		actx, acancel := context.WithTimeout(ctx, 2*time.Minute)
		defer acancel()
		joined := make(chan error, 1)
		got := false
		// The agent waits for the decision until actx ends; the subtest
		// never leaves it running.
		defer func() {
			acancel()
			if !got {
				select {
				case <-joined:
				case <-time.After(30 * time.Second):
					t.Errorf("the waiting agent did not give up")
				}
			}
		}()
		go func() {
			_, err := dashAgent(top, actx, wsURL, map[string]any{"@type": "lmos:Agent", "id": dashPending, "title": "Doorbell awaiting approval",
				"actions": map[string]any{"ping": map[string]any{"output": map[string]any{"type": "object"}}}})
			joined <- err
		}()
		if !pendingListed(t, h, dashPending, 30*time.Second) {
			t.Fatalf("%s never listed in GET /api/join", dashPending)
		}
		b.run(t, map[string]any{"cmd": "approve", "id": dashPending})
		if t.Failed() {
			return // the page did not approve: the agent waits in vain
		}
		select {
		case err := <-joined:
			got = true
			if err != nil {
				t.Fatalf("pending agent after the page's approval: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s still waiting 60 s after the page approved it", dashPending)
		}
		if status, _ := h.Presence(dashPending); status != "online" {
			t.Errorf("approved %s is %s", dashPending, status)
		}
	})
	t.Run("permit join", func(t *testing.T) {
		permitJoin(t, h, 0)
		b.run(t, map[string]any{"cmd": "permit"})
		var j struct {
			Remaining float64 `json:"remaining"`
		}
		if resp, body := h.do(http.MethodGet, "/api/join", "", nil, testToken); resp.StatusCode != http.StatusOK || json.Unmarshal(body, &j) != nil || j.Remaining <= 0 {
			t.Fatalf("GET /api/join after the page's permit-join: %d %s", resp.StatusCode, body)
		}
		jctx, jcancel := context.WithTimeout(ctx, 30*time.Second)
		defer jcancel()
		if _, err := dashAgent(top, jctx, mqttURL, map[string]any{"@type": "lmos:Agent", "id": dashPermitted, "title": "Smart plug"}); err != nil {
			t.Fatalf("agent in the page's permit window: %v", err)
		}
		permitJoin(t, h, 0)
		b.run(t, map[string]any{"cmd": "list", "ids": []string{dashPermitted}, "online": []string{dashPermitted}})
	})
	t.Run("group", func(t *testing.T) {
		const gid = "greenhouse"
		b.run(t, map[string]any{"cmd": "group", "gid": gid, "members": []string{dashThermo, dashLamp}, "action": "ping",
			"want": map[string]string{dashThermo: "pong-" + dashThermo, dashLamp: "pong-" + dashLamp}})
		var g struct{ Members []string }
		if resp, body := h.do(http.MethodGet, "/api/groups/"+gid, "", nil, testToken); resp.StatusCode != http.StatusOK || json.Unmarshal(body, &g) != nil ||
			strings.Join(g.Members, " ") != dashThermo+" "+dashLamp {
			t.Errorf("GET /api/groups/%s after the page made it: %d %s", gid, resp.StatusCode, body)
		}
	})
	t.Run("backup", func(t *testing.T) {
		// The page's "Download backup" saves a whole store holding the
		// hub's Things.
		file := filepath.Join(t.TempDir(), "dashboard-backup.db")
		b.run(t, map[string]any{"cmd": "backup", "path": file})
		info, err := store.Check(file)
		if err != nil || info.HubID != h.Main.DB.HubID() || info.Things == 0 {
			t.Fatalf("the page's backup: %+v, %v; want the hub's store", info, err)
		}
	})
	t.Run("token", func(t *testing.T) {
		existing := map[string]string{} // id → scope
		for _, v := range listTokens(t, h) {
			existing[v.ID] = v.Scope
		}
		ids := make([]string, 0, len(existing))
		for id := range existing {
			ids = append(ids, id)
		}
		var tok struct{ ID, Value string }
		for _, m := range b.run(t, map[string]any{"cmd": "tokenCreate", "scope": "read", "existing": ids}) {
			if v, ok := m["token"].(map[string]any); ok {
				tok.ID, _ = v["id"].(string)
				tok.Value, _ = v["value"].(string)
			}
		}
		if tok.Value == "" {
			t.Fatal("no token shown")
		}
		if _, had := existing[tok.ID]; had {
			t.Fatalf("the page's new token row %s is a token the hub had before", tok.ID)
		}
		scope := ""
		for _, v := range listTokens(t, h) {
			if v.ID == tok.ID {
				scope = v.Scope
			}
		}
		if scope != "read" {
			t.Fatalf("token %s of the page's new row has scope %q on the hub, want read", tok.ID, scope)
		}
		// The value shown is a working token of that scope: it reads, and
		// may not write.
		if resp, body := h.do(http.MethodGet, "/things", "", nil, tok.Value); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /things with the page's new token: %d %s", resp.StatusCode, body)
		}
		if resp, body := h.do(http.MethodPost, "/api/groups", "application/json", []byte(`{"id":"by-read-token","title":"x"}`), tok.Value); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("POST /api/groups with the page's read token: %d %s, want 403", resp.StatusCode, body)
		}
		b.run(t, map[string]any{"cmd": "tokenRevoke", "id": tok.ID})
		if resp, body := h.do(http.MethodGet, "/things", "", nil, tok.Value); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /things with the token the page revoked: %d %s, want 401", resp.StatusCode, body)
		}
	})
	t.Run("refused token", func(t *testing.T) {
		resp, body := h.do(http.MethodPost, "/api/tokens", "application/json", []byte(`{"name":"browser-read","scope":"read"}`), testToken)
		var read struct{ Token string }
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &read) != nil || read.Token == "" {
			t.Fatalf("POST /api/tokens: %d %s", resp.StatusCode, body)
		}
		for _, c := range []struct {
			kind, token, gid string
			status           int
		}{
			{"read-scoped", read.Token, "refused-read", http.StatusForbidden},
			{"wrong", "lmos_this-token-was-never-issued-by-this-hub-000", "refused-wrong", http.StatusUnauthorized},
		} {
			b.run(t, map[string]any{"cmd": "refusedToken", "kind": c.kind, "token": c.token, "gid": c.gid, "status": c.status})
			// The refusal changed nothing.
			if resp, body := h.do(http.MethodGet, "/api/groups/"+c.gid, "", nil, testToken); resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /api/groups/%s after the page's refused create: %d %s, want 404", c.gid, resp.StatusCode, body)
			}
		}
	})
	var hostile *agent.Agent
	t.Run("hostile TD", func(t *testing.T) {
		const (
			title    = `<img src=x onerror="window.__pwned=1">Evil <script>window.__pwned=2</script> title`
			prop     = `<b onmouseover=window.__pwned=4>p`
			enumVal  = `<script>window.__pwned=5</script>`
			descText = `<b>bold?</b><script>window.__pwned=3</script>`
			example  = `<img src=x onerror=window.__pwned=7>`
			capName  = `<svg onload=window.__pwned=6>`
		)
		td := map[string]any{
			"@type": "lmos:Agent", "id": dashHostile, "title": title, "description": descText,
			"lmos:capabilities": []any{map[string]any{"id": "evil", "name": capName, "version": "1",
				"description": "hostile capability", "examples": []any{example}}},
			"support":    "javascript:window.__pwned=8",
			"links":      []any{map[string]any{"href": "javascript:window.__pwned=9", "rel": "help"}},
			"properties": map[string]any{prop: map[string]any{"type": "string", "observable": true}},
			"actions": map[string]any{"pick": map[string]any{"input": map[string]any{"type": "object",
				"properties": map[string]any{"choice": map[string]any{"type": "string", "enum": []any{enumVal, "ok"}}}},
				"output": map[string]any{"type": "object"}}},
		}
		permitJoin(t, h, 60)
		a, err := dashAgent(top, ctx, mqttURL, td)
		permitJoin(t, h, 0)
		if err != nil {
			t.Fatal(err)
		}
		hostile = a
		if err := a.SetProperty(prop, `<script>window.__pwned=10</script>`); err != nil {
			t.Fatal(err)
		}
		b.run(t, map[string]any{"cmd": "hostile", "id": dashHostile, "title": title, "listText": "Evil <script>",
			"texts": []string{title, descText, capName, example}, "prop": prop, "action": "pick", "enumValue": enumVal, "rawText": "window.__pwned=9"})
	})
	t.Run("accessibility", func(t *testing.T) {
		// A Thing the check renames while the keyboard is in the list.
		const poke = "urn:lmos:test:a11y-poke"
		h.put(poke, hubtest.BareTD(poke, "Zz poked"))
		b.run(t, map[string]any{"cmd": "a11y", "id": dashThermo, "poke": poke})
	})
	t.Run("phone width", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "phone", "id": dashThermo})
	})
	t.Run("hub restart", func(t *testing.T) {
		// mqtt.js (reconnectPeriod 0 in its script) takes a lost
		// connection as a failure: it leaves first. The Go agents
		// reconnect by themselves.
		jsAgent.exit()
		b.run(t, map[string]any{"cmd": "outage"})
		httpAddr, mqttAddr := h.Main.HTTPAddr.String(), h.Main.MQTTAddr.String()
		h.Close()
		h = startHubIn(top, h.Dir, func(c *Config) {
			c.Join.Mode, c.HTTP.WriteRate = "approve", 0
			c.HTTP.Addr, c.MQTT.Addr = httpAddr, mqttAddr
		})
		const id = "urn:lmos:test:after-restart"
		h.put(id, hubtest.BareTD(id, "Registered after the restart"))
		b.run(t, map[string]any{"cmd": "recovered", "id": id})
	})
	t.Run("load", func(t *testing.T) {
		dashLoad(t, b, h, thermo)
	})
	t.Run("session", func(t *testing.T) {
		// The screenshots for the docs show the agents a person has, not
		// the hostile one (its layout at 360 px is checked above).
		if hostile != nil {
			_ = hostile.Close()
			if resp, body := h.do(http.MethodDelete, "/things/"+pathEscape(dashHostile), "", nil, testToken); resp.StatusCode != http.StatusNoContent {
				t.Errorf("DELETE %s: %d %s", dashHostile, resp.StatusCode, body)
			}
		}
		for _, s := range []map[string]any{
			{"name": "things", "nav": "things"},
			{"name": "thing", "thing": dashThermo},
			{"name": "hub", "nav": "hub"},
			{"name": "phone-things", "nav": "things", "viewport": map[string]int{"width": 360, "height": 740}, "viewportOnly": true},
		} {
			s["cmd"] = "screenshot"
			for _, m := range b.run(t, s) {
				t.Logf("screenshot %v", m["screenshot"])
			}
		}
		b.run(t, map[string]any{"cmd": "session"})
	})
}

// dashLoad is the bad-input load the page must bear without freezing
// (issue 26): 1,000 Things joining while the list is open, a 256 KiB TD,
// and 1,000 events a second on a Thing's page (the page coalesces them).
// It leaves the 1,000 Things and the big one registered.
func dashLoad(t *testing.T, b *browser, h *testHub, thermo *agent.Agent) {
	const n = 1000
	id := func(i int) string { return fmt.Sprintf("urn:lmos:test:load:%04d", i) }
	b.run(t, map[string]any{"cmd": "watch", "ids": []string{dashThermo}, "absent": id(n - 1)})
	for i := range n {
		resp, body := h.do(http.MethodPut, "/things/"+pathEscape(id(i)), lmos.MediaTD,
			hubtest.BareTD(id(i), fmt.Sprintf("Load thing %04d", i)), testToken)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT %s: %d %s", id(i), resp.StatusCode, body)
		}
	}
	var st struct{ Things int }
	h.getJSON("/api/status", http.StatusOK, &st)
	b.run(t, map[string]any{"cmd": "many", "total": st.Things, "sample": id(737), "q": "0737"})

	// The biggest TD the hub takes (registry.maxTDBytes, 256 KiB): 230
	// properties with a 1 KiB description each.
	const bigID = "urn:lmos:test:load:big"
	props := map[string]any{}
	for i := range 230 {
		props[fmt.Sprintf("p%03d", i)] = map[string]any{"type": "string", "description": strings.Repeat(fmt.Sprintf("%03d ", i), 256),
			"forms": []any{map[string]any{"href": fmt.Sprintf("http://127.0.0.1:9/p%03d", i)}}}
	}
	big, err := json.Marshal(map[string]any{"@context": "https://www.w3.org/2022/wot/td/v1.1", "id": bigID, "title": "Big thing",
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}}, "security": "nosec_sc", "properties": props})
	if err != nil {
		t.Fatal(err)
	}
	if len(big) < 240<<10 || len(big) > hub.DefaultMaxTDBytes {
		t.Fatalf("the big TD is %d bytes", len(big))
	}
	if resp, body := h.do(http.MethodPut, "/things/"+pathEscape(bigID), lmos.MediaTD, big, testToken); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT the big TD: %d %s", resp.StatusCode, body)
	}
	b.run(t, map[string]any{"cmd": "bigTD", "id": bigID, "title": "Big thing", "last": "p229", "bytes": len(big)})

	// 1,000 events a second for 5 s, after one the page has shown (it
	// subscribes once it shows the log); the last must show, and the log
	// stays bounded.
	b.run(t, map[string]any{"cmd": "openHash", "id": dashThermo, "wait": []string{"event-log-tick"}})
	stop := ticking(t, thermo, 480, 250*time.Millisecond, "flood-warm")
	b.run(t, map[string]any{"cmd": "seeText", "name": "event log live before the flood", "testid": "event-log-tick", "text": "flood-warm"})
	stop()
	b.run(t, map[string]any{"cmd": "floodStart"})
	tick := time.NewTicker(10 * time.Millisecond)
	for i := range 5000 {
		if i%10 == 0 {
			<-tick.C
		}
		if err := thermo.Emit("tick", map[string]any{"seq": i, "word": fmt.Sprintf("flood-%d", i)}); err != nil {
			t.Fatalf("emit tick %d: %v", i, err)
		}
	}
	tick.Stop()
	if err := thermo.Emit("tick", map[string]any{"word": "flood-last"}); err != nil {
		t.Fatal(err)
	}
	b.run(t, map[string]any{"cmd": "floodEnd", "testid": "event-log-tick", "last": "flood-last", "max": 100})
}

// TestDashboardOverTLS: a hub serving only TLS (tls.only, its own
// self-signed certificate) shows the dashboard over https to a browser
// that trusts that certificate's key alone (Chromium's
// --ignore-certificate-errors-spki-list, as a person accepts it once): the
// list live with an agent joined over mqtts, an action through its form,
// a token created; no mixed content, no failed request.
func TestDashboardOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("a browser session; not in -short")
	}
	chromiumPath(t)
	hubtest.InteropScript(t, "dashboard-browser.mjs", "playwright-core")
	h := startHub(t, func(c *Config) { c.TLS.Enabled, c.TLS.Only = true, true })
	if h.Main.HTTPAddr != nil || h.Main.HTTPSAddr == nil {
		t.Fatalf("tls.only: http %v, https %v", h.Main.HTTPAddr, h.Main.HTTPSAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	a, err := agent.Connect(ctx, agent.Options{URL: "mqtts://" + h.Main.MQTTSAddr.String(), TLSFingerprint: h.Main.TLS.Fingerprint(),
		TD: thermostatTD(), Logger: hubtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	a.HandleAction("setpoint", func(_ context.Context, in agent.Input) (any, error) {
		var v struct{ Celsius float64 }
		if err := in.Decode(&v); err != nil {
			return nil, err
		}
		return map[string]any{"note": fmt.Sprintf("tls-set-%v", v.Celsius)}, nil
	})
	spki := sha256.Sum256(h.Main.TLS.Leaf().RawSubjectPublicKeyInfo)
	base := "https://" + h.Main.HTTPSAddr.String()
	b := startBrowser(t, base, t.TempDir(), "LMOS_BROWSER_SPKI="+base64.StdEncoding.EncodeToString(spki[:]))
	t.Run("list", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "list", "ids": []string{dashThermo}, "online": []string{dashThermo}})
	})
	t.Run("action form", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "invoke", "id": dashThermo, "action": "setpoint",
			"fields": map[string]any{"celsius": 22, "mode": "eco"}, "want": []string{"tls-set-22"}})
	})
	t.Run("token", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/tokens", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := h.trustingClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var list []struct{ ID string }
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/tokens over https: %d %v", resp.StatusCode, err)
		}
		ids := []string{}
		for _, v := range list {
			ids = append(ids, v.ID)
		}
		b.run(t, map[string]any{"cmd": "tokenCreate", "scope": "read", "existing": ids})
	})
	t.Run("session", func(t *testing.T) {
		b.run(t, map[string]any{"cmd": "session"})
	})
}

// ticking has the agent a emit up to n tick events carrying word, one every
// gap, until the function it returns is called (which waits for the
// emitter's end).
func ticking(t *testing.T, a *agent.Agent, n int, gap time.Duration, word string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if err := a.Emit("tick", map[string]any{"seq": i, "word": word}); err != nil {
				t.Errorf("emit tick: %v", err)
				return
			}
			select {
			case <-done:
				return
			case <-time.After(gap):
			}
		}
	})
	return sync.OnceFunc(func() {
		close(done)
		wg.Wait()
	})
}

// listTokens is GET /api/tokens.
func listTokens(t *testing.T, h *testHub) []struct{ ID, Scope string } {
	t.Helper()
	var out []struct{ ID, Scope string }
	resp, body := h.do(http.MethodGet, "/api/tokens", "", nil, testToken)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil {
		t.Fatalf("GET /api/tokens: %d %s", resp.StatusCode, body)
	}
	return out
}

// pendingListed polls GET /api/join until id is pending, within d.
func pendingListed(t *testing.T, h *testHub, id string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var j struct {
			List []struct{ ID string } `json:"list"`
		}
		if resp, body := h.do(http.MethodGet, "/api/join", "", nil, testToken); resp.StatusCode == http.StatusOK && json.Unmarshal(body, &j) == nil {
			for _, p := range j.List {
				if p.ID == id {
					return true
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// permitJoin opens (seconds > 0) or closes the permit window over the API.
func permitJoin(t *testing.T, h *testHub, seconds int) {
	t.Helper()
	if resp, body := h.do(http.MethodPost, "/api/join/permit", "application/json", fmt.Appendf(nil, `{"seconds": %d}`, seconds), testToken); resp.StatusCode != http.StatusOK {
		t.Fatalf("permit %d: %d %s", seconds, resp.StatusCode, body)
	}
}
