package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// to dir/name.pem and dir/name-key.pem and returns the certificate's DER.
func selfSigned(t *testing.T, dir, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Readable by the user mosquitto drops to.
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o644); err != nil {
		t.Fatal(err)
	}
	return der
}

// The bridge over TLS (mqtts://) trusting the upstream by a pinned
// fingerprint or a CA file, and refusing a certificate that is neither;
// and over MQTT on WebSocket (ws://). Messages cross each working link.
func TestBridgeTLSAndWebSocket(t *testing.T) {
	certDir, err := os.MkdirTemp("", "lmos-bridge-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(certDir) })
	if err := os.Chmod(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	der := selfSigned(t, certDir, "upstream")
	other := selfSigned(t, certDir, "other")
	_, tlsPort, _ := net.SplitHostPort(freePort(t))
	_, wsPort, _ := net.SplitHostPort(freePort(t))
	up := newUpstream(t,
		"listener "+tlsPort+" 127.0.0.1", "certfile "+certDir+"/upstream.pem", "keyfile "+certDir+"/upstream-key.pem",
		"listener "+wsPort+" 127.0.0.1", "protocol websockets")
	up.start()
	waitFor(t, 10*time.Second, "mosquitto's TLS and WebSocket listeners", func() bool {
		for _, p := range []string{tlsPort, wsPort} {
			c, err := net.Dial("tcp", "127.0.0.1:"+p)
			if err != nil {
				return false
			}
			c.Close()
		}
		return true
	})
	for _, c := range []struct {
		name, url string
		edit      func(*Config)
		ok        bool
		why       string
	}{
		{"pinned", "mqtts://127.0.0.1:" + tlsPort, func(c *Config) { c.Bridge.Fingerprint = lmos.Fingerprint(der) }, true, ""},
		{"ca file", "mqtts://127.0.0.1:" + tlsPort, func(c *Config) { c.Bridge.CAFile = certDir + "/upstream.pem" }, true, ""},
		{"websocket", "ws://127.0.0.1:" + wsPort, nil, true, ""},
		{"another pin", "mqtts://127.0.0.1:" + tlsPort, func(c *Config) { c.Bridge.Fingerprint = lmos.Fingerprint(other) }, false, "fingerprint"},
		{"another ca", "mqtts://127.0.0.1:" + tlsPort, func(c *Config) { c.Bridge.CAFile = certDir + "/other.pem" }, false, "certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := startHub(t, bridgeHub(up, "tls/# in 1 up/ "+strings.ReplaceAll(c.name, " ", "-")+"/", func(cfg *Config) {
				cfg.Bridge.URL = c.url
				cfg.Bridge.ClientID = "hub-" + strings.ReplaceAll(c.name, " ", "-")
				if c.edit != nil {
					c.edit(cfg)
				}
			}))
			if !c.ok {
				waitFor(t, 20*time.Second, "the refusal reported", func() bool {
					st := h.Main.Bridge.State()
					return st.Errors > 0 && strings.Contains(st.LastError, c.why)
				})
				if st := h.Main.Bridge.State(); st.State == "connected" || !st.LastSuccess.IsZero() {
					t.Errorf("connected to an untrusted upstream: %+v", st)
				}
				return
			}
			waitFor(t, 20*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })
			sub := startSub(t, h.MQTTAddr(), "-q", "1", "-t", "up/tls/#")
			remote := strings.ReplaceAll(c.name, " ", "-") + "/tls/x"
			waitFor(t, 20*time.Second, "a message across", func() bool {
				mosqPub(t, up.addr(), "-q", "1", "-t", remote, "-m", "hello")
				time.Sleep(100 * time.Millisecond)
				return sub.count("up/tls/x hello") > 0
			})
		})
	}
}

// Upstream credentials: the right ones connect and carry messages; wrong
// ones are refused by the upstream (CONNACK "not authorized"), which the
// link reports while it keeps retrying.
func TestBridgeCredentials(t *testing.T) {
	passwd, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		mosquittoBroker(t) // skips or fails as for the broker
		t.Fatalf("mosquitto_passwd missing beside %s: %v", mosquittoBin, err)
	}
	dir, err := os.MkdirTemp("", "lmos-bridge-auth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "passwd")
	if out, err := exec.Command(passwd, "-b", "-c", file, "site-a", "s3cret").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v %s", err, out)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, "allow_anonymous false", "password_file "+file)
	up.start()
	for _, c := range []struct {
		pass string
		ok   bool
	}{{"s3cret", true}, {"wrong", false}} {
		h := startHub(t, bridgeHub(up, `auth/# in 1 up/ ""`, func(cfg *Config) {
			cfg.Bridge.Username, cfg.Bridge.Password = "site-a", c.pass
			cfg.Bridge.ClientID = "hub-" + c.pass
		}))
		if !c.ok {
			waitFor(t, 20*time.Second, "the refusal reported", func() bool {
				st := h.Main.Bridge.State()
				return st.Errors > 0 && strings.Contains(st.LastError, "the upstream refused the connection: not authorized (bridge.username, bridge.password) (reason code 0x87)")
			})
			if st := h.Main.Bridge.State(); st.State == "connected" || st.URL != up.url() {
				t.Errorf("state with wrong credentials: %+v", st)
			}
			continue
		}
		waitFor(t, 20*time.Second, "bridge connected", func() bool { return h.Main.Bridge.State().State == "connected" })
		sub := startSub(t, h.MQTTAddr(), "-q", "1", "-t", "up/auth/#")
		waitFor(t, 20*time.Second, "a message across", func() bool {
			mosqPub(t, up.addr(), "-u", "site-a", "-P", "s3cret", "-q", "1", "-t", "auth/x", "-m", "hello")
			time.Sleep(100 * time.Millisecond)
			return sub.count("up/auth/x hello") > 0
		})
	}
}
