// Package tlscert gives the hub its TLS certificate: a self-signed one
// generated on first start and kept in the data directory, or the user's
// files; it reloads them when they change (a cheap poll: it works with
// editors, cp, renames and symlink swaps alike, where file watches miss
// some), names the certificate by its fingerprint, and counts the
// handshakes that fail. It knows nothing of the hub.
package tlscert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// File names of the generated certificate in the data directory.
const (
	CertFile = "tls-cert.pem"
	KeyFile  = "tls-key.pem"
)

// Validity of a generated certificate: long, because a pinned certificate
// that expires breaks every agent that pinned it, and clients that pin do
// not check dates (lmos.PinnedConfig).
const Validity = 10 * 365 * 24 * time.Hour

// Names are what a generated certificate is valid for.
type Names struct {
	DNS []string
	IPs []net.IP
}

// Ensure returns the certificate and key files in dir, generating a
// self-signed pair for names when there is none. A half-present pair (one
// file without the other) is an error, not overwritten: the user may be
// copying files in.
func Ensure(dir string, names Names, now time.Time) (certFile, keyFile string, generated bool, err error) {
	certFile, keyFile = filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	_, errC := os.Stat(certFile)
	_, errK := os.Stat(keyFile)
	switch {
	case errC == nil && errK == nil:
		return certFile, keyFile, false, nil
	case errC == nil || errK == nil:
		return "", "", false, fmt.Errorf("only one of %s and %s exists: remove it to generate a new certificate, or add the other", certFile, keyFile)
	case !errors.Is(errC, fs.ErrNotExist):
		return "", "", false, errC
	case !errors.Is(errK, fs.ErrNotExist):
		return "", "", false, errK
	}
	certPEM, keyPEM, err := Generate(names, now)
	if err != nil {
		return "", "", false, err
	}
	// The key first, 0600, so the certificate never exists without it.
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", false, err
	}
	if err := writeFile(certFile, certPEM, 0o644); err != nil {
		os.Remove(keyFile)
		return "", "", false, err
	}
	return certFile, keyFile, true, nil
}

// writeFile writes data to a temporary file and renames it into place, so
// a crash leaves no torn file behind.
func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

// Generate makes a self-signed ECDSA P-256 certificate for names, valid
// from an hour before now (clocks on a LAN disagree) for Validity, and
// returns it and its key in PEM.
//
// It is not a CA (basic constraints CA:FALSE, no certificate signing):
// a user who adds it to a trust store (curl --cacert, mosquitto --cafile,
// an OS store) trusts this one certificate, never certificates for other
// names signed with its key should the hub's key leak. OpenSSL, Go and
// Python accept such a self-signed certificate as its own trust anchor.
func Generate(names Names, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot generate a tls key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("cannot generate a certificate serial: %w", err)
	}
	cn := "lmos-hub"
	if len(names.DNS) > 0 {
		cn = names.DNS[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"lmos-hub self-signed"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		DNSNames:              names.DNS,
		IPAddresses:           names.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot create the certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot encode the tls key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// HostNames are the names a generated certificate is made for: the host
// name, its first label, both under .local, the extra names given (the
// mDNS host name the hub advertises), localhost, and every address of the
// machine's interfaces with 127.0.0.1 and ::1.
func HostNames(extra ...string) Names {
	var n Names
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			n.DNS = append(n.DNS, s)
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		first, _, _ := bytes.Cut([]byte(h), []byte("."))
		add(h)
		add(string(first))
		add(string(first) + ".local")
	}
	for _, e := range extra {
		add(e)
	}
	add("localhost")
	ips := map[string]bool{}
	addIP := func(ip net.IP) {
		if ip != nil && !ips[ip.String()] {
			ips[ip.String()] = true
			n.IPs = append(n.IPs, ip)
		}
	}
	addIP(net.IPv4(127, 0, 0, 1).To4())
	addIP(net.IPv6loopback)
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLinkLocalUnicast() {
				ip := ipn.IP
				if v4 := ip.To4(); v4 != nil {
					ip = v4
				}
				addIP(ip)
			}
		}
	}
	return n
}

// Cert is the certificate the hub serves, reloaded when its files change.
type Cert struct {
	certFile, keyFile string
	log               *slog.Logger

	cur atomic.Pointer[loaded]

	mu       sync.Mutex
	onChange []func(fingerprint string)
	lastBad  string // the fingerprint-less reason last logged, to log a broken pair once

	reloads  atomic.Uint64
	failures sync.Map // door → *atomic.Uint64
}

