package proof

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/mr-tron/base58"
)

// Values of a proof this package makes and verifies.
const (
	Type        = "DataIntegrityProof"
	Cryptosuite = "eddsa-jcs-2022"
	Purpose     = "assertionMethod"
)

// MaxProofBytes bounds the encoded proof member; a real one is ~400 bytes
// plus the document's @context, which the proof repeats.
const MaxProofBytes = 8 << 10

// maxProofValue bounds proofValue before it is decoded: a 64-byte
// signature is at most 88 base58 characters.
const maxProofValue = 100

// Proof is a Data Integrity proof. Context is the proof's @context, which
// eddsa-jcs-2022 carries over from the document.
type Proof struct {
	Context            json.RawMessage `json:"@context,omitempty"`
	Type               string          `json:"type"`
	Cryptosuite        string          `json:"cryptosuite"`
	Created            string          `json:"created,omitempty"`
	VerificationMethod string          `json:"verificationMethod"`
	ProofPurpose       string          `json:"proofPurpose"`
	ProofValue         string          `json:"proofValue,omitempty"`

	// members are all the proof's members as read, so a verification
	// covers the ones this type does not name (expires, domain, …).
	members map[string]json.RawMessage
}

// Result is what a verified proof proves.
type Result struct {
	// DID is the signer's did:key (empty for VerifyWithKey with a
	// verification method that is not a did:key).
	DID string
	// Created is the proof's created time; zero when the proof has none.
	Created time.Time
	// Proof is the verified proof.
	Proof Proof
}

// Sign returns doc, a JSON object, with an eddsa-jcs-2022 proof by priv
// made at created (truncated to seconds, UTC). A proof doc already has is
// replaced; the other members keep their order.
func Sign(doc []byte, priv ed25519.PrivateKey, created time.Time) ([]byte, error) {
	return sign(doc, priv, created.UTC().Truncate(time.Second).Format(time.RFC3339))
}

// SignMilli is Sign with created kept to the millisecond
// ("2026-01-02T03:04:05.678Z"). A signer that must give every proof a later
// created than the last (the agent, on each join) needs more than one per
// second without running ahead of the clock.
func SignMilli(doc []byte, priv ed25519.PrivateKey, created time.Time) ([]byte, error) {
	return sign(doc, priv, created.UTC().Truncate(time.Millisecond).Format(CreatedMilli))
}

// CreatedMilli is the layout of a created time SignMilli writes.
const CreatedMilli = "2006-01-02T15:04:05.000Z07:00"

func sign(doc []byte, priv ed25519.PrivateKey, created string) ([]byte, error) {
	unsecured, ctx, err := splitProof(doc)
	if err != nil {
		return nil, err
	}
	pub := priv.Public().(ed25519.PublicKey)
	p := Proof{
		Context:            ctx,
		Type:               Type,
		Cryptosuite:        Cryptosuite,
		Created:            created,
		VerificationMethod: VerificationMethod(pub),
		ProofPurpose:       Purpose,
	}
	data, err := hashData(unsecured, p)
	if err != nil {
		return nil, err
	}
	p.ProofValue = "z" + base58.Encode(ed25519.Sign(priv, data))
	enc, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the proof: %w", err)
	}
	return withMember(unsecured, "proof", enc), nil
}

// Verify checks doc's eddsa-jcs-2022 proof against the did:key named by
// its verificationMethod.
func Verify(doc []byte) (Result, error) {
	p, d, err := readProof(doc)
	if err != nil {
		return Result{}, err
	}
	did, pub, err := ParseDID(p.VerificationMethod)
	if err != nil {
		return Result{}, fmt.Errorf("verificationMethod: %w", err)
	}
	r, err := verify(p, d, pub)
	r.DID = did
	return r, err
}

