package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
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

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/tlscert"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// startTLSHub starts a hub with tls.enabled (a self-signed certificate
// generated in its data directory); edit changes the configuration after.
func startTLSHub(t *testing.T, edit func(*Config)) *testHub {
	t.Helper()
	return startHub(t, func(c *Config) {
		c.TLS.Enabled = true
		if edit != nil {
			edit(c)
		}
	})
}

// certFile is the certificate the hub serves (its PEM file).
func (h *testHub) certFile() string {
	f, _ := h.Main.TLS.Files()
	return f
}

// trustingClient is an HTTP client that trusts h's certificate as a CA,
// as curl --cacert does.
func (h *testHub) trustingClient() *http.Client {
	h.t.Helper()
	pem, err := os.ReadFile(h.certFile())
	if err != nil {
		h.t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		h.t.Fatal("no certificate in the hub's PEM file")
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// getJSON GETs url with c and decodes the JSON answer.
func getJSON(t *testing.T, c *http.Client, url string, v any) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// TestTLSUntrustingClientsAreRefused: clients that do not trust the hub's
// self-signed certificate fail the handshake on HTTPS and MQTTS, whatever
// they are: Go's own client (x509.UnknownAuthorityError), curl without
// --cacert (exit 60: peer certificate cannot be authenticated) and
// mosquitto_sub with the system's CAs only (non-zero exit, no message).
// Each failed handshake is counted per door in /metrics, and none is
// logged as a warning (the hub's test logger would show it).
func TestTLSUntrustingClientsAreRefused(t *testing.T) {
	h := startTLSHub(t, nil)
	httpsURL := h.HTTPSURL + "/api/status"

	_, err := (&http.Client{Timeout: 10 * time.Second}).Get(httpsURL)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("Go client without the certificate: %v, want x509.UnknownAuthorityError", err)
	}
	// mosquittoTool finds any Debian tool of scripts/test-deps.sh, curl too.
	curl := mosquittoTool(t, "curl")
	out, err := exec.Command(curl, "-sS", "--max-time", "10", httpsURL).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 60 {
		t.Fatalf("curl without --cacert: %v (want exit 60)\n%s", err, out)
	}
	waitFor(t, 5*time.Second, "2 https handshake failures counted", func() bool {
		return h.Main.TLS.HandshakeFailures("https") == 2
	})

	host, port, _ := strings.Cut(h.Main.MQTTSAddr.String(), ":")
	sub := mosquittoTool(t, "mosquitto_sub")
	out, err = exec.Command(sub, "-h", host, "-p", port, "--tls-use-os-certs", "-t", "lmos/v1/hub/status", "-C", "1", "-W", "5").CombinedOutput()
	if err == nil {
		t.Fatalf("mosquitto_sub without --cafile got a message: %s", out)
	}
	t.Logf("mosquitto_sub without --cafile: %v: %s", err, bytes.TrimSpace(out))
	waitFor(t, 5*time.Second, "1 mqtts handshake failure counted", func() bool {
		return h.Main.TLS.HandshakeFailures("mqtts") == 1
	})

	var metrics bytes.Buffer
	resp, err := h.trustingClient().Get(h.HTTPSURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(&metrics, resp.Body)
	resp.Body.Close()
	for _, want := range []string{`lmos_tls_handshake_failures_total{door="https"} 2`, `lmos_tls_handshake_failures_total{door="mqtts"} 1`} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestTLSTrustingClients: clients that trust the certificate reach every
// door. curl --cacert reads /api/status (its fingerprint is the served
// certificate's) and the directory TD, whose links name the TLS doors with
// that fingerprint first; Go agents pinned to the fingerprint join over
// MQTTS and WSS; mosquitto_sub and mosquitto_pub --cafile (MQTT 5 and
// 3.1.1) read and write the MQTTS agent's property, Python paho reads it
// with the certificate as its CA, mosquitto_rr --cafile
// invokes the WSS agent's action, and the HTTPS proxy invokes both. Every
// client must exit 0 and every message is counted.
func TestTLSTrustingClients(t *testing.T) {
	h := startTLSHub(t, nil)
	fp := h.Main.TLS.Fingerprint()
	curl := mosquittoTool(t, "curl")
	out, err := exec.Command(curl, "-sS", "--fail", "--max-time", "10", "--cacert", h.certFile(), h.HTTPSURL+"/api/status").CombinedOutput()
	if err != nil {
		t.Fatalf("curl --cacert: %v\n%s", err, out)
	}
	var st struct {
		TLS struct {
			Fingerprint string
			HTTPSPort   int
			MQTTSPort   int
			Only        bool
		}
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status %s: %v", out, err)
	}
	if st.TLS.Fingerprint != fp || st.TLS.HTTPSPort != portOf(h.Main.HTTPSAddr) || st.TLS.MQTTSPort != portOf(h.Main.MQTTSAddr) || st.TLS.Only {
		t.Fatalf("/api/status tls = %+v, want fingerprint %s and the TLS ports", st.TLS, fp)
	}
	// localhost is one of the certificate's names too.
	tdURL := "https://localhost:" + fmt.Sprint(portOf(h.Main.HTTPSAddr)) + lmos.DirectoryPath
	if out, err := exec.Command(curl, "-sS", "--fail", "--max-time", "10", "--cacert", h.certFile(), tdURL).CombinedOutput(); err != nil {
		t.Fatalf("curl --cacert %s: %v\n%s", tdURL, err, out)
	}
	var td struct {
		Base  string
		Links []map[string]any
	}
	getJSON(t, h.trustingClient(), h.HTTPSURL+lmos.DirectoryPath, &td)
	wantLinks := []string{"lmos:broker mqtts://127.0.0.1:" + fmt.Sprint(portOf(h.Main.MQTTSAddr)) + " " + fp,
		"lmos:broker mqtt://127.0.0.1:" + fmt.Sprint(portOf(h.Main.MQTTAddr)) + " <nil>"}
	for i, w := range wantLinks {
		if i >= len(td.Links) || fmt.Sprint(td.Links[i]["rel"], " ", td.Links[i]["href"], " ", td.Links[i][lmos.MemberCertFingerprint]) != w {
			t.Fatalf("directory TD over https: links %v, want first %v", td.Links, wantLinks)
		}
	}
	if !strings.HasPrefix(td.Base, "https://") || !hasLink(td.Links, "lmos:websocket", "wss://127.0.0.1:"+fmt.Sprint(portOf(h.Main.HTTPSAddr))+"/ws", fp) {
		t.Fatalf("directory TD over https: base %s, links %v; want an https base and a wss link with the fingerprint", td.Base, td.Links)
	}
	// Fetched over plain HTTP, it points to the TLS doors too.
	getJSON(t, http.DefaultClient, h.URL+lmos.DirectoryPath, &td)
	if !hasLink(td.Links, "alternate", h.HTTPSURL+lmos.DirectoryPath, fp) || !hasLink(td.Links, "lmos:websocket", "wss://127.0.0.1:"+fmt.Sprint(portOf(h.Main.HTTPSAddr))+"/ws", fp) {
		t.Fatalf("directory TD over http: links %v, want the https directory and the wss socket with the fingerprint", td.Links)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const mqttsID, wssID = "urn:example:tls-mqtts", "urn:example:tls-wss"
	newGoCounter(t, ctx, agent.Options{URL: "mqtts://" + h.Main.MQTTSAddr.String(), TLSFingerprint: fp}, mqttsID, 1)
	newGoCounter(t, ctx, agent.Options{URL: "wss://" + h.Main.HTTPSAddr.String() + "/ws", TLSFingerprint: strings.ToLower(fp)}, wssID, 1)
	for id, scheme := range map[string]string{mqttsID: `"mqtts://`, wssID: `"wss://`} {
		var doc map[string]any
		getJSON(t, h.trustingClient(), h.HTTPSURL+"/things/"+id+"?enriched=false", &doc)
		if raw, _ := json.Marshal(doc["actions"]); !bytes.Contains(raw, []byte(scheme)) {
			t.Errorf("%s's forms do not name %s…: %s", id, scheme, raw)
		}
	}

	host, port, _ := strings.Cut(h.Main.MQTTSAddr.String(), ":")
	sub := mosquittoTool(t, "mosquitto_sub")
	pub := mosquittoTool(t, "mosquitto_pub")
	rr := mosquittoTool(t, "mosquitto_rr")
	level := "lmos/v1/things/" + lmos.TopicKey(mqttsID) + "/properties/level"
	// The retained level (1), then the one mosquitto_pub writes (7).
	cmd := exec.CommandContext(ctx, sub, "-h", host, "-p", port, "--cafile", h.certFile(), "-V", "5", "-q", "1", "-t", level, "-C", "2", "-W", "20")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "mosquitto_sub subscribed over mqtts", func() bool { return h.Main.Broker.Subscribers(level) == 1 })
	if out, err := exec.CommandContext(ctx, pub, "-h", host, "-p", port, "--cafile", h.certFile(), "-V", "311", "-q", "1",
		"-t", level+"/set", "-m", "7").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub --cafile: %v\n%s", err, out)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mosquitto_sub --cafile: %v\n%s", err, stderr.String())
	}
	if got := strings.Fields(stdout.String()); len(got) != 2 || got[0] != "1" || got[1] != "7" {
		t.Fatalf("mosquitto_sub --cafile got %q, want 1 then 7", stdout.String())
	}

	// Python paho 1.6.1 with the certificate as its CA reads the level
	// retained over MQTTS; any connection error fails it.
	py := pahoPython(t)
	script := `
import sys, ssl
import paho.mqtt.client as mqtt
host, port, ca, topic = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
got = []
def on_connect(c, u, f, rc):
    if rc != 0:
        print("connack", rc, file=sys.stderr); sys.exit(3)
    c.subscribe(topic, 1)
def on_message(c, u, m):
    got.append(m.payload.decode()); c.disconnect()
c = mqtt.Client(client_id="tls-paho", protocol=mqtt.MQTTv311)
c.tls_set(ca_certs=ca)
c.on_connect, c.on_message = on_connect, on_message
c.connect(host, port, 30)
rc = c.loop_forever(timeout=5.0)
if got != ["7"]:
    print("got", got, "rc", rc, file=sys.stderr); sys.exit(1)
print(got[0])
`
	if out, err := exec.CommandContext(ctx, py, "-c", script, host, port, h.certFile(), level).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "7" {
		t.Fatalf("paho over mqtts: %v\n%s", err, out)
	}

	const cid = "tls-rr"
	out, err = exec.CommandContext(ctx, rr, "-h", host, "-p", port, "--cafile", h.certFile(), "-V", "5", "-q", "1", "-W", "10", "-i", cid,
		"-t", "lmos/v1/things/"+lmos.TopicKey(wssID)+"/actions/count", "-e", "lmos/v1/clients/"+cid+"/r",
		"-D", "PUBLISH", "content-type", "application/json", "-m", `{"n":0,"tag":"over-tls"}`).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"tag":"over-tls"`) || !strings.Contains(string(out), wssID) {
		t.Fatalf("mosquitto_rr --cafile to the wss agent: %v\n%s", err, out)
	}

	client := h.trustingClient()
	for _, id := range []string{mqttsID, wssID} {
		req, _ := http.NewRequest(http.MethodPost, h.HTTPSURL+"/proxy/"+id+"/actions/count", strings.NewReader(`{"n":0,"tag":"https"}`))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"agent":"`+id+`"`)) {
			t.Fatalf("https proxy to %s: %s %s", id, resp.Status, body)
		}
	}
	if n := h.Main.TLS.HandshakeFailures("https") + h.Main.TLS.HandshakeFailures("mqtts"); n != 0 {
		t.Errorf("%d handshakes failed among trusting clients", n)
	}
}

