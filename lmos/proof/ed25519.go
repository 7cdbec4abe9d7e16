package proof

import (
	"crypto/ed25519"
	"encoding/hex"

	"filippo.io/edwards25519"
	"github.com/hdevalence/ed25519consensus"
)

// Every Ed25519 signature this package (and so the hub, the agent and the
// CLI) checks is judged by one rule, ZIP-215: s must be canonical (s < ℓ),
// the key and R may be any encoding of a curve point (non-canonical ones
// and points with a small-order component included), and the equation is
// the cofactored one, [8]([s]B − R − [k]A) = 0. Every signature RFC 8032
// accepts passes; what passes besides can only be made by the key's holder
// (or is a key with no secret behind it), so it gives no one else a way
// in. The point of the rule: a batch of signatures (CheckBatch) is valid
// under it exactly when each one is, so a hub that batches under load gives
// the same answer as one that checks one by one. Under RFC 8032's
// cofactorless equation the two can differ for a crafted signature.

// CheckSignature reports whether sig is a valid Ed25519 signature of msg by
// pub under the ZIP-215 rules.
func CheckSignature(pub ed25519.PublicKey, msg, sig []byte) bool {
	return ed25519consensus.Verify(pub, msg, sig)
}

// Signature is one Ed25519 check of a batch.
type Signature struct {
	Pub      ed25519.PublicKey
	Msg, Sig []byte
}

// CheckBatch reports whether every signature of sigs is valid, as
// CheckSignature of each would (the same rule; a random linear combination,
// so a false answer does not say which failed: check each then). It is
// cheaper per signature than CheckSignature from two on (~17 µs instead of
// ~35 at 16 on the 2-vCPU reference machine). An empty batch is false.
func CheckBatch(sigs []Signature) bool {
	v := ed25519consensus.NewPreallocatedBatchVerifier(len(sigs))
	for _, s := range sigs {
		v.Add(s.Pub, s.Msg, s.Sig)
	}
	return v.Verify()
}

// A public key that is a point of small order (one of the eight torsion
// points, in any encoding) has no secret key: under ZIP-215 the signature
// R = identity, s = 0 verifies for every message (under RFC 8032 one in
// eight, so it was forgeable before too). Such a did:key would bind an id
// that anyone may then write, so this package refuses these keys wherever
// it reads or checks one.

// order8Point encodes a point of order 8; its multiples are the torsion
// points.
const order8Point = "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"

// smallOrderKeys holds every 32-byte encoding of a torsion point that a
// decoder may accept: the canonical ones, each with the sign bit flipped
// (for x = 0 a non-canonical "negative zero"), and y + p for the points
// whose y is below 19 (y = 0 and y = 1).
var smallOrderKeys = func() map[[32]byte]bool {
	b, err := hex.DecodeString(order8Point)
	if err != nil {
		panic(err)
	}
	gen, err := new(edwards25519.Point).SetBytes(b)
	if err != nil {
		panic(err)
	}
	keys := make(map[[32]byte]bool, 16)
	add := func(e [32]byte) {
		keys[e] = true
		e[31] ^= 0x80
		keys[e] = true
	}
	p := edwards25519.NewIdentityPoint()
	for range 8 {
		var e [32]byte
		copy(e[:], p.Bytes())
		add(e)
		if y := e; y[31]&0x7f == 0 && isSmall(y[:31]) && y[0] < 19 {
			// y + p, p = 2^255 − 19: little-endian 0xed+y, 0xff…, 0x7f.
			var np [32]byte
			np[0] = 0xed + y[0]
			for i := 1; i < 31; i++ {
				np[i] = 0xff
			}
			np[31] = 0x7f
			add(np)
		}
		p.Add(p, gen)
	}
	return keys
}()

// isSmall reports whether b is zero past its first byte.
func isSmall(b []byte) bool {
	for _, c := range b[1:] {
		if c != 0 {
			return false
		}
	}
	return true
}

// smallOrder reports whether pub is a torsion point (see smallOrderKeys).
func smallOrder(pub []byte) bool {
	return len(pub) == ed25519.PublicKeySize && smallOrderKeys[[32]byte(pub)]
}
