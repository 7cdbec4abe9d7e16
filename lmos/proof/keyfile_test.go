package proof

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKeyFileIsWrittenOwnerOnlyAndReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "key.json")
	priv, created, err := LoadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateKey: created %v, err %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Fatalf("key directory mode %v, want 0700", di.Mode().Perm())
	}
	again, created, err := LoadOrCreateKey(path)
	if err != nil || created || !again.Equal(priv) {
		t.Fatalf("second LoadOrCreateKey: created %v, same key %v, err %v", created, again.Equal(priv), err)
	}
	k, err := ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if k.DID != DID(priv.Public().(ed25519.PublicKey)) {
		t.Fatalf("DID %s", k.DID)
	}
	if err := WriteKeyFile(path, priv); !errors.Is(err, os.ErrExist) {
		t.Fatalf("WriteKeyFile over an existing file: %v, want os.ErrExist", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("the key's directory holds %d entries, want only the key (no temporary file left)", len(entries))
	}
}

// The W3C vector's keyPair.json spells the secret privateKeyMultibase.
func TestKeyFileReadsTheVectorKeyPair(t *testing.T) {
	k, err := ReadKeyFile(filepath.Join(vectorDir(t), "keyPair.json"))
	if err != nil {
		t.Fatal(err)
	}
	if k.Private == nil || PublicKeyMultibase(k.Public) != "z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2" {
		t.Fatalf("key %+v", k)
	}
}

func TestKeyFileRefusesMembersThatDisagree(t *testing.T) {
	_, a, _ := ed25519.GenerateKey(rand.Reader)
	_, b, _ := ed25519.GenerateKey(rand.Reader)
	pa, pb := a.Public().(ed25519.PublicKey), b.Public().(ed25519.PublicKey)
	for name, doc := range map[string]string{
		"public of another key": `{"publicKeyMultibase":"` + PublicKeyMultibase(pb) + `","secretKeyMultibase":"` + SecretKeyMultibase(a) + `"}`,
		"id of another key":     `{"id":"` + DID(pb) + `","publicKeyMultibase":"` + PublicKeyMultibase(pa) + `"}`,
		"two secrets":           `{"secretKeyMultibase":"` + SecretKeyMultibase(a) + `","privateKeyMultibase":"` + SecretKeyMultibase(b) + `"}`,
		"no key":                `{"id":"` + DID(pa) + `"}`,
		"not JSON":              `z6Mk`,
		"trailing data":         `{"publicKeyMultibase":"z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2"} {}`,
		"public as secret":      `{"secretKeyMultibase":"` + PublicKeyMultibase(pa) + `"}`,
		"too long":              `{"id":"` + strings.Repeat("x", maxKeyFileBytes) + `"}`,
	} {
		if _, err := ParseKeyFile([]byte(doc)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestSignMilliKeepsMillisecondsAndVerifies(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	at := time.Date(2026, 1, 2, 3, 4, 5, 678_900_000, time.FixedZone("x", 3600))
	doc, err := SignMilli([]byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":"urn:x","title":"x"}`), priv, at)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Verify(doc)
	if err != nil {
		t.Fatal(err)
	}
	if r.Proof.Created != "2026-01-02T02:04:05.678Z" || !r.Created.Equal(at.Truncate(time.Millisecond)) {
		t.Fatalf("created %q (%v)", r.Proof.Created, r.Created)
	}
}

// FuzzParseKeyFile: any input is refused with ErrMalformed or read into a
// key whose members agree.
func FuzzParseKeyFile(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	f.Add(MarshalKeyFile(priv))
	f.Add([]byte(`{"publicKeyMultibase":"z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2","privateKeyMultibase":"z3u2en7t5LR2WtQH5PfFqMqwVHBeXouLzo6haApm8XHqvjxq"}`))
	f.Add([]byte(`{"id":"did:key:z6Mk","publicKeyMultibase":"z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKeyFile(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(k.Public) != ed25519.PublicKeySize || k.DID != DID(k.Public) {
			t.Fatalf("key %+v", k)
		}
		if k.Private != nil && !k.Private.Public().(ed25519.PublicKey).Equal(k.Public) {
			t.Fatal("the secret and public keys disagree")
		}
	})
}
