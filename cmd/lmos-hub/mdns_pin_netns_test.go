package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/internal/tlscert"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/netnstest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// pinChildEnv selects what TestPinChild does in its namespace.
const pinChildEnv = "LMOS_PIN_CHILD"

// TestPinChild is not a test: TestMDNSPinnedAgentSkipsFakeHubs re-executes
// the binary to run a fake hub or the pinned agent inside a namespace.
func TestPinChild(t *testing.T) {
	c := netnstest.StartChild(t, pinChildEnv)
	args := strings.Split(os.Getenv("LMOS_PIN_ARGS"), "|")
	switch c.Mode {
	case "fakehub": // args: the real hub's fingerprint
		runFakeHub(c, args[0])
	case "agent": // args: hub address|fingerprint|pin file|how (fingerprint or pinfile)
		runPinnedAgent(c, args)
	}
	os.Exit(2)
}

// counter counts the connections a fake listener accepted and the bytes
// it read from them (after the TLS handshake, for a TLS listener).
type counter struct{ conns, bytes atomic.Int64 }

func (n *counter) String() string { return fmt.Sprintf("%d/%d", n.conns.Load(), n.bytes.Load()) }

// serveCounting accepts on ln and counts; conf != nil: TLS with it.
func serveCounting(ln net.Listener, n *counter, conf *tls.Config) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.conns.Add(1)
		go func() {
			defer c.Close()
			var r io.Reader = c
			if conf != nil {
				tc := tls.Server(c, conf)
				if tc.Handshake() != nil {
					return
				}
				r = tc
			}
			buf := make([]byte, 4096)
			for {
				k, err := r.Read(buf)
				n.bytes.Add(int64(k))
				if err != nil {
					return
				}
			}
		}()
	}
}

// runFakeHub announces three WoT directories that are not the hub, all
// on this host: "Fake Plain" (no tls=, its directory links only
// mqtt://…:1883, the reproduction of issue 24 point 5), "Fake Other"
// (tls= of its own certificate, mqtts://…:8883) and "Fake Copy" (tls=
// copying the real hub's fingerprint, mqtts://…:8883 presenting its own
// certificate). It counts what reaches its brokers and prints the counts
// when asked ("count").
func runFakeHub(c *netnstest.Child, realFP string) {
	certPEM, keyPEM, err := tlscert.Generate(tlscert.HostNames(), time.Now())
	if err != nil {
		panic(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		panic(err)
	}
	ownFP := lmos.Fingerprint(cert.Certificate[0])
	var plain, secure counter
	pln, err := net.Listen("tcp", ":1883")
	if err != nil {
		panic(err)
	}
	sln, err := net.Listen("tcp", ":8883")
	if err != nil {
		panic(err)
	}
	go serveCounting(pln, &plain, nil)
	go serveCounting(sln, &secure, &tls.Config{Certificates: []tls.Certificate{cert}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /td/{kind}", func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		if host == "" {
			host = r.Host
		}
		link := map[string]any{"rel": "lmos:broker", "href": "mqtt://" + net.JoinHostPort(host, "1883")}
		if r.PathValue("kind") != "plain" {
			link["href"] = "mqtts://" + net.JoinHostPort(host, "8883")
		}
		td := map[string]any{"@context": "https://www.w3.org/2022/wot/td/v1.1", "id": "urn:fake:" + r.PathValue("kind"),
			"title": "Fake", "@type": "ThingDirectory", "securityDefinitions": map[string]any{"nosec": map[string]any{"scheme": "nosec"}},
			"security": "nosec", "links": []any{link}}
		w.Header().Set("Content-Type", lmos.MediaTD)
		json.NewEncoder(w).Encode(td)
	})
	hln, err := net.Listen("tcp", ":8080")
	if err != nil {
		panic(err)
	}
	go http.Serve(hln, mux)
	dir := func(name, kind, fp string) dnssd.Service {
		text := []string{lmos.TXTPath + "=/td/" + kind, lmos.TXTType + "=" + lmos.TypeDirectory, lmos.TXTScheme + "=http"}
		if fp != "" {
			text = append(text, lmos.TXTTLS+"="+fp)
		}
		return dnssd.Service{Instance: name, Type: lmos.ServiceWoT, Subtypes: []string{lmos.SubtypeDirectory}, Port: 8080, Text: text}
	}
	adv, err := dnssd.Advertise(context.Background(), dnssd.AdvertiserConfig{Host: "fakehub", Interfaces: []string{"eth0"}, Logger: c.Log},
		dir("Fake Plain", "plain", ""), dir("Fake Other", "other", ownFP), dir("Fake Copy", "copy", realFP),
		dnssd.Service{Instance: "Fake Plain", Type: lmos.ServiceMQTT, Port: 1883})
	if err != nil {
		panic(err)
	}
	fmt.Println("fake hub announced")
	c.Serve(func(l string) {
		if l == "count" {
			fmt.Printf("count plain=%s tls=%s\n", &plain, &secure)
		}
	}, func() { adv.Close() })
}