func hasLink(links []map[string]any, rel, href, fp string) bool {
	for _, l := range links {
		if l["rel"] == rel && l["href"] == href && l[lmos.MemberCertFingerprint] == fp {
			return true
		}
	}
	return false
}

func portOf(a net.Addr) int {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.Port
	}
	return 0
}

// TestTLSWrongPinRefused: an agent pinned to another certificate is
// refused before it sends anything, over MQTTS and WSS alike, with an
// error naming both fingerprints; nothing is registered. With a pin file
// (trust on first use), the first connection keeps the hub's fingerprint
// and a hub with another certificate is refused afterwards.
func TestTLSWrongPinRefused(t *testing.T) {
	h := startTLSHub(t, nil)
	wrong := lmos.Fingerprint([]byte("another certificate"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, url := range []string{"mqtts://" + h.Main.MQTTSAddr.String(), "wss://" + h.Main.HTTPSAddr.String() + "/ws"} {
		const id = "urn:example:tls-wrong-pin"
		a, err := agent.Connect(ctx, agent.Options{URL: url, TLSFingerprint: wrong, TD: countTD(id), Timeout: 5 * time.Second})
		if err == nil {
			a.Close()
			t.Fatalf("%s: an agent with a wrong pin connected", url)
		}
		if !errors.Is(err, lmos.ErrFingerprintMismatch) || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), h.Main.TLS.Fingerprint()) {
			t.Fatalf("%s: %v, want lmos.ErrFingerprintMismatch naming both fingerprints", url, err)
		}
		if _, err := h.Main.Registry.Get(id); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Fatalf("%s: the refused agent's Thing: %v", url, err)
		}
	}

	pinFile := filepath.Join(t.TempDir(), "state", "hub.pin")
	const tofuID = "urn:example:tls-tofu"
	a, err := agent.Connect(ctx, agent.Options{URL: "mqtts://" + h.Main.MQTTSAddr.String(), TLSPinFile: pinFile, TD: countTD(tofuID), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("first use: %v", err)
	}
	a.Close()
	kept, err := os.ReadFile(pinFile)
	if err != nil || strings.TrimSpace(string(kept)) != h.Main.TLS.Fingerprint() {
		t.Fatalf("pin file holds %q (%v), want %s", kept, err, h.Main.TLS.Fingerprint())
	}
	other := startTLSHub(t, nil) // its own data dir: another certificate
	_, err = agent.Connect(ctx, agent.Options{URL: "wss://" + other.Main.HTTPSAddr.String() + "/ws", TLSPinFile: pinFile, TD: countTD(tofuID), Timeout: 5 * time.Second})
	if !errors.Is(err, lmos.ErrFingerprintMismatch) {
		t.Fatalf("another hub with the pin file: %v, want lmos.ErrFingerprintMismatch", err)
	}
	if _, err := other.Main.Registry.Get(tofuID); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("the refused agent's Thing on the other hub: %v", err)
	}
}