type loaded struct {
	cert        *tls.Certificate
	fingerprint string
	certPEM     []byte
	keyPEM      []byte
	notAfter    time.Time
}

// Load reads the certificate and key files (PEM; the first certificate is
// the hub's, the rest its chain).
func Load(certFile, keyFile string, log *slog.Logger) (*Cert, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Cert{certFile: certFile, keyFile: keyFile, log: log}
	l, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cur.Store(l)
	return c, nil
}

func (c *Cert) read() (*loaded, error) {
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return nil, fmt.Errorf("cannot read tls.cert: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("cannot read tls.key: %w", err)
	}
	return parse(certPEM, keyPEM, c.certFile, c.keyFile)
}

func parse(certPEM, keyPEM []byte, certFile, keyFile string) (*loaded, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("cannot load the tls certificate %s with key %s: %w", certFile, keyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("cannot parse the tls certificate %s: %w", certFile, err)
		}
		pair.Leaf = leaf
	}
	return &loaded{cert: &pair, fingerprint: lmos.Fingerprint(pair.Certificate[0]), certPEM: certPEM, keyPEM: keyPEM, notAfter: leaf.NotAfter}, nil
}

// Fingerprint is the served certificate's fingerprint (lmos.Fingerprint).
func (c *Cert) Fingerprint() string { return c.cur.Load().fingerprint }

// NotAfter is when the served certificate expires.
func (c *Cert) NotAfter() time.Time { return c.cur.Load().notAfter }

// Leaf is the served certificate.
func (c *Cert) Leaf() *x509.Certificate { return c.cur.Load().cert.Leaf }

// Files are the certificate's and the key's paths.
func (c *Cert) Files() (certFile, keyFile string) { return c.certFile, c.keyFile }

// OnChange calls f with the new fingerprint after each reload.
func (c *Cert) OnChange(f func(fingerprint string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onChange = append(c.onChange, f)
}

// ServerConfig is the TLS configuration of every door: TLS 1.2 or newer,
// HTTP/1.1 only over ALPN (WebSocket upgrades need it, and an HTTP/2
// server would add its weight to a Pi binary for no client of the hub),
// and the current certificate picked per handshake, so a reload needs no
// restart.
func (c *Cert) ServerConfig(nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cur.Load().cert, nil
		},
	}
}

// Check reloads the files when their contents changed; a pair that does
// not load (a copy in progress, a key that does not match) keeps the old
// one and is logged once. It reports whether it reloaded.
func (c *Cert) Check() bool {
	certPEM, errC := os.ReadFile(c.certFile)
	keyPEM, errK := os.ReadFile(c.keyFile)
	cur := c.cur.Load()
	if errC == nil && errK == nil && bytes.Equal(certPEM, cur.certPEM) && bytes.Equal(keyPEM, cur.keyPEM) {
		return false
	}
	var l *loaded
	err := errors.Join(errC, errK)
	if err == nil {
		l, err = parse(certPEM, keyPEM, c.certFile, c.keyFile)
	}
	c.mu.Lock()
	if err != nil {
		if msg := err.Error(); msg != c.lastBad {
			c.lastBad = msg
			c.log.Warn("the tls certificate files changed but do not load; still serving the previous certificate",
				"err", err, "fingerprint", cur.fingerprint)
		}
		c.mu.Unlock()
		return false
	}
	c.lastBad = ""
	c.cur.Store(l)
	c.reloads.Add(1)
	fns := append([]func(string){}, c.onChange...)
	c.mu.Unlock()
	c.log.Info("tls certificate reloaded", "fingerprint", l.fingerprint, "not_after", l.notAfter.UTC().Format(time.RFC3339))
	for _, f := range fns {
		f(l.fingerprint)
	}
	return true
}

// Watch checks the files every interval until ctx ends.
func (c *Cert) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Check()
		}
	}
}

// Reloads is how many times the certificate was reloaded.
func (c *Cert) Reloads() uint64 { return c.reloads.Load() }

// HandshakeFailures is how many TLS handshakes failed on door.
func (c *Cert) HandshakeFailures(door string) uint64 {
	if v, ok := c.failures.Load(door); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}

func (c *Cert) countFailure(door string) {
	v, _ := c.failures.LoadOrStore(door, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}
