package main

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// TestVersionTLSPrintsTheServedFingerprint: `version --tls` reads the
// certificate a TLS hub generated in its data directory, without a hub
// (the one that made it is stopped), and prints the fingerprint the hub
// serves; with no certificate it fails and says how to get one.
func TestVersionTLSPrintsTheServedFingerprint(t *testing.T) {
	dir := t.TempDir()
	h := hubtest.StartIn(t, dir, func(c *Config) { c.TLS.Enabled = true })
	fp := h.Main.TLS.Fingerprint()
	h.Close()

	r := cli(t, nil, "", "version", "--tls", "--data-dir", dir).want(t, exitOK, "version --tls")
	if !strings.Contains(r.stdout, "fingerprint      "+fp+"\n") || !strings.Contains(r.stdout, "127.0.0.1") {
		t.Errorf("version --tls printed\n%s\nwant the fingerprint %s and the names", r.stdout, fp)
	}
	// The environment locates it as serve's settings do.
	r = cli(t, map[string]string{"LMOS_HUB_DATA_DIR": dir}, "", "version", "--tls").want(t, exitOK, "version --tls (env)")
	if !strings.Contains(r.stdout, fp) {
		t.Errorf("version --tls with LMOS_HUB_DATA_DIR printed\n%s", r.stdout)
	}
	r = cli(t, nil, "", "version", "--tls", "--data-dir", t.TempDir()).want(t, exitFailure, "version --tls without a certificate")
	if !strings.Contains(r.stderr, "generates one on its first start") {
		t.Errorf("version --tls without a certificate: stderr %q", r.stderr)
	}
	cli(t, nil, "", "version", "--bogus").want(t, exitUsage, "version --bogus")
}
