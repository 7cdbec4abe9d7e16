package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// clientTLS is the TLS configuration of opts (see Options.TLSFingerprint):
// a pin, a pin kept in a file (trust on first use), or CA verification.
func clientTLS(opts Options, log *slog.Logger) (*tls.Config, error) {
	switch {
	case opts.TLSFingerprint != "":
		check, err := lmos.Pin(opts.TLSFingerprint)
		if err != nil {
			return nil, fmt.Errorf("Options.TLSFingerprint: %w", err)
		}
		return lmos.PinnedConfig(check), nil
	case opts.TLSPinFile != "":
		p := &pinFile{path: opts.TLSPinFile, log: log}
		if err := p.load(); err != nil {
			return nil, err
		}
		return lmos.PinnedConfig(p.check), nil
	case opts.TLSConfig != nil:
		return opts.TLSConfig.Clone(), nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12}, nil
}

// untrusted reports an error of a hub whose certificate is not trusted: a
// first connection gives up at once (retrying cannot help), a reconnection
// keeps trying, as the certificate may be put right.
func untrusted(err error) bool {
	var v *tls.CertificateVerificationError
	return errors.Is(err, lmos.ErrFingerprintMismatch) || errors.As(err, &v)
}

// pinFile keeps the hub's fingerprint in a file: the first certificate
// seen is written there, every later one must match it. Deleting the file
// trusts the next certificate again (after the hub's was replaced on
// purpose).
type pinFile struct {
	path string
	log  *slog.Logger
	mu   sync.Mutex
	pin  func(string) error // nil until a fingerprint is known
}

func (p *pinFile) load() error {
	b, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot read the pinned hub certificate: %w", err)
	}
	check, err := lmos.Pin(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("the pin file %s: %w", p.path, err)
	}
	p.pin = check
	return nil
}

func (p *pinFile) check(fp string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pin != nil {
		if err := p.pin(fp); err != nil {
			return fmt.Errorf("%w (kept in %s; delete it if the hub's certificate was replaced on purpose)", err, p.path)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o700); err != nil {
		return fmt.Errorf("cannot keep the hub's certificate fingerprint: %w", err)
	}
	// O_EXCL: two agents sharing the file pin the first one's certificate.
	f, err := os.OpenFile(p.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		if err := p.load(); err != nil {
			return err
		}
		if p.pin == nil {
			return fmt.Errorf("the pin file %s is empty", p.path)
		}
		return p.pin(fp)
	}
	if err != nil {
		return fmt.Errorf("cannot keep the hub's certificate fingerprint: %w", err)
	}
	_, err = f.WriteString(fp + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p.path)
		return fmt.Errorf("cannot keep the hub's certificate fingerprint: %w", err)
	}
	p.pin, _ = lmos.Pin(fp)
	p.log.Info("trusting the hub's certificate on first use", "fingerprint", fp, "pin_file", p.path)
	return nil
}

// pinned reports whether opts name the hub's certificate (a fingerprint, or
// a pin file): such an agent connects only over TLS, to that certificate.
func pinned(opts Options) bool { return opts.TLSFingerprint != "" || opts.TLSPinFile != "" }

// secureURL reports whether the hub URL u is one over TLS.
func secureURL(u string) bool {
	scheme, _, _ := strings.Cut(u, "://")
	switch strings.ToLower(scheme) {
	case "mqtts", "ssl", "wss":
		return true
	}
	return false
}