// VerifyWithKey checks doc's eddsa-jcs-2022 proof against pub, whatever
// its verificationMethod names (for documents whose signer is known by
// other means, such as the W3C test vectors).
func VerifyWithKey(doc []byte, pub ed25519.PublicKey) (Result, error) {
	p, d, err := readProof(doc)
	if err != nil {
		return Result{}, err
	}
	if did, _, err := ParseDID(p.VerificationMethod); err == nil {
		return verifyAs(p, d, pub, did)
	}
	return verify(p, d, pub)
}

func verifyAs(p Proof, d document, pub ed25519.PublicKey, did string) (Result, error) {
	r, err := verify(p, d, pub)
	r.DID = did
	return r, err
}

// verify checks a proof already read from its document.
func verify(p Proof, d document, pub ed25519.PublicKey) (Result, error) {
	r := Result{Proof: p}
	if p.Created != "" {
		t, err := time.Parse(time.RFC3339, p.Created)
		if err != nil {
			return r, malformed("created %q is not an RFC 3339 date-time", p.Created)
		}
		r.Created = t
	}
	if len(p.ProofValue) > maxProofValue || len(p.ProofValue) < 2 || p.ProofValue[0] != 'z' {
		return r, malformed("proofValue is not a multibase base58-btc signature")
	}
	sig, err := base58.Decode(p.ProofValue[1:])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return r, malformed("proofValue is not a base58-btc Ed25519 signature")
	}
	if len(pub) != ed25519.PublicKeySize {
		return r, malformed("the public key is %d bytes, not %d", len(pub), ed25519.PublicKeySize)
	}
	if p.Context != nil {
		if err := checkContext(d.context, p.Context); err != nil {
			return r, err
		}
	}
	data, err := hashData(d.unsecured, p)
	if err != nil {
		return r, err
	}
	if !ed25519.Verify(pub, data, sig) {
		return r, fmt.Errorf("%w: the proof does not match the document and the key %s", ErrInvalidSignature, PublicKeyMultibase(pub))
	}
	return r, nil
}

// readProof splits doc into its proof, checked for the values this suite
// signs with, and the document without it.
func readProof(doc []byte) (Proof, document, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(doc, &members); err != nil {
		return Proof{}, document{}, malformed("the document is not a JSON object: %v", err)
	}
	raw, ok := members["proof"]
	if !ok {
		return Proof{}, document{}, ErrNoProof
	}
	if len(raw) > MaxProofBytes {
		return Proof{}, document{}, malformed("the proof is %d bytes, more than %d", len(raw), MaxProofBytes)
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		if len(t) > 0 && t[0] == '[' {
			return Proof{}, document{}, fmt.Errorf("%w: a proof set (an array of proofs) is not supported; sign with one proof", ErrUnsupported)
		}
		return Proof{}, document{}, malformed("the proof is not a JSON object")
	}
	var p Proof
	if err := json.Unmarshal(raw, &p); err != nil {
		return Proof{}, document{}, malformed("the proof does not have the members of a Data Integrity proof: %v", err)
	}
	if err := json.Unmarshal(raw, &p.members); err != nil {
		return Proof{}, document{}, malformed("the proof is not a JSON object: %v", err)
	}
	switch {
	case p.Type != Type:
		return p, document{}, fmt.Errorf("%w: proof type %q; only %s is verified", ErrUnsupported, p.Type, Type)
	case p.Cryptosuite != Cryptosuite:
		return p, document{}, fmt.Errorf("%w: cryptosuite %q; only %s is verified", ErrUnsupported, p.Cryptosuite, Cryptosuite)
	case p.ProofPurpose != Purpose:
		return p, document{}, fmt.Errorf("%w: proofPurpose %q; only %s is verified", ErrUnsupported, p.ProofPurpose, Purpose)
	case p.VerificationMethod == "":
		return p, document{}, malformed("the proof has no verificationMethod")
	}
	delete(members, "proof")
	return p, document{unsecured: joinMembers(members), context: members["@context"]}, nil
}

// document is a secured document without its proof, and its @context.
type document struct {
	unsecured []byte
	context   json.RawMessage
}

