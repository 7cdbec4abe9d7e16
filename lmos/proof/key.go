package proof

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"strings"

	"github.com/mr-tron/base58"
)

// Multicodec prefixes (varint-encoded) of Multikey values (W3C Controlled
// Identifiers, "Multikey").
var (
	ed25519PubPrefix  = []byte{0xed, 0x01}
	ed25519PrivPrefix = []byte{0x80, 0x26}
)

// DIDPrefix starts every did:key identifier.
const DIDPrefix = "did:key:"

// maxMultibase bounds an encoded key before it is decoded: a 34-byte
// Multikey is 48 base58 characters.
const maxMultibase = 64

// PublicKeyMultibase returns pub as a Multikey: 'z' (base58-btc) of the
// ed25519-pub multicodec prefix and the 32-byte key ("z6Mk…").
func PublicKeyMultibase(pub ed25519.PublicKey) string {
	return "z" + base58.Encode(append(append([]byte{}, ed25519PubPrefix...), pub...))
}

// SecretKeyMultibase returns the seed of priv as a Multikey ("z3u2…"), the
// form a private key is kept in at rest.
func SecretKeyMultibase(priv ed25519.PrivateKey) string {
	return "z" + base58.Encode(append(append([]byte{}, ed25519PrivPrefix...), priv.Seed()...))
}

// ParsePublicKeyMultibase reads an Ed25519 public Multikey.
func ParsePublicKeyMultibase(s string) (ed25519.PublicKey, error) {
	b, err := decodeMultikey(s, ed25519PubPrefix, "public")
	if err != nil {
		return nil, err
	}
	if smallOrder(b) {
		return nil, malformed("the public key is a point of small order, for which no secret key exists")
	}
	return ed25519.PublicKey(b), nil
}

// ParseSecretKeyMultibase reads an Ed25519 secret Multikey (the seed).
func ParseSecretKeyMultibase(s string) (ed25519.PrivateKey, error) {
	b, err := decodeMultikey(s, ed25519PrivPrefix, "secret")
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(b), nil
}

func decodeMultikey(s string, prefix []byte, kind string) ([]byte, error) {
	if len(s) > maxMultibase {
		return nil, malformed("the %s key multibase is %d characters long, more than %d", kind, len(s), maxMultibase)
	}
	if !strings.HasPrefix(s, "z") {
		return nil, malformed("the %s key %q is not multibase base58-btc (it must start with z)", kind, s)
	}
	b, err := base58.Decode(s[1:])
	if err != nil {
		return nil, malformed("the %s key %q is not base58-btc: %v", kind, s, err)
	}
	if !bytes.HasPrefix(b, prefix) || len(b) != len(prefix)+32 {
		return nil, malformed("the %s key %q is not an Ed25519 Multikey (multicodec 0x%x and 32 bytes)", kind, s, prefix)
	}
	return b[len(prefix):], nil
}

// DID returns the did:key identifier of pub.
func DID(pub ed25519.PublicKey) string { return DIDPrefix + PublicKeyMultibase(pub) }

// VerificationMethod returns the verification method of pub's did:key: the
// DID with the Multikey repeated as its fragment.
func VerificationMethod(pub ed25519.PublicKey) string {
	mb := PublicKeyMultibase(pub)
	return DIDPrefix + mb + "#" + mb
}

// ParseDID reads a did:key identifier, or a did:key verification method
// whose fragment repeats the key, and returns the DID without fragment and
// its Ed25519 public key.
func ParseDID(s string) (string, ed25519.PublicKey, error) {
	if len(s) > 2*maxMultibase+len(DIDPrefix)+1 {
		return "", nil, malformed("the DID is %d characters long", len(s))
	}
	if !strings.HasPrefix(s, DIDPrefix) {
		if strings.HasPrefix(s, "did:") {
			return "", nil, fmt.Errorf("%w: %q is not a did:key; only did:key can be resolved offline", ErrUnsupported, s)
		}
		return "", nil, malformed("%q is not a DID", s)
	}
	did, frag, hasFrag := strings.Cut(s, "#")
	mb := did[len(DIDPrefix):]
	if hasFrag && frag != mb {
		return "", nil, malformed("the fragment of %q does not repeat its key", s)
	}
	pub, err := ParsePublicKeyMultibase(mb)
	if err != nil {
		return "", nil, err
	}
	return did, pub, nil
}