// runPinnedAgent joins the hub at its address (mqtts, the fingerprint
// given) to get credentials, as an agent keeps them, and closes; then, at
// "find", it connects again with them finding the hub over mDNS, pinned
// by the fingerprint or by a pin file holding it (or trusting the hub's
// certificate file as a CA: how "tlsconfig"), and prints the broker its
// hub forms name.
func runPinnedAgent(c *netnstest.Child, args []string) {
	hubAddr, fp, pinFile, how := args[0], args[1], args[2], args[3]
	const id = "urn:test:pinned"
	td := []byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":"` + id + `","title":"Pinned",` +
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc","actions":{"ping":{}}}`)
	a, err := agent.Connect(context.Background(), agent.Options{URL: "mqtts://" + hubAddr + ":8883", TLSFingerprint: fp, TD: td, Logger: c.Log, Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println("first join failed:", err)
		os.Exit(1)
	}
	creds := a.JoinCredentials()
	a.Close()
	fmt.Println("joined, credentials kept")
	find := make(chan struct{}, 1)
	go c.Serve(func(l string) {
		if l == "find" {
			find <- struct{}{}
		}
	}, func() {})
	<-find
	opts := agent.Options{TD: td, Credentials: creds, Logger: c.Log, Timeout: 60 * time.Second}
	switch how {
	case "pinfile":
		if err := os.WriteFile(pinFile, []byte(fp+"\n"), 0o600); err != nil {
			panic(err)
		}
		opts.TLSPinFile = pinFile
	case "tlsconfig": // pinFile names the hub's certificate: trusted as a CA
		pem, err := os.ReadFile(pinFile)
		if err != nil {
			panic(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		// The LAN's link-local addresses are not in the self-signed
		// certificate's names (tlscert.HostNames): check one that is.
		opts.TLSConfig = &tls.Config{RootCAs: pool, ServerName: "localhost"}
	default:
		opts.TLSFingerprint = fp
	}
	a, err = agent.Connect(context.Background(), opts)
	if err != nil {
		fmt.Println("connect failed:", err)
		select {}
	}
	var doc struct {
		Actions map[string]struct {
			Forms []struct{ Href string }
		}
	}
	json.Unmarshal(a.TD(), &doc)
	for _, p := range doc.Actions {
		for _, f := range p.Forms {
			fmt.Println("connected, forms at", f.Href)
		}
	}
	fmt.Println("connected")
	select {}
}

// TestMDNSPinnedAgentSkipsFakeHubs (issue 24 point 5): an agent pinned to
// the hub's certificate, with stored credentials, finding its hub over
// mDNS while fake directories answer — one announcing no tls= and linking
// only plain mqtt:// (the reproduction: it got the Thing's password in
// clear), one announcing another certificate, one copying the hub's tls=
// but serving another certificate — skips each with a log line, sends
// nothing to any of them (no connection to the plain one, no byte after
// the handshake to the TLS one) and connects over TLS to the real hub once
// it is announced; with the pin as a fingerprint and in a pin file alike,
// and with no pin but a TLSConfig trusting the hub's certificate.
func TestMDNSPinnedAgentSkipsFakeHubs(t *testing.T) {
	for _, how := range []string{"fingerprint", "pinfile", "tlsconfig"} {
		t.Run(how, func(t *testing.T) {
			lan := netnstest.New(t, []string{"hub", "fake", "a1"})
			dir := t.TempDir()
			cfg := filepath.Join(dir, "hub.yaml")
			yaml := "mdns:\n  interfaces: [eth0]\ntls:\n  enabled: true\n  mqttsAddr: 0.0.0.0:8883\n  httpsAddr: 0.0.0.0:8443\n"
			if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			hubArgs := "LMOS_MDNS_ARGS=" + strings.Join([]string{"serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
				"--http-addr", "0.0.0.0:8080", "--mqtt-addr", "0.0.0.0:1883", "--admin-token", testToken, "--hub-name", "Real Hub"}, "|")
			hub := lan.Helper("hub", "TestMDNSChild", childEnv+"=run", hubArgs)
			hub.WaitContains(10*time.Second, "mdns advertising", "mqtts_port=8883")
			pem, err := os.ReadFile(filepath.Join(dir, "data", "tls-cert.pem"))
			if err != nil {
				t.Fatal(err)
			}
			der, _ := pemDecode(pem)
			fp := lmos.Fingerprint(der)
			hubIP := lan.Addr("hub")

			pinArg := filepath.Join(t.TempDir(), "hub.pin")
			if how == "tlsconfig" {
				pinArg = filepath.Join(dir, "data", "tls-cert.pem")
			}
			// The agent joins once and keeps its credentials; then the hub
			// goes away (the agent's host restarts while the hub is down).
			a1 := lan.Helper("a1", "TestPinChild", pinChildEnv+"=agent",
				"LMOS_PIN_ARGS="+strings.Join([]string{hubIP, fp, pinArg, how}, "|"))
			a1.WaitContains(15*time.Second, "joined, credentials kept")
			hub.Stop()

			fake := lan.Helper("fake", "TestPinChild", pinChildEnv+"=fakehub", "LMOS_PIN_ARGS="+fp)
			fake.WaitContains(10*time.Second, "fake hub announced")
			a1.Send("find")
			// Each fake skipped with a log line, in whatever order.
			unseen := map[string]bool{`hub="Fake Plain"`: true, `hub="Fake Other"`: true, `hub="Fake Copy"`: true}
			for len(unseen) > 0 {
				_, ok := a1.WaitLine(20*time.Second, func(l string) bool {
					for name := range unseen {
						if strings.Contains(l, "skipping a hub found over mDNS") && strings.Contains(l, name) {
							delete(unseen, name)
							return true
						}
					}
					return false
				})
				if !ok {
					t.Fatalf("no log line skipping %v", unseen)
				}
			}
			// The real hub comes back (same data, same certificate).
			hub = lan.Helper("hub", "TestMDNSChild", childEnv+"=run", hubArgs)
			a1.WaitContains(30*time.Second, "connected, forms at", "mqtts://"+hubIP+":8883")
			c := lan.HTTPClient("hub")
			base := "http://" + hubIP + ":8080"
			testwait.Eventually(t, 10*time.Second, "the pinned agent online", func() bool {
				return getThing(t, c, base, "urn:test:pinned").Presence.Status == "online"
			})
			fake.Send("count")
			// Nothing reached the fake brokers: no connection to the plain
			// one, no byte after a handshake to the TLS one (the agent's
			// check of "Fake Copy" is a handshake alone).
			line := fake.WaitContains(5*time.Second, "count ")
			if !strings.Contains(line, "plain=0/0 ") || !strings.HasSuffix(line, "/0") {
				t.Errorf("the fake hub got something: %s", line)
			}
		})
	}
}
