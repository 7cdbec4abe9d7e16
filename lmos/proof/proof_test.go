package proof

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// vectorDir finds the W3C vc-di-eddsa test vector (JCS case): testdata/
// of the repository, or the shared folder beside it.
func vectorDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test")
		}
		dir = parent
	}
	for _, p := range []string{filepath.Join(dir, "testdata"), filepath.Join(dir, "..", "shared", "testdata")} {
		p = filepath.Join(p, "vc-di-eddsa")
		if _, err := os.Stat(filepath.Join(p, "signedJCS.json")); err == nil {
			return p
		}
	}
	t.Fatal("the W3C test vector is not in testdata/vc-di-eddsa")
	return ""
}

func readVector(t testing.TB) (doc []byte, pub ed25519.PublicKey, priv ed25519.PrivateKey) {
	t.Helper()
	dir := vectorDir(t)
	doc, err := os.ReadFile(filepath.Join(dir, "signedJCS.json"))
	if err != nil {
		t.Fatal(err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, "keyPair.json"))
	if err != nil {
		t.Fatal(err)
	}
	var kp struct{ PublicKeyMultibase, PrivateKeyMultibase string }
	if err := json.Unmarshal(kb, &kp); err != nil {
		t.Fatal(err)
	}
	if pub, err = ParsePublicKeyMultibase(kp.PublicKeyMultibase); err != nil {
		t.Fatal(err)
	}
	if priv, err = ParseSecretKeyMultibase(kp.PrivateKeyMultibase); err != nil {
		t.Fatal(err)
	}
	return doc, pub, priv
}

func TestW3CVectorVerifies(t *testing.T) {
	doc, pub, priv := readVector(t)
	if !pub.Equal(priv.Public()) {
		t.Fatal("the vector's secret key does not belong to its public key")
	}
	r, err := VerifyWithKey(doc, pub)
	if err != nil {
		t.Fatalf("the W3C vector does not verify: %v", err)
	}
	if want := time.Date(2023, 2, 24, 23, 36, 38, 0, time.UTC); !r.Created.Equal(want) {
		t.Errorf("created %v, want %v", r.Created, want)
	}
}

