package proof

import (
	"crypto/ed25519"

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