// freePort is a port nothing listens on (bound and released).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestTLSOnlyClosesPlainListeners: with tls.only the addresses configured
// for plain HTTP and MQTT refuse connections, the directory TD names only
// TLS doors, the broker's status (read with mosquitto_sub --cafile) the
// HTTPS directory, and an agent works over MQTTS.
func TestTLSOnlyClosesPlainListeners(t *testing.T) {
	httpAddr, mqttAddr := freePort(t), freePort(t)
	h := startTLSHub(t, func(c *Config) {
		c.TLS.Only = true
		c.HTTP.Addr, c.MQTT.Addr = httpAddr, mqttAddr
	})
	if h.Main.HTTPAddr != nil || h.Main.MQTTAddr != nil {
		t.Fatalf("plain listeners bound: %v %v", h.Main.HTTPAddr, h.Main.MQTTAddr)
	}
	for _, addr := range []string{httpAddr, mqttAddr} {
		if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			c.Close()
			t.Fatalf("%s accepts connections under tls.only", addr)
		}
	}
	var td map[string]any
	getJSON(t, h.trustingClient(), h.HTTPSURL+lmos.DirectoryPath, &td)
	raw, _ := json.Marshal(td)
	for _, plain := range []string{`"mqtt://`, `"ws://`, `"http://`} {
		if bytes.Contains(raw, []byte(plain)) {
			t.Errorf("directory TD under tls.only names %s…: %s", plain, raw)
		}
	}
	for _, secure := range []string{`"mqtts://`, `"wss://`, `"https://`} {
		if !bytes.Contains(raw, []byte(secure)) {
			t.Errorf("directory TD under tls.only lacks %s…: %s", secure, raw)
		}
	}
	// The broker's retained status names the HTTPS directory
	// (mosquitto_sub trusting the certificate as its CA).
	sub := mosquittoTool(t, "mosquitto_sub")
	host, port, _ := strings.Cut(h.Main.MQTTSAddr.String(), ":")
	out, err := exec.Command(sub, "-h", host, "-p", port, "--cafile", h.certFile(), "-t", "lmos/v1/hub/status", "-C", "1", "-W", "10").CombinedOutput()
	var status struct{ Status, Directory string }
	if err != nil || json.Unmarshal(out, &status) != nil || status.Directory != h.HTTPSURL+lmos.DirectoryPath {
		t.Fatalf("hub status over mqtts: %v %s, want the directory %s", err, out, h.HTTPSURL+lmos.DirectoryPath)
	}

	// An agent on MQTTS reads its own property back through the broker.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := newGoCounter(t, ctx, agent.Options{URL: "mqtts://" + h.Main.MQTTSAddr.String(), TLSFingerprint: h.Main.TLS.Fingerprint()}, "urn:example:tls-only", 3)
	v, err := a.ReadProperty(ctx, "urn:example:tls-only", "level")
	if err != nil || v.String() != "3" {
		t.Fatalf("read over mqtts: %v %v, want 3", v, err)
	}
}

