package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

func TestKeygenWritesAnOwnerOnlyKeyAndNeverOverwritesIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.json")
	r := cli(t, nil, "", "keygen", "-o", path).want(t, exitOK, "keygen")
	did := strings.TrimSpace(r.stdout)
	k, err := proof.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if k.DID != did || k.Private == nil || !strings.HasPrefix(did, "did:key:z6Mk") {
		t.Fatalf("keygen printed %q, the file holds %s (secret %v)", did, k.DID, k.Private != nil)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	before, _ := os.ReadFile(path)
	r = cli(t, nil, "", "keygen", "-o", path).want(t, exitFailure, "keygen over an existing key")
	if !strings.Contains(r.stderr, "already exists") || r.stdout != "" {
		t.Fatalf("keygen over an existing key said %q / %q", r.stdout, r.stderr)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("keygen changed an existing key file")
	}
	cli(t, nil, "", "keygen", "extra").want(t, exitUsage, "keygen with an argument")
}

// keygen and sign agree on the default key file; verify prints the signer
// and created; a copy changed after signing fails and says why.
func TestSignAndVerifyWithTheDefaultKey(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"HOME": dir}
	did := strings.TrimSpace(cli(t, env, "", "keygen").want(t, exitOK, "keygen").stdout)
	if _, err := os.Stat(filepath.Join(dir, ".config", "lmos", "key.json")); err != nil {
		t.Fatalf("keygen did not write the default key: %v", err)
	}
	td := filepath.Join(dir, "td.json")
	if err := os.WriteFile(td, hubtest.Sample(t, "thermostat-agent.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	signed := filepath.Join(dir, "signed.json")
	cli(t, env, "", "sign", td, "-o", signed).want(t, exitOK, "sign")
	doc, _ := os.ReadFile(signed)
	res, err := proof.Verify(doc)
	if err != nil || res.DID != did {
		t.Fatalf("proof.Verify of the signed TD: %v, DID %s want %s", err, res.DID, did)
	}
	r := cli(t, env, "", "verify", signed).want(t, exitOK, "verify")
	if !strings.Contains(r.stdout, "signer:  "+did) || !strings.Contains(r.stdout, "created: "+res.Proof.Created) {
		t.Fatalf("verify printed %q", r.stdout)
	}
	// stdin and stdout
	r = cli(t, env, string(hubtest.Sample(t, "thermostat-agent.json")), "sign", "-").want(t, exitOK, "sign -")
	cli(t, env, r.stdout, "verify", "-").want(t, exitOK, "verify - of sign -")

	tampered := bytes.Replace(doc, []byte("Living room"), []byte("Bedroom"), 1)
	if bytes.Equal(tampered, doc) {
		t.Fatal("the tampering changed nothing")
	}
	r = cli(t, env, string(tampered), "verify", "-").want(t, exitFailure, "verify of a tampered TD")
	if !strings.Contains(r.stderr, "not verified: the signature does not match") {
		t.Fatalf("tampered: %q", r.stderr)
	}
	// sign without a key file says how to make one.
	r = cli(t, map[string]string{"HOME": t.TempDir()}, "", "sign", td).want(t, exitFailure, "sign without a key")
	if !strings.Contains(r.stderr, "lmos-hub keygen") {
		t.Fatalf("sign without a key: %q", r.stderr)
	}
}

// The W3C vc-di-eddsa vector (JCS) verifies with its key pair; a tampered
// copy does not.
func TestVerifyTheW3CVector(t *testing.T) {
	dir := filepath.Join(hubtest.SharedTestdata(t), "vc-di-eddsa")
	key, doc := filepath.Join(dir, "keyPair.json"), filepath.Join(dir, "signedJCS.json")
	r := cli(t, nil, "", "verify", "-key", key, doc).want(t, exitOK, "verify of the W3C vector")
	if !strings.Contains(r.stdout, "created: 2023-02-24T23:36:38Z") ||
		!strings.Contains(r.stdout, "https://vc.example/issuers/5678#z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2") {
		t.Fatalf("verify printed %q", r.stdout)
	}
	raw, _ := os.ReadFile(doc)
	tampered := bytes.Replace(raw, []byte("The School of Examples"), []byte("The School of Forgeries"), 1)
	r = cli(t, nil, string(tampered), "verify", "-key", key, "-").want(t, exitFailure, "verify of a tampered vector")
	if !strings.Contains(r.stderr, "the signature does not match") {
		t.Fatalf("tampered vector: %q", r.stderr)
	}
	// Without the key the https verification method cannot be resolved offline.
	r = cli(t, nil, "", "verify", doc).want(t, exitFailure, "verify of the vector without its key")
	if !strings.Contains(r.stderr, "not verified: verificationMethod") {
		t.Fatalf("vector without key: %q", r.stderr)
	}
}

func TestVerifySaysWhyNot(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.json")
	cli(t, nil, "", "keygen", "-o", key).want(t, exitOK, "keygen")
	signed := cli(t, nil, string(hubtest.BareTD("urn:x", "x")), "sign", "-key", key, "-").want(t, exitOK, "sign").stdout
	for name, c := range map[string]struct{ doc, reason string }{
		"unsigned":        {string(hubtest.BareTD("urn:x", "x")), "the document has no proof"},
		"not JSON":        {"{", "not a JSON object"},
		"cryptosuite":     {strings.Replace(signed, "eddsa-jcs-2022", "eddsa-rdfc-2022", 1), `cryptosuite "eddsa-rdfc-2022"`},
		"proof type":      {strings.Replace(signed, "DataIntegrityProof", "Ed25519Signature2020", 1), `proof type "Ed25519Signature2020"`},
		"not did:key":     {strings.Replace(signed, `"verificationMethod":"did:key:`, `"verificationMethod":"did:web:`, 1), "is not a did:key"},
		"bad multibase":   {strings.Replace(signed, `"proofValue":"z`, `"proofValue":"m`, 1), "proofValue is not a multibase"},
		"another key":     {strings.Replace(signed, `"title":"x"`, `"title":"y"`, 1), "the signature does not match"},
		"malformed DID":   {strings.Replace(signed, `#z6Mk`, `#z6Mx`, 1), "does not repeat its key"},
		"created garbage": {strings.Replace(signed, `"created":"`, `"created":"yesterday `, 1), "not an RFC 3339"},
	} {
		r := cli(t, nil, c.doc, "verify", "-").want(t, exitFailure, name)
		if !strings.HasPrefix(r.stderr, "not verified: ") || !strings.Contains(r.stderr, c.reason) || r.stdout != "" {
			t.Errorf("%s: stdout %q stderr %q, want the reason %q", name, r.stdout, r.stderr, c.reason)
		}
	}
	cli(t, nil, "", "verify").want(t, exitUsage, "verify without a file")
	cli(t, nil, "", "verify", "a", "b").want(t, exitUsage, "verify with two files")
	cli(t, nil, "", "verify", filepath.Join(dir, "missing.json")).want(t, exitFailure, "verify of a missing file")
}

// A TD signed with the CLI is accepted unchanged by the hub's HTTP door,
// and what the directory serves back (enriched) verifies:
// curl …/things/{id} | lmos-hub verify -.
func TestVerifyATDReadBackFromTheDirectory(t *testing.T) {
	h := hubtest.Start(t, nil)
	key := filepath.Join(t.TempDir(), "k.json")
	did := strings.TrimSpace(cli(t, nil, "", "keygen", "-o", key).want(t, exitOK, "keygen").stdout)
	td := hubtest.Sample(t, "thermostat-agent.json")
	signed := cli(t, nil, string(td), "sign", "-key", key, "-").want(t, exitOK, "sign").stdout
	res, err := proof.Verify([]byte(signed))
	if err != nil {
		t.Fatal(err)
	}
	id := "urn:uuid:0d9a6a53-5f43-4c4e-9a55-8f2f6c1b7a01"
	h.Put(id, []byte(signed))
	resp, served := h.Do(http.MethodGet, lmos.ThingPath(id), "", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d %s", resp.StatusCode, served)
	}
	if !bytes.Contains(served, []byte(`"registration"`)) {
		t.Fatalf("the directory served no enrichment: %s", served)
	}
	r := cli(t, nil, string(served), "verify", "-").want(t, exitOK, "verify of the served TD")
	if !strings.Contains(r.stdout, "signer:  "+did) || !strings.Contains(r.stdout, "created: "+res.Proof.Created) ||
		!strings.Contains(r.stdout, "set aside") {
		t.Fatalf("verify printed %q", r.stdout)
	}
	_, asSubmitted := h.Do(http.MethodGet, lmos.ThingPath(id)+"?enriched=false", "", nil, "")
	cli(t, nil, string(asSubmitted), "verify", "-").want(t, exitOK, "verify of the TD as submitted")
}
