package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

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