// TestTLSReloadsCertificate: the user's certificate files replaced while
// the hub runs are served from the next handshake on, without a restart:
// /api/status and the directory TD show the new fingerprint, a client
// pinned to the new one connects, and the reload is counted.
func TestTLSReloadsCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "hub.crt"), filepath.Join(dir, "hub.key")
	writePair := func() {
		certPEM, keyPEM, err := tlscert.Generate(tlscert.HostNames(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// The key first: the hub must not take the new certificate with the
		// old key (it keeps the old pair until both match).
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writePair()
	h := startTLSHub(t, func(c *Config) {
		c.TLS.Cert, c.TLS.Key = certFile, keyFile
		c.TLS.ReloadInterval = Duration(20 * time.Millisecond)
	})
	first := h.Main.TLS.Fingerprint()
	pinned := func(fp string) error {
		check, err := lmos.Pin(fp)
		if err != nil {
			return err
		}
		c, err := tls.Dial("tcp", h.Main.MQTTSAddr.String(), lmos.PinnedConfig(check))
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := pinned(first); err != nil {
		t.Fatalf("pinned to the first certificate: %v", err)
	}
	writePair()
	var st struct{ TLS struct{ Fingerprint string } }
	// Whichever certificate is served: the answer says which.
	anyCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: lmos.PinnedConfig(func(string) error { return nil })}}
	waitFor(t, 10*time.Second, "the new certificate served", func() bool {
		getJSON(t, anyCert, h.HTTPSURL+"/api/status", &st)
		return st.TLS.Fingerprint != first
	})
	second := st.TLS.Fingerprint
	if err := pinned(second); err != nil {
		t.Fatalf("pinned to the new certificate: %v", err)
	}
	if err := pinned(first); !errors.Is(err, lmos.ErrFingerprintMismatch) {
		t.Fatalf("pinned to the old certificate after the reload: %v", err)
	}
	if n := h.Main.TLS.Reloads(); n != 1 {
		t.Errorf("reloads %d, want 1", n)
	}
}

// TestTLSHandshakeBoundedAndCounted: hostile input on the MQTTS port. A
// client that opens a connection and never starts the handshake is closed
// after mqtt.connectTimeout (the handshake comes before CONNECT), and one
// that speaks plain MQTT to it is closed at once; each is one failed
// handshake counted for the door, and the broker accepted no client.
func TestTLSHandshakeBoundedAndCounted(t *testing.T) {
	h := startTLSHub(t, func(c *Config) { c.MQTT.ConnectTimeout = Duration(300 * time.Millisecond) })
	addr := h.Main.MQTTSAddr.String()
	closedBy := func(c net.Conn, d time.Duration) error {
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := c.Read(make([]byte, 64))
		return err
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	if err := closedBy(silent, 5*time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("a silent connection: %v, want closed by the hub (EOF)", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("a silent connection closed after %v, before mqtt.connectTimeout", d)
	}
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	// An MQTT 3.1.1 CONNECT, client id "x": not a TLS record.
	if _, err := plain.Write([]byte{0x10, 0x0d, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 30, 0, 1, 'x'}); err != nil {
		t.Fatal(err)
	}
	if err := closedBy(plain, 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("plain MQTT on the MQTTS port: %v, want the connection ended", err)
	}
	waitFor(t, 5*time.Second, "2 mqtts handshake failures counted", func() bool { return h.Main.TLS.HandshakeFailures("mqtts") == 2 })
	if n := h.Main.Broker.Clients(); n != 0 {
		t.Fatalf("%d clients connected", n)
	}
}

// TestTLSMQTTOverWSS: mqtt.js, as a browser page uses it, speaks MQTT 5 over
// /mqtt on the HTTPS port (WSS): trusting the hub's certificate it gets all
// of its own QoS 1 messages back, each once; trusting only the system's
// CAs its handshake is refused.
func TestTLSMQTTOverWSS(t *testing.T) {
	script := hubtest.InteropScript(t, "mqttjs-wss.mjs", "mqtt")
	h := startTLSHub(t, nil)
	url := "wss" + strings.TrimPrefix(h.HTTPSURL, "https") + "/mqtt"
	run := func(ca string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "node", script, url, ca, "25").CombinedOutput()
		if err != nil {
			t.Fatalf("node %s: %v\n%s", ca, err, out)
		}
		var line map[string]any
		if err := json.Unmarshal(bytes.TrimSpace(out), &line); err != nil {
			t.Fatalf("node %s: %v\n%s", ca, err, out)
		}
		return line
	}
	if got := run(h.certFile()); got["got"] != 25.0 {
		t.Fatalf("over WSS with the certificate trusted: %v", got)
	}
	if got := run("-"); got["refused"] == nil || !strings.Contains(fmt.Sprint(got["refused"]), "certificate") {
		t.Fatalf("over WSS without trusting the certificate: %v", got)
	}
}