// discoveryFilter is what an agent that trusts a certificate (pinned, or
// TLSConfig) takes from mDNS: a hub offering MQTT over TLS whose broker
// presents a trusted certificate; nil: any hub (no trust configured). A
// pinned agent also skips, before fetching anything from it, an
// announcement without tls= or naming another certificate: the credentials
// it connects with must never reach a host that merely answered on the LAN.
func discoveryFilter(opts Options, log *slog.Logger) (*hubFilter, error) {
	if !pinned(opts) && opts.TLSConfig == nil {
		return nil, nil
	}
	pin, err := configuredPin(opts, log)
	if err != nil {
		return nil, err
	}
	f := &hubFilter{}
	if pinned(opts) {
		f.entry = func(e dnssd.Entry) error { return checkAnnouncedPin(e, pin) }
	}
	f.info = func(ctx context.Context, h HubInfo) error { return probeSecureBroker(ctx, opts, pin, h) }
	return f, nil
}

// configuredPin is the certificate check the options pin, from
// TLSFingerprint or TLSPinFile; nil when none is known yet (a pin file not
// written: trust on first use) or the agent is not pinned.
func configuredPin(opts Options, log *slog.Logger) (func(string) error, error) {
	switch {
	case opts.TLSFingerprint != "":
		check, err := lmos.Pin(opts.TLSFingerprint)
		if err != nil {
			return nil, fmt.Errorf("Options.TLSFingerprint: %w", err)
		}
		return check, nil
	case opts.TLSPinFile != "":
		p := &pinFile{path: opts.TLSPinFile, log: log}
		if err := p.load(); err != nil {
			return nil, err
		}
		return p.pin, nil
	}
	return nil, nil
}

// checkAnnouncedPin refuses an announcement, before anything is fetched
// from it, that names no certificate or (pin not nil) another one.
func checkAnnouncedPin(e dnssd.Entry, pin func(string) error) error {
	txt := e.TXT()[lmos.TXTTLS]
	if txt == "" {
		return errors.New("it announces no TLS certificate (no tls= in its TXT record), and the agent is pinned to one")
	}
	fp, err := lmos.ParseFingerprint(txt)
	if err != nil {
		return fmt.Errorf("its TXT record's %s=: %w", lmos.TXTTLS, err)
	}
	if pin != nil {
		if err := pin(fp); err != nil {
			return fmt.Errorf("it announces another certificate: %w", err)
		}
	}
	return nil
}

// probeSecureBroker accepts a hub whose MQTT over TLS broker completes a
// handshake with a trusted certificate. A handshake alone, before any
// MQTT: a broker with another certificate (an announcement copying the
// hub's tls=) is skipped here, and the next answer tried, instead of
// failing the connect.
func probeSecureBroker(ctx context.Context, opts Options, pin func(string) error, h HubInfo) error {
	if h.SecureBrokerURL == "" {
		if !h.linksRead {
			return fmt.Errorf("%w: its directory TD could not be read", errTryAgain)
		}
		return errors.New("it offers no MQTT over TLS (no mqtts:// lmos:broker link)")
	}
	addr, _, err := brokerAddr(h.SecureBrokerURL)
	if err != nil {
		return err
	}
	cfg, err := brokerTLSConfig(opts, pin, h, addr)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(pctx, "tcp", addr)
	if err != nil {
		if untrusted(err) {
			return fmt.Errorf("its broker %s presents another certificate: %w", addr, err)
		}
		return fmt.Errorf("%w: cannot reach its broker %s: %w", errTryAgain, addr, err)
	}
	conn.Close()
	return nil
}

// brokerTLSConfig is how the agent trusts h's broker at addr: the pin (or,
// on first use, the certificate h announces), else opts.TLSConfig naming
// the broker's host.
func brokerTLSConfig(opts Options, pin func(string) error, h HubInfo, addr string) (*tls.Config, error) {
	if pinned(opts) {
		check := pin
		if check == nil {
			// Trust on first use: the certificate its announcement names.
			var err error
			if check, err = lmos.Pin(h.TLSFingerprint); err != nil {
				return nil, err
			}
		}
		return lmos.PinnedConfig(check), nil
	}
	cfg := opts.TLSConfig.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	return cfg, nil
}

// probeTimeout bounds the TLS handshake that checks a discovered broker.
const probeTimeout = 5 * time.Second