// joinMembers writes members back as one JSON object. The values are as
// json.Unmarshal checked them, so they are copied, not re-encoded: JCS
// canonicalizes the result anyway, and re-encoding a large document took
// more time than verifying its signature.
func joinMembers(members map[string]json.RawMessage) []byte {
	n := 2
	for k, v := range members {
		n += len(k) + len(v) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	first := true
	for k, v := range members {
		if !first {
			b = append(b, ',')
		}
		first = false
		key, _ := json.Marshal(k) // a string always encodes
		b = append(b, key...)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}')
}

// splitProof returns doc without a proof member, and doc's @context.
func splitProof(doc []byte) ([]byte, json.RawMessage, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(doc, &members); err != nil {
		return nil, nil, malformed("the document is not a JSON object: %v", err)
	}
	ctx := members["@context"]
	if _, ok := members["proof"]; !ok {
		return bytes.TrimSpace(doc), ctx, nil
	}
	delete(members, "proof")
	out, err := json.Marshal(members)
	if err != nil {
		return nil, nil, malformed("the document cannot be re-encoded: %v", err)
	}
	return out, ctx, nil
}

// checkContext: the proof's @context must be the document's or a prefix of
// it (eddsa-jcs-2022, "Verify Proof").
func checkContext(docCtx, proofCtx json.RawMessage) error {
	dl, pl := contextList(docCtx), contextList(proofCtx)
	if pl == nil || dl == nil || len(pl) > len(dl) {
		return fmt.Errorf("%w: the proof's @context is not the start of the document's", ErrInvalidSignature)
	}
	for i := range pl {
		a, errA := jcs.Transform(pl[i])
		b, errB := jcs.Transform(dl[i])
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			return fmt.Errorf("%w: the proof's @context is not the start of the document's", ErrInvalidSignature)
		}
	}
	return nil
}

// contextList returns the entries of an @context (a string or object is a
// list of one); nil when there is none.
func contextList(raw json.RawMessage) []json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return nil
	}
	if t[0] != '[' {
		return []json.RawMessage{t}
	}
	var l []json.RawMessage
	if json.Unmarshal(t, &l) != nil {
		return nil
	}
	return l
}

// hashData is SHA-256(JCS(proof config)) ‖ SHA-256(JCS(document)); the
// proof config is the proof without proofValue.
func hashData(unsecured []byte, p Proof) ([]byte, error) {
	var cfg []byte
	var err error
	if p.members != nil {
		m := make(map[string]json.RawMessage, len(p.members))
		for k, v := range p.members {
			if k != "proofValue" {
				m[k] = v
			}
		}
		cfg, err = json.Marshal(m)
	} else {
		p.ProofValue = ""
		cfg, err = json.Marshal(p)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot encode the proof configuration: %w", err)
	}
	cc, err := jcs.Transform(cfg)
	if err != nil {
		return nil, malformed("the proof cannot be canonicalized: %v", err)
	}
	dc, err := jcs.Transform(unsecured)
	if err != nil {
		return nil, malformed("the document cannot be canonicalized (RFC 8785): %v", err)
	}
	h1, h2 := sha256.Sum256(cc), sha256.Sum256(dc)
	return append(h1[:], h2[:]...), nil
}

// withMember appends "name": value to the JSON object obj, keeping its
// members' order and layout.
func withMember(obj []byte, name string, value []byte) []byte {
	obj = bytes.TrimSpace(obj)
	obj = bytes.TrimRight(obj[:len(obj)-1], " \t\r\n") // the closing brace
	key, _ := json.Marshal(name)
	var b bytes.Buffer
	b.Write(obj)
	if !bytes.HasSuffix(obj, []byte("{")) {
		b.WriteByte(',')
	}
	b.Write(key)
	b.WriteByte(':')
	b.Write(value)
	b.WriteByte('}')
	return b.Bytes()
}
