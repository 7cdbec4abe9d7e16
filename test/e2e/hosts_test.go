package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

const rebindHost = "evil.example"

// hostProblem checks a refusal of the Host check: 403, a forbidden problem
// naming the host and the setting.
func hostProblem(t *testing.T, what string, status int, contentType string, body []byte) {
	t.Helper()
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if status != http.StatusForbidden || contentType != "application/problem+json" || json.Unmarshal(body, &p) != nil ||
		p.Status != 403 || !strings.HasSuffix(p.Type, "#forbidden") ||
		!strings.Contains(p.Detail, rebindHost) || !strings.Contains(p.Detail, "http.allowedHosts") {
		t.Errorf("%s: %d %s %s, want 403 forbidden problem naming %s and http.allowedHosts", what, status, contentType, body, rebindHost)
	}
}

// hostRequest sends one request with the given Host (and a matching
// Origin, as a page on that domain would send).
func (h *testHub) hostRequest(host, method, path string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.URL+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Origin", "http://"+host)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	// Bounded: an accepted upgrade or event stream would never end.
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		h.t.Errorf("%s %s (Host %s): %v", method, path, host, err)
		return &http.Response{Header: http.Header{}}, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// The DNS-rebinding attack of issue 12 point 5: a page on evil.example,
// re-pointed at the hub's address, sends Host and Origin evil.example. On
// every door it gets a 403 problem, no upgrade, and changes nothing.
func TestDNSRebindingRefused(t *testing.T) {
	h := startHub(t, nil)
	a := h.startAgent(agentID)
	h.put(thermostatID, sample(t, "thermostat-agent.json"))
	before := h.snapshot()
	clients := h.Main.Broker.Clients()
	_, tokensBefore := h.do("GET", "/api/tokens", "", nil, testToken)
	refused := `lmos_http_refused_total{reason="http.allowedHosts"}`
	sent := 0

	// Go: coder/websocket, the client the hub's own library pairs with.
	for _, door := range []struct{ path, proto string }{{"/ws", "lmosprotocol"}, {"/mqtt", "mqtt"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+door.path, &websocket.DialOptions{
			Host: rebindHost, Subprotocols: []string{door.proto},
			HTTPHeader: http.Header{"Origin": {"http://" + rebindHost}},
		})
		cancel()
		sent++
		if err == nil {
			c.CloseNow()
			t.Errorf("%s: upgraded for Host %s", door.path, rebindHost)
			continue
		}
		if resp == nil {
			t.Fatalf("%s: no response: %v", door.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		hostProblem(t, "go websocket "+door.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}

	// The same and every other door with net/http.
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	td := makeTD("urn:ex:rebound", "rebound")
	for _, c := range []struct {
		method, path string
		body         []byte
		hdr          map[string]string
	}{
		{"GET", "/ws", nil, with(upgrade, "Sec-WebSocket-Protocol", "lmosprotocol")},
		{"GET", "/mqtt", nil, with(upgrade, "Sec-WebSocket-Protocol", "mqtt")},
		{"PUT", "/things/urn:ex:rebound", td, with(auth, "Content-Type", "application/td+json")},
		{"POST", "/things", td, with(auth, "Content-Type", "application/td+json")},
		{"DELETE", "/things/" + pathEscape(thermostatID), nil, auth},
		{"POST", actionPath(agentID, "never"), []byte(`{}`), with(auth, "Content-Type", "application/json")},
		{"POST", "/api/tokens", []byte(`{"name":"stolen"}`), with(auth, "Content-Type", "application/json")},
		{"GET", "/api/status", nil, nil},
		{"GET", "/api/tokens", nil, auth},
		{"GET", "/events", nil, map[string]string{"Accept": "text/event-stream"}},
		{"GET", "/things", nil, nil},
		{"GET", "/metrics", nil, nil},
		{"GET", "/healthz", nil, nil},
		{"GET", "/.well-known/wot", nil, nil},
		{"GET", "/", nil, nil},
	} {
		resp, body := h.hostRequest(rebindHost, c.method, c.path, c.body, c.hdr)
		sent++
		hostProblem(t, c.method+" "+c.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}

	// curl, with the Host of the rebinding domain, on a write and an upgrade.
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl is needed (scripts/test-deps.sh installs it): %v", err)
	}
	out := filepath.Join(t.TempDir(), "out")
	for _, args := range [][]string{
		{"-X", "PUT", "-H", "Content-Type: application/td+json", "-H", "Authorization: Bearer " + testToken,
			"--data-binary", string(td), h.URL + "/things/urn:ex:rebound"},
		{"-H", "Connection: Upgrade", "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 13",
			"-H", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "-H", "Sec-WebSocket-Protocol: mqtt", h.URL + "/mqtt"},
	} {
		args = append([]string{"-sS", "--max-time", "5", "-o", out, "-w", "%{http_code} %{content_type}",
			"-H", "Host: " + rebindHost, "-H", "Origin: http://" + rebindHost}, args...)
		cmd := exec.Command(curl, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		sent++
		if err != nil {
			t.Fatalf("curl %q: %v: %s", args, err, stderr.String())
		}
		body, _ := os.ReadFile(out)
		code, ct, _ := strings.Cut(string(got), " ")
		status := 0
		fmt.Sscan(code, &status)
		hostProblem(t, "curl "+args[len(args)-1], status, ct, body)
	}

	// npm ws, as a browser page's WebSocket would connect.
	{
		script := hubtest.InteropScript(t, "ws-host.mjs", "ws")
		for _, door := range []struct{ path, proto string }{{"/ws", "lmosprotocol"}, {"/mqtt", "mqtt"}} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			got, err := exec.CommandContext(ctx, "node", script, "ws"+strings.TrimPrefix(h.URL, "http")+door.path,
				door.proto, rebindHost, "http://"+rebindHost).Output()
			cancel()
			sent++
			var r struct {
				Opened      bool
				Status      int
				ContentType string
				Body        string
			}
			if err != nil || json.Unmarshal(got, &r) != nil {
				t.Fatalf("node ws %s: %v %s", door.path, err, got)
			}
			if r.Opened {
				t.Errorf("node ws %s: upgraded for Host %s", door.path, rebindHost)
				continue
			}
			hostProblem(t, "node ws "+door.path, r.Status, r.ContentType, []byte(r.Body))
		}
	}

	if after := h.snapshot(); after != before {
		t.Errorf("the refused requests changed the directory:\n%s\n%s", before, after)
	}
	if _, tokensAfter := h.do("GET", "/api/tokens", "", nil, testToken); !bytes.Equal(tokensAfter, tokensBefore) {
		t.Errorf("the refused requests changed the tokens:\n%s\n%s", tokensBefore, tokensAfter)
	}
	if n := len(a.got); n != 0 {
		t.Errorf("the agent got %d requests through the refused proxy call", n)
	}
	if got := h.metric(refused); got != float64(sent) {
		t.Errorf("%s = %v, want %d", refused, got, sent)
	}
	if n := h.Main.Broker.Clients(); n != clients {
		t.Errorf("broker clients = %d, want %d as before", n, clients)
	}
}

// The names the hub answers to still work: addresses, localhost, its host
// name, hub name, .local names and http.allowedHosts; ["*"] turns the check off.
func TestHostCheckAllowsHubNames(t *testing.T) {
	h := startHub(t, func(c *Config) { c.HTTP.AllowedHosts = []string{"hub.example.com", "*.lan.example"} })
	port := h.Main.HTTPAddr.(*net.TCPAddr).Port
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(hostname, ".")
	p := fmt.Sprint(port)
	for _, host := range []string{
		"127.0.0.1:" + p, "127.0.0.1", "[::1]:" + p, "[::1]", "[fe80::1%25eth0]:" + p, "192.168.1.20:" + p,
		"localhost:" + p, "LOCALHOST", "localhost.", "app.localhost:" + p,
		hostname + ":" + p, strings.ToUpper(first), first + ".local:" + p, first + ".local.",
		"test-hub:" + p, "test-hub.local:" + p, "Test-Hub.Local",
		"hub.example.com:" + p, "HUB.example.com.", "pi.lan.example:" + p, "a.b.lan.example",
	} {
		resp, body := h.hostRequest(host, "GET", "/api/status", nil, nil)
		if resp.StatusCode != 200 {
			t.Errorf("Host %s: %d %s", host, resp.StatusCode, body)
		}
	}
	for _, host := range []string{rebindHost, "hub.example.com.evil.example", "lan.example", "localhost.evil.example", "127.0.0.1.nip.io"} {
		resp, body := h.hostRequest(host, "GET", "/api/status", nil, nil)
		if resp.StatusCode != 403 {
			t.Errorf("Host %s: %d %s, want 403", host, resp.StatusCode, body)
		}
	}
	// A WebSocket from a page served under an allowed name connects, as
	// the dashboard's own (same-origin) script does.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws", &websocket.DialOptions{
		Host: "pi.lan.example:" + p, Subprotocols: []string{"lmosprotocol"},
		HTTPHeader: http.Header{"Origin": {"http://pi.lan.example:" + p}},
	})
	if err != nil {
		t.Fatalf("same-origin websocket under an allowed name: %v", err)
	}
	c.CloseNow()

	off := startHub(t, func(c *Config) { c.HTTP.AllowedHosts = []string{"*"} })
	if resp, body := off.hostRequest(rebindHost, "GET", "/api/status", nil, nil); resp.StatusCode != 200 {
		t.Errorf(`http.allowedHosts ["*"]: Host %s: %d %s`, rebindHost, resp.StatusCode, body)
	}
}

// The .local name the hub's mDNS advertises (<host>-<id>.local) is one of
// its names; mDNS runs here on no interface, so nothing goes on the wire.
func TestHostCheckAllowsMDNSName(t *testing.T) {
	h := startHub(t, func(c *Config) { c.MDNS.Enabled, c.MDNS.Interfaces = true, []string{"lmos-none0"} })
	if h.Main.MDNS == nil {
		t.Fatal("mdns did not open")
	}
	hostname, _ := os.Hostname()
	first, _, _ := strings.Cut(hostname, ".")
	id := strings.ReplaceAll(h.Main.DB.HubID(), "-", "")[:6]
	name := h.Main.MDNS.HostName()
	if !strings.HasSuffix(name, "-"+id+".local") || !strings.HasPrefix(name, strings.ToLower(first)[:1]) {
		t.Fatalf("mdns host name %q, want <%s>-%s.local", name, first, id)
	}
	for _, host := range []string{name, strings.ToUpper(name) + ".", name + ":" + fmt.Sprint(h.Main.HTTPAddr.(*net.TCPAddr).Port)} {
		if resp, body := h.hostRequest(host, "GET", "/api/status", nil, nil); resp.StatusCode != 200 {
			t.Errorf("Host %s: %d %s", host, resp.StatusCode, body)
		}
	}
	if resp, _ := h.hostRequest("x"+name, "GET", "/api/status", nil, nil); resp.StatusCode != 403 {
		t.Errorf("Host x%s: %d, want 403", name, resp.StatusCode)
	}
}
