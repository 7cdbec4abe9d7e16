package tlscert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// TestEnsureGeneratesOnceAndKeeps: the first call makes an ECDSA P-256
// certificate for the names given, the loopback addresses and localhost,
// valid for Validity, with the key readable by its owner only; the second
// call keeps both files as they are.
func TestEnsureGeneratesOnceAndKeeps(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	names := HostNames("pi-abc123.local")
	certFile, keyFile, generated, err := Ensure(dir, names, now)
	if err != nil || !generated {
		t.Fatalf("Ensure = %v, generated %v", err, generated)
	}
	st, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	c, err := Load(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf := c.Leaf()
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", leaf.PublicKey)
	}
	for _, want := range []string{"localhost", "pi-abc123.local"} {
		if err := leaf.VerifyHostname(want); err != nil {
			t.Errorf("not valid for %s: %v (DNS names %v)", want, err, leaf.DNSNames)
		}
	}
	for _, ip := range []string{"127.0.0.1", "::1"} {
		if err := leaf.VerifyHostname(ip); err != nil {
			t.Errorf("not valid for %s: %v (IPs %v)", ip, err, leaf.IPAddresses)
		}
	}
	if h, _ := os.Hostname(); h != "" {
		first, _, _ := strings.Cut(h, ".")
		if err := leaf.VerifyHostname(first + ".local"); err != nil {
			t.Errorf("not valid for the host's .local name: %v", err)
		}
	}
	// Not a CA: trusting it trusts nothing its key might sign.
	if leaf.IsCA || leaf.KeyUsage&x509.KeyUsageCertSign != 0 || !leaf.BasicConstraintsValid {
		t.Errorf("the certificate can sign certificates (CA %v, key usage %b)", leaf.IsCA, leaf.KeyUsage)
	}
	if d := leaf.NotAfter.Sub(now); d < Validity-time.Minute || d > Validity+time.Minute {
		t.Errorf("valid for %v, want %v", d, Validity)
	}
	// A client that trusts it (curl --cacert) verifies it for 127.0.0.1.
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("does not verify against itself: %v", err)
	}

	before, _ := os.ReadFile(certFile)
	_, _, generated, err = Ensure(dir, names, now)
	if err != nil || generated {
		t.Fatalf("second Ensure = %v, generated %v; want the files kept", err, generated)
	}
	after, _ := os.ReadFile(certFile)
	if string(before) != string(after) {
		t.Error("the second Ensure changed the certificate")
	}

	// Half a pair is the user's business: refused, not overwritten.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Ensure(dir, names, now); err == nil {
		t.Error("Ensure with a certificate but no key succeeded")
	}
	if after2, _ := os.ReadFile(certFile); string(after2) != string(before) {
		t.Error("Ensure touched the lone certificate")
	}
}

// TestFingerprintIsOpenSSLs: the fingerprint is the one `openssl x509
// -fingerprint -sha256` prints, with the sha256: prefix.
func TestFingerprintIsOpenSSLs(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("LMOS_INTEROP") == "1" {
			t.Fatalf("openssl not installed (run scripts/test-deps.sh): %v", err)
		}
		t.Skip("openssl not installed; `make test` installs it")
	}
	certFile, keyFile, _, err := Ensure(t.TempDir(), HostNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(openssl, "x509", "-noout", "-fingerprint", "-sha256", "-in", certFile).Output()
	if err != nil {
		t.Fatalf("openssl: %v", err)
	}
	_, hex, ok := strings.Cut(strings.TrimSpace(string(out)), "=")
	if !ok {
		t.Fatalf("openssl printed %q", out)
	}
	if want := lmos.FingerprintPrefix + hex; c.Fingerprint() != want {
		t.Errorf("fingerprint %s, openssl says %s", c.Fingerprint(), want)
	}
}

// writePair writes a fresh self-signed pair to certFile and keyFile.
func writePair(t *testing.T, certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM, err := Generate(Names{DNS: []string{"localhost"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckReloadsNewFilesKeepsBrokenOnes: a new pair is served from the
// next handshake on and announced; a certificate without its key (a copy
// half done) keeps the previous pair.
func TestCheckReloadsNewFilesKeepsBrokenOnes(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	writePair(t, certFile, keyFile)
	c, err := Load(certFile, keyFile, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	first := c.Fingerprint()
	if c.Check() {
		t.Fatal("Check reloaded unchanged files")
	}
	var announced []string
	c.OnChange(func(fp string) { announced = append(announced, fp) })

	// Only the certificate replaced: it does not match the key.
	certPEM, _, err := Generate(Names{DNS: []string{"localhost"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if c.Check() || c.Fingerprint() != first {
		t.Fatalf("a certificate without its key was loaded (%s)", c.Fingerprint())
	}

	writePair(t, certFile, keyFile)
	if !c.Check() {
		t.Fatal("Check did not reload a new pair")
	}
	second := c.Fingerprint()
	if second == first || len(announced) != 1 || announced[0] != second || c.Reloads() != 1 {
		t.Fatalf("after reload: fingerprint %s (was %s), announced %v, reloads %d", second, first, announced, c.Reloads())
	}
	// The next handshake gets the new certificate.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = tls.Server(conn, c.ServerConfig()).Handshake()
			}()
		}
	}()
	var got string
	cfg := lmos.PinnedConfig(func(fp string) error { got = fp; return nil })
	conn, err := tls.Dial("tcp", ln.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if got != second {
		t.Errorf("handshake presented %s, want the reloaded %s", got, second)
	}
}

// TestListenerCountsFailedHandshakes: a client that refuses the
// certificate (it does not trust it) fails the handshake; the listener
// counts it for its door, and a trusting client's handshake is not counted.
func TestListenerCountsFailedHandshakes(t *testing.T) {
	certFile, keyFile, _, err := Ensure(t.TempDir(), HostNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := c.Listener(raw, "mqtts")
	defer ln.Close()
	served := make(chan error, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 4)
				_, err := io.ReadFull(conn, buf)
				served <- err
			}()
		}
	}()
	// Untrusting: the system roots do not hold the certificate.
	_, err = tls.Dial("tcp", raw.Addr().String(), &tls.Config{ServerName: "127.0.0.1"})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("untrusting client: %v, want x509.UnknownAuthorityError", err)
	}
	if err := <-served; err == nil {
		t.Fatal("the server read from a connection whose handshake failed")
	}
	if n := c.HandshakeFailures("mqtts"); n != 1 {
		t.Errorf("failures counted %d, want 1", n)
	}
	// Trusting (pinned) client.
	check, err := lmos.Pin(c.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	cfg := lmos.PinnedConfig(check)
	conn, err := tls.Dial("tcp", raw.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("trusted connection: %v", err)
	}
	conn.Close()
	if n := c.HandshakeFailures("mqtts"); n != 1 {
		t.Errorf("failures counted %d after a good handshake, want still 1", n)
	}
}