func TestW3CVectorTamperedFails(t *testing.T) {
	doc, pub, _ := readVector(t)
	for name, edit := range map[string]func([]byte) []byte{
		"document": func(b []byte) []byte {
			return bytes.Replace(b, []byte("The School of Examples"), []byte("The School of Exampels"), 1)
		},
		"created": func(b []byte) []byte {
			return bytes.Replace(b, []byte("2023-02-24T23:36:38Z"), []byte("2023-02-24T23:36:39Z"), 1)
		},
		"context": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"https://www.w3.org/ns/credentials/examples/v2"
  ],`), []byte(`"https://www.w3.org/ns/credentials/examples/v2", "https://x.example"
  ],`), 1)
		},
		"proofValue": func(b []byte) []byte { return bytes.Replace(b, []byte(`"z63t83`), []byte(`"z63t84`), 1) },
	} {
		bad := edit(append([]byte{}, doc...))
		if bytes.Equal(bad, doc) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		if _, err := VerifyWithKey(bad, pub); !errors.Is(err, ErrInvalidSignature) && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: tampered vector: %v, want an invalid signature", name, err)
		}
	}
}

// The vector's key, used through did:key: the W3C document signed again
// verifies by its DID alone, and the DID is the Multikey's.
func TestSignThenVerifyByDID(t *testing.T) {
	_, pub, priv := readVector(t)
	td := []byte(`{"@context":["https://www.w3.org/2022/wot/td/v1.1",{"lmos":"https://eclipse.dev/lmos/protocol/v1#"}],
 "id":"urn:lmos:thermostat","title":"Thermostat","n":1e2,"s":"\u00e9","nested":{"a":{"b":[1,2,{}]}}}`)
	created := time.Date(2026, 11, 24, 10, 0, 0, 500, time.UTC)
	signed, err := Sign(td, priv, created)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(signed, td[:len(td)-1]) {
		t.Errorf("signing reordered the document:\n%s", signed)
	}
	r, err := Verify(signed)
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, signed)
	}
	if r.DID != "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2" || r.DID != DID(pub) {
		t.Errorf("DID %s", r.DID)
	}
	if !r.Created.Equal(created.Truncate(time.Second)) {
		t.Errorf("created %v", r.Created)
	}
	// Re-signing replaces the proof.
	again, err := Sign(signed, priv, created.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(again), `"proof"`); n != 1 {
		t.Fatalf("%d proofs after re-signing", n)
	}
	if r, err := Verify(again); err != nil || !r.Created.Equal(created.Add(time.Hour).Truncate(time.Second)) {
		t.Fatalf("re-signed: %v %v", r.Created, err)
	}
	// Member order and whitespace do not matter (JCS).
	var m map[string]any
	_ = json.Unmarshal(signed, &m)
	reordered, _ := json.MarshalIndent(m, "", "  ")
	if _, err := Verify(reordered); err != nil {
		t.Errorf("re-encoded document: %v", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	_, _, priv := readVector(t)
	_, other, _ := ed25519.GenerateKey(nil)
	signed, err := Sign([]byte(`{"id":"urn:x","title":"X"}`), priv, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	var doc map[string]json.RawMessage
	_ = json.Unmarshal(signed, &doc)
	_ = json.Unmarshal(doc["proof"], &p)
	withProof := func(edit func(p map[string]any)) []byte {
		q := map[string]any{}
		for k, v := range p {
			q[k] = v
		}
		edit(q)
		b, _ := json.Marshal(q)
		d := map[string]json.RawMessage{}
		for k, v := range doc {
			d[k] = v
		}
		d["proof"] = b
		out, _ := json.Marshal(d)
		return out
	}
	for _, c := range []struct {
		name string
		doc  []byte
		want error
	}{
		{"no proof", []byte(`{"id":"urn:x"}`), ErrNoProof},
		{"not an object", []byte(`[1]`), ErrMalformed},
		{"proof set", []byte(`{"id":"urn:x","proof":[{}]}`), ErrUnsupported},
		{"proof string", []byte(`{"id":"urn:x","proof":"z"}`), ErrMalformed},
		{"wrong key", withProof(func(p map[string]any) {
			p["verificationMethod"] = VerificationMethod(ed25519.PublicKey(other.Public().(ed25519.PublicKey)))
		}), ErrInvalidSignature},
		{"tampered", bytes.Replace(signed, []byte(`"title":"X"`), []byte(`"title":"Y"`), 1), ErrInvalidSignature},
		{"unknown cryptosuite", withProof(func(p map[string]any) { p["cryptosuite"] = "ecdsa-jcs-2019" }), ErrUnsupported},
		{"unknown type", withProof(func(p map[string]any) { p["type"] = "Ed25519Signature2020" }), ErrUnsupported},
		{"purpose", withProof(func(p map[string]any) { p["proofPurpose"] = "authentication" }), ErrUnsupported},
		{"not did:key", withProof(func(p map[string]any) { p["verificationMethod"] = "did:web:example.com#k" }), ErrUnsupported},
		{"not a DID", withProof(func(p map[string]any) { p["verificationMethod"] = "https://x.example/k" }), ErrMalformed},
		{"bad multibase", withProof(func(p map[string]any) { p["verificationMethod"] = "did:key:z6Mk0OIl" }), ErrMalformed},
		{"not base58btc", withProof(func(p map[string]any) { p["verificationMethod"] = "did:key:u6Mk" }), ErrMalformed},
		{"fragment differs", withProof(func(p map[string]any) {
			p["verificationMethod"] = DID(priv.Public().(ed25519.PublicKey)) + "#" + PublicKeyMultibase(other.Public().(ed25519.PublicKey))
		}), ErrMalformed},
		{"long key", withProof(func(p map[string]any) { p["verificationMethod"] = "did:key:z" + strings.Repeat("6", 5000) }), ErrMalformed},
		{"bad created", withProof(func(p map[string]any) { p["created"] = "yesterday" }), ErrMalformed},
		{"bad proofValue", withProof(func(p map[string]any) { p["proofValue"] = "zzz0" }), ErrMalformed},
		{"long proofValue", withProof(func(p map[string]any) { p["proofValue"] = "z" + strings.Repeat("2", 50000) }), ErrMalformed},
		{"no proofValue", withProof(func(p map[string]any) { delete(p, "proofValue") }), ErrMalformed},
		{"huge proof", withProof(func(p map[string]any) { p["x"] = strings.Repeat("a", MaxProofBytes) }), ErrMalformed},
		{"extra member signed over", withProof(func(p map[string]any) { p["expires"] = "2030-01-01T00:00:00Z" }), ErrInvalidSignature},
	} {
		_, err := Verify(c.doc)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestKeysRoundTrip(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	got, err := ParseSecretKeyMultibase(SecretKeyMultibase(priv))
	if err != nil || !got.Equal(priv) {
		t.Fatalf("secret key round trip: %v", err)
	}
	did, p, err := ParseDID(VerificationMethod(pub))
	if err != nil || !p.Equal(pub) || did != DID(pub) || !strings.HasPrefix(did, "did:key:z6Mk") {
		t.Fatalf("DID round trip: %s %v", did, err)
	}
	if _, err := ParsePublicKeyMultibase(SecretKeyMultibase(priv)); !errors.Is(err, ErrMalformed) {
		t.Errorf("a secret key read as public: %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	_ = pub
	signed, _ := Sign([]byte(`{"id":"urn:x","title":"X","@context":"https://www.w3.org/2022/wot/td/v1.1"}`), priv, time.Unix(1e9, 0))
	f.Add(signed)
	f.Add([]byte(`{"proof":{"type":"DataIntegrityProof","cryptosuite":"eddsa-jcs-2022","proofPurpose":"assertionMethod","verificationMethod":"did:key:z6Mk","proofValue":"z1"}}`))
	f.Add([]byte(`{"proof":[]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		r, err := Verify(doc)
		if err == nil && r.DID == "" {
			t.Fatal("verified without a signer")
		}
	})
}

func FuzzParseDID(f *testing.F) {
	pub, _, _ := ed25519.GenerateKey(nil)
	f.Add(VerificationMethod(pub))
	f.Add(DID(pub))
	f.Add("did:key:z")
	f.Add("did:web:x")
	f.Fuzz(func(t *testing.T, s string) {
		did, k, err := ParseDID(s)
		if err != nil {
			return
		}
		if DID(k) != did {
			t.Fatalf("%q parsed as %s, which encodes as %s", s, did, DID(k))
		}
	})
}
