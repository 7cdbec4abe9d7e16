package lmos

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// TLS on the wire (PROTOCOL §10 "TLS"): the hub names its certificate by
// the SHA-256 digest of the DER certificate, written as FingerprintPrefix
// and 32 upper-case hex pairs joined by colons — what `openssl x509
// -fingerprint -sha256` and browsers print, so a person compares it with
// the tools at hand. It travels in the TXT key TXTTLS, /api/status and the
// directory TD (MemberCertFingerprint).
const (
	FingerprintPrefix = "sha256:"
	// TXTTLS is the DNS-SD TXT key carrying the fingerprint.
	TXTTLS = "tls"
	// MemberCertFingerprint is the directory TD link member naming the
	// certificate a TLS link's endpoint presents.
	MemberCertFingerprint = "lmos:certFingerprint"
	// ServiceSecureMQTT is the IANA service name of MQTT over TLS.
	ServiceSecureMQTT = "_secure-mqtt._tcp"
)

// Fingerprint is the SHA-256 fingerprint of a DER certificate in the
// canonical form, e.g. "sha256:AB:CD:…".
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return formatFingerprint(sum[:])
}

func formatFingerprint(sum []byte) string {
	var b strings.Builder
	b.Grow(len(FingerprintPrefix) + 3*len(sum))
	b.WriteString(FingerprintPrefix)
	const digits = "0123456789ABCDEF"
	for i, c := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&0xf])
	}
	return b.String()
}

// ErrFingerprintMismatch is the error of a TLS handshake whose certificate
// is not the pinned one.
var ErrFingerprintMismatch = errors.New("the hub's TLS certificate does not match the pinned fingerprint")

// ParseFingerprint reads a SHA-256 fingerprint as people paste it: with or
// without the "sha256:" prefix (any case), hex in any case, with or without
// colons. It returns the canonical form.
func ParseFingerprint(s string) (string, error) {
	t := strings.TrimSpace(s)
	if len(t) >= len(FingerprintPrefix) && strings.EqualFold(t[:len(FingerprintPrefix)], FingerprintPrefix) {
		t = t[len(FingerprintPrefix):]
	}
	t = strings.ReplaceAll(t, ":", "")
	if len(t) != 2*sha256.Size {
		return "", fmt.Errorf("invalid certificate fingerprint %q: want 32 hex pairs (sha256:AB:CD:…)", s)
	}
	sum, err := hex.DecodeString(t)
	if err != nil {
		return "", fmt.Errorf("invalid certificate fingerprint %q: %w", s, err)
	}
	return formatFingerprint(sum), nil
}

// Pin returns the check of PinnedConfig that accepts exactly the
// certificate with fingerprint pin (any form ParseFingerprint reads); a
// mismatch is an error wrapping ErrFingerprintMismatch.
func Pin(pin string) (func(fingerprint string) error, error) {
	want, err := ParseFingerprint(pin)
	if err != nil {
		return nil, err
	}
	return func(got string) error {
		if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			return fmt.Errorf("%w: it presented %s, pinned is %s", ErrFingerprintMismatch, got, want)
		}
		return nil
	}, nil
}

// PinnedConfig is a client TLS configuration that trusts the certificate
// check accepts, given its fingerprint (Pin; trust on first use records
// the first one), instead of a CA: neither the chain nor the host name is
// checked, as ssh checks a host key.
func PinnedConfig(check func(fingerprint string) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The pin replaces the CA and name checks; VerifyConnection runs on
		// every handshake, resumed ones included.
		InsecureSkipVerify: true, //nolint:gosec // verified by check below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the hub presented no TLS certificate")
			}
			// No validity dates either: a Pi has no clock battery and a LAN
			// may have no time server, so "now" can be 1970 at boot; the pin
			// names the certificate as an ssh host key names the host.
			return check(Fingerprint(cs.PeerCertificates[0].Raw))
		},
	}
}
