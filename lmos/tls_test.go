package lmos

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestFingerprintForms(t *testing.T) {
	der := []byte("not really a certificate")
	fp := Fingerprint(der)
	sum := sha256.Sum256(der)
	if !strings.HasPrefix(fp, "sha256:") || len(fp) != len("sha256:")+32*3-1 || strings.ToUpper(fp[7:]) != fp[7:] {
		t.Fatalf("Fingerprint = %q, want sha256: and 32 upper-case hex pairs", fp)
	}
	bare := strings.ReplaceAll(fp[7:], ":", "")
	for _, in := range []string{fp, strings.ToLower(fp), fp[7:], bare, strings.ToLower(bare), "SHA256:" + bare, "  " + fp + "\n"} {
		got, err := ParseFingerprint(in)
		if err != nil || got != fp {
			t.Errorf("ParseFingerprint(%q) = %q, %v; want %q", in, got, err, fp)
		}
	}
	if bare != strings.ToUpper(hex.EncodeToString(sum[:])) {
		t.Errorf("fingerprint %s is not the SHA-256 of the DER bytes", fp)
	}
	for _, in := range []string{"", "sha256:", bare[:62], bare + "00", "sha256:" + strings.Replace(bare, bare[:2], "zz", 1), "sha1:" + bare} {
		if got, err := ParseFingerprint(in); err == nil {
			t.Errorf("ParseFingerprint(%q) = %q, want an error", in, got)
		}
	}
}
