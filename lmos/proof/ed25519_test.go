package proof

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"

	"filippo.io/edwards25519"
	"github.com/mr-tron/base58"
)

// order8 is the canonical encoding of a point of order 8 (a public key
// with no secret behind it; RFC 8032 and ZIP-215 both accept such keys).
const order8 = "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"

// sigCase is one signature and what the ZIP-215 rule says of it.
type sigCase struct {
	name   string
	pub    ed25519.PublicKey
	msg    []byte
	sig    []byte
	valid  bool // under ZIP-215
	stdlib bool // under crypto/ed25519 (RFC 8032, cofactorless)
}

func sigCases(t *testing.T) []sigCase {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("a message")
	good := ed25519.Sign(priv, msg)

	torsion, err := hex.DecodeString(order8)
	if err != nil {
		t.Fatal(err)
	}
	p, err := new(edwards25519.Point).SetBytes(torsion)
	if err != nil {
		t.Fatal(err)
	}
	if new(edwards25519.Point).MultByCofactor(p).Equal(edwards25519.NewIdentityPoint()) != 1 ||
		p.Equal(edwards25519.NewIdentityPoint()) == 1 {
		t.Fatal("order8 is not a point of small order")
	}
	// R = the identity, s = 0: [8]([0]B − R − [k]A) = 0 for any message
	// when A is of small order. The cofactorless equation holds only when
	// [k]A is the identity, so pick a message where it is not.
	identity := make([]byte, 32)
	identity[0] = 1
	var weakMsg []byte
	for i := 0; i < 64 && weakMsg == nil; i++ {
		m := fmt.Appendf(nil, "message %d", i)
		if !ed25519.Verify(torsion, m, append(append([]byte{}, identity...), make([]byte, 32)...)) {
			weakMsg = m
		}
	}
	if weakMsg == nil {
		t.Fatal("no message the standard library refuses for the small-order key")
	}
	weak := append(append([]byte{}, identity...), make([]byte, 32)...)
	// The identity encoded with y = p + 1, a non-canonical encoding.
	nonCanonR, _ := hex.DecodeString("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")
	weakNonCanon := append(append([]byte{}, nonCanonR...), make([]byte, 32)...)

	// s + ℓ: the same signature with a non-canonical s (malleated).
	l, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
	s := new(big.Int).SetBytes(reverse(good[32:]))
	sl := reverse(new(big.Int).Add(s, l).FillBytes(make([]byte, 32)))
	malleated := append(append([]byte{}, good[:32]...), sl...)

	tampered := append([]byte{}, good...)
	tampered[10] ^= 1

	return []sigCase{
		{"valid", pub, msg, good, true, true},
		{"other message", pub, []byte("another message"), good, false, false},
		{"tampered R", pub, msg, tampered, false, false},
		{"s not canonical (s+ℓ)", pub, msg, malleated, false, false},
		{"small-order key, identity R, s=0", torsion, weakMsg, weak, true, false},
		{"small-order key, non-canonical R", torsion, weakMsg, weakNonCanon, true, false},
		{"short signature", pub, msg, good[:63], false, false},
		{"short key", pub[:31], msg, good, false, false},
	}
}

func reverse(b []byte) []byte {
	r := make([]byte, len(b))
	for i := range b {
		r[len(b)-1-i] = b[i]
	}
	return r
}

// One rule everywhere: CheckSignature and CheckBatch give the answer
// ZIP-215 gives for every case, a batch of one and a batch among valid
// signatures alike, including the cases where RFC 8032's cofactorless
// check (crypto/ed25519) says otherwise.
func TestZIP215OneByOneAndBatchAgree(t *testing.T) {
	cases := sigCases(t)
	var valid []Signature
	for i := 0; i < 7; i++ {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		m := fmt.Appendf(nil, "other %d", i)
		valid = append(valid, Signature{Pub: pub, Msg: m, Sig: ed25519.Sign(priv, m)})
	}
	if !CheckBatch(valid) {
		t.Fatal("a batch of valid signatures fails")
	}
	for _, c := range cases {
		if len(c.pub) == ed25519.PublicKeySize { // crypto/ed25519 panics on a short key
			if got := ed25519.Verify(c.pub, c.msg, c.sig); got != c.stdlib {
				t.Errorf("%s: crypto/ed25519 says %v; the case is built wrong", c.name, got)
			}
		}
		if got := CheckSignature(c.pub, c.msg, c.sig); got != c.valid {
			t.Errorf("%s: CheckSignature = %v, want %v", c.name, got, c.valid)
		}
		one := Signature{Pub: c.pub, Msg: c.msg, Sig: c.sig}
		if got := CheckBatch([]Signature{one}); got != c.valid {
			t.Errorf("%s: a batch of it alone = %v, want %v", c.name, got, c.valid)
		}
		mixed := append(append(append([]Signature{}, valid[:3]...), one), valid[3:]...)
		if got := CheckBatch(mixed); got != c.valid {
			t.Errorf("%s: in a batch of valid ones = %v, want %v", c.name, got, c.valid)
		}
	}
	if CheckBatch(nil) {
		t.Error("an empty batch passes")
	}
}

// VerifyWith hands the checker the key, the 64-byte message and the
// signature that Verify checks, and refuses as Verify does when the
// checker says no.
func TestVerifyWithChecker(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	signed, err := Sign([]byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":"urn:x","title":"X"}`), priv, time.Unix(1e9, 0))
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	var batch []Signature
	r, err := VerifyWith(signed, func(k ed25519.PublicKey, msg, sig []byte) bool {
		calls++
		if !bytes.Equal(k, pub) || len(msg) != 64 || len(sig) != ed25519.SignatureSize {
			t.Errorf("checker got key %x, a %d-byte message, a %d-byte signature", k, len(msg), len(sig))
		}
		batch = append(batch, Signature{Pub: k, Msg: bytes.Clone(msg), Sig: bytes.Clone(sig)})
		return CheckBatch(batch)
	})
	if err != nil || calls != 1 || r.DID != DID(pub) {
		t.Fatalf("VerifyWith: %v after %d checks, DID %q", err, calls, r.DID)
	}
	if _, err := VerifyWith(signed, func(ed25519.PublicKey, []byte, []byte) bool { return false }); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("a checker saying no: %v, want ErrInvalidSignature", err)
	}
	calls = 0
	if _, err := VerifyWith([]byte(`{"proof":{}}`), func(ed25519.PublicKey, []byte, []byte) bool { calls++; return true }); err == nil || calls != 0 {
		t.Errorf("a malformed proof: %v after %d checks, want a refusal before any", err, calls)
	}
}

// BenchmarkCheckBatch is the cost per signature of CheckBatch by batch
// size, beside crypto/ed25519 and CheckSignature one by one.
func BenchmarkCheckBatch(b *testing.B) {
	sigs := make([]Signature, 64)
	for i := range sigs {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		m := make([]byte, 64)
		rand.Read(m)
		sigs[i] = Signature{Pub: pub, Msg: m, Sig: ed25519.Sign(priv, m)}
	}
	b.Run("stdlib", func(b *testing.B) {
		for b.Loop() {
			if !ed25519.Verify(sigs[0].Pub, sigs[0].Msg, sigs[0].Sig) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("single", func(b *testing.B) {
		for b.Loop() {
			if !CheckSignature(sigs[0].Pub, sigs[0].Msg, sigs[0].Sig) {
				b.Fatal("refused")
			}
		}
	})
	for _, n := range []int{2, 4, 8, 16, 32, 64} {
		b.Run(fmt.Sprintf("batch%d", n), func(b *testing.B) {
			for b.Loop() {
				if !CheckBatch(sigs[:n]) {
					b.Fatal("refused")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1e3, "µs/sig")
		})
	}
}

// FuzzBatchAgrees: for any key, message and signature, a batch holding it
// among valid signatures says what CheckSignature says of it alone.
func FuzzBatchAgrees(f *testing.F) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	f.Add([]byte(pub), []byte("m"), ed25519.Sign(priv, []byte("m")))
	f.Add([]byte(pub), []byte("n"), ed25519.Sign(priv, []byte("m")))
	torsion, _ := hex.DecodeString(order8)
	identity := make([]byte, 64)
	identity[0] = 1
	f.Add(torsion, []byte("message 1"), identity)
	other := make([]Signature, 2)
	for i := range other {
		p, k, _ := ed25519.GenerateKey(rand.Reader)
		m := fmt.Appendf(nil, "other %d", i)
		other[i] = Signature{Pub: p, Msg: m, Sig: ed25519.Sign(k, m)}
	}
	f.Fuzz(func(t *testing.T, pub, msg, sig []byte) {
		alone := CheckSignature(pub, msg, sig)
		if got := CheckBatch([]Signature{other[0], {Pub: pub, Msg: msg, Sig: sig}, other[1]}); got != alone {
			t.Fatalf("alone %v, in a batch %v", alone, got)
		}
	})
}

// A key of small order has no secret, and under ZIP-215 the signature
// R = identity, s = 0 verifies for it whatever the message: such keys are
// refused wherever one is read (did:key, Multikey) or a proof is checked,
// so nobody can bind an id to a key everybody can sign for.
func TestSmallOrderKeysRefused(t *testing.T) {
	canonical := 0
	for k := range smallOrderKeys {
		p, err := new(edwards25519.Point).SetBytes(k[:])
		if err != nil {
			continue // an encoding no decoder here accepts; listed to be safe
		}
		if new(edwards25519.Point).MultByCofactor(p).Equal(edwards25519.NewIdentityPoint()) != 1 {
			t.Errorf("%x is listed but not of small order", k)
		}
		if bytes.Equal(p.Bytes(), k[:]) {
			canonical++
		}
	}
	if canonical != 8 || len(smallOrderKeys) != 14 {
		t.Errorf("%d canonical small-order encodings of %d listed, want 8 of 14", canonical, len(smallOrderKeys))
	}

	torsion, _ := hex.DecodeString(order8)
	weak := make([]byte, 64)
	weak[0] = 1 // R = identity, s = 0
	if !CheckSignature(torsion, []byte("anything"), weak) {
		t.Fatal("the forged signature does not even pass the signature rule; the case is built wrong")
	}
	for k := range smallOrderKeys {
		if _, _, err := ParseDID(DID(k[:])); !errors.Is(err, ErrMalformed) {
			t.Errorf("did:key of %x: %v, want ErrMalformed", k, err)
		}
	}
	doc := fmt.Appendf(nil, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":"urn:weak","title":"Anyone's",`+
		`"proof":{"type":"DataIntegrityProof","cryptosuite":"eddsa-jcs-2022","created":"2026-01-01T00:00:00Z",`+
		`"verificationMethod":%q,"proofPurpose":"assertionMethod","proofValue":%q}}`,
		VerificationMethod(torsion), "z"+base58.Encode(weak))
	if _, err := Verify(doc); !errors.Is(err, ErrMalformed) {
		t.Errorf("a proof by a small-order did:key: %v, want ErrMalformed", err)
	}
	if _, err := VerifyWithKey(doc, torsion); !errors.Is(err, ErrMalformed) {
		t.Errorf("a proof checked against a small-order key: %v, want ErrMalformed", err)
	}
}
