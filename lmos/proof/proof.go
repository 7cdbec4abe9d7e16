package proof

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/mr-tron/base58"
)

// Values of a proof this package makes and verifies.
const (
	Type        = "DataIntegrityProof"
	Cryptosuite = "eddsa-jcs-2022"
	Purpose     = "assertionMethod"
)

// MaxProofBytes bounds the proof member (its canonical form); a real one is
// ~400 bytes plus the document's @context, which the proof repeats.
const MaxProofBytes = 8 << 10

// maxProofValue bounds proofValue before it is decoded: a 64-byte
// signature is at most 88 base58 characters.
const maxProofValue = 100

// Proof is a Data Integrity proof. Context is the proof's @context, which
// eddsa-jcs-2022 carries over from the document (in a verified proof, its
// canonical form).
type Proof struct {
	Context            json.RawMessage `json:"@context,omitempty"`
	Type               string          `json:"type"`
	Cryptosuite        string          `json:"cryptosuite"`
	Created            string          `json:"created,omitempty"`
	VerificationMethod string          `json:"verificationMethod"`
	ProofPurpose       string          `json:"proofPurpose"`
	ProofValue         string          `json:"proofValue,omitempty"`

	// config is the canonical form of the proof as read without its
	// proofValue, so a verification covers the members this type does
	// not name (expires, domain, …); nil for a proof made here.
	config []byte
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
	cfg, err := json.Marshal(p) // no proofValue yet
	if err != nil {
		return nil, fmt.Errorf("cannot encode the proof: %w", err)
	}
	cu, err := canonical(unsecured)
	if err != nil {
		return nil, malformed("the document cannot be canonicalized (RFC 8785): %v", err)
	}
	cc, err := canonical(cfg)
	if err != nil {
		return nil, malformed("the proof cannot be canonicalized: %v", err)
	}
	data := hashData(cc, cu)
	p.ProofValue = "z" + base58.Encode(ed25519.Sign(priv, data))
	enc, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the proof: %w", err)
	}
	return withMember(unsecured, "proof", enc), nil
}

// Verify checks doc's eddsa-jcs-2022 proof against the did:key named by
// its verificationMethod, the signature under the ZIP-215 rules
// (CheckSignature).
func Verify(doc []byte) (Result, error) {
	return VerifyWith(doc, CheckSignature)
}

// Checker reports whether sig is a valid Ed25519 signature of msg by pub.
// A checker must answer as CheckSignature does; it may, for instance, put
// the signature into a batch with others (CheckBatch) and wait for it.
type Checker func(pub ed25519.PublicKey, msg, sig []byte) bool

// VerifyWith is Verify with the signature itself checked by check: the
// document is read, canonicalized and hashed here, and check gets the key,
// the 64-byte message (the two hashes) and the 64-byte signature, which it
// must not keep after it returns. check is not called for a proof refused
// before its signature is looked at.
func VerifyWith(doc []byte, check Checker) (Result, error) {
	p, d, err := readProof(doc)
	if err != nil {
		return Result{}, err
	}
	did, pub, err := ParseDID(p.VerificationMethod)
	if err != nil {
		return Result{}, fmt.Errorf("verificationMethod: %w", err)
	}
	r, err := verify(p, d, pub, check)
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
	r, err := verify(p, d, pub, CheckSignature)
	if did, _, derr := ParseDID(p.VerificationMethod); derr == nil {
		r.DID = did
	}
	return r, err
}

// verify checks a proof already read from its document, its signature by
// check.
func verify(p Proof, d document, pub ed25519.PublicKey, check Checker) (Result, error) {
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
	if smallOrder(pub) {
		return r, malformed("the public key is a point of small order, for which no secret key exists")
	}
	if p.Context != nil {
		if err := checkContext(d.context, p.Context); err != nil {
			return r, err
		}
	}
	data := hashData(p.config, d.head, d.tail)
	if !check(pub, data, sig) {
		return r, fmt.Errorf("%w: the proof does not match the document and the key %s", ErrInvalidSignature, PublicKeyMultibase(pub))
	}
	return r, nil
}

// readProof splits doc into its proof, checked for the values this suite
// signs with, and the document without it, both in canonical form: doc is
// canonicalized once (which checks all of it) and the proof member cut out
// of that (canonical.go), rather than the document decoded, the proof
// removed and the rest encoded and canonicalized again.
func readProof(doc []byte) (Proof, document, error) {
	c, err := canonical(doc)
	if err != nil {
		return Proof{}, document{}, malformed("the document is not a JSON object that RFC 8785 canonicalizes: %v", err)
	}
	if c[0] != '{' {
		return Proof{}, document{}, malformed("the document is not a JSON object")
	}
	var raw, ctx []byte
	var cutFrom, cutTo, index int
	err = canonMembers(c, func(i int, name, value []byte, from, to int) error {
		switch string(name) {
		case `"proof"`:
			raw, cutFrom, cutTo, index = value, from, to, i
		case `"@context"`:
			ctx = value
		}
		return nil
	})
	if err != nil {
		return Proof{}, document{}, malformed("the document: %v", err)
	}
	if raw == nil {
		return Proof{}, document{}, ErrNoProof
	}
	if len(raw) > MaxProofBytes {
		return Proof{}, document{}, malformed("the proof is %d bytes, more than %d", len(raw), MaxProofBytes)
	}
	switch raw[0] {
	case '{':
	case '[':
		return Proof{}, document{}, fmt.Errorf("%w: a proof set (an array of proofs) is not supported; sign with one proof", ErrUnsupported)
	default:
		return Proof{}, document{}, malformed("the proof is not a JSON object")
	}
	p, err := parseProof(raw)
	if err != nil {
		return p, document{}, err
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
	head, tail := canonSplit(c, cutFrom, cutTo, index == 0)
	return p, document{head: head, tail: tail, context: ctx}, nil
}

// parseProof reads the members of the proof object raw (canonical) that
// this package names, and keeps raw without its proofValue as the proof
// configuration the signature covers (every other member included:
// expires, domain, …).
func parseProof(raw []byte) (Proof, error) {
	var p Proof
	var cfg []byte
	err := canonMembers(raw, func(i int, name, value []byte, from, to int) error {
		var field *string
		switch string(name) {
		case `"@context"`:
			p.Context = json.RawMessage(value)
			return nil
		case `"type"`:
			field = &p.Type
		case `"cryptosuite"`:
			field = &p.Cryptosuite
		case `"created"`:
			field = &p.Created
		case `"verificationMethod"`:
			field = &p.VerificationMethod
		case `"proofPurpose"`:
			field = &p.ProofPurpose
		case `"proofValue"`:
			field = &p.ProofValue
			cfg = canonCut(raw, from, to, i == 0)
		default:
			return nil
		}
		if value[0] != '"' {
			return malformed("the proof's %s is not a string", name)
		}
		s, err := jsontext.AppendUnquote(nil, value)
		if err != nil {
			return malformed("the proof's %s: %v", name, err)
		}
		*field = string(s)
		return nil
	})
	if errors.Is(err, ErrMalformed) {
		return Proof{}, err
	}
	if err != nil {
		return Proof{}, malformed("the proof: %v", err)
	}
	if cfg == nil {
		cfg = raw
	}
	p.config = cfg
	return p, nil
}

// document is a secured document without its proof, in canonical form
// (the two pieces around the proof member: the hash reads them in turn
// rather than a copy), and its canonical @context.
type document struct {
	head, tail []byte
	context    json.RawMessage
}

// eachMember calls fn for each member of the JSON object obj, in order:
// its index, its name, its value (a slice of obj), and the span [from, to)
// that cut removes to drop it (from the end of the value before, or the
// opening brace, to the end of its own value). The whole of obj is
// checked as RFC 8785 requires of its input (I-JSON, RFC 7493: valid
// UTF-8, no duplicate names), even where no member is wanted.
func eachMember(obj []byte, fn func(i int, name string, value []byte, from, to int) error) error {
	d := jsontext.NewDecoder(bytes.NewBuffer(obj))
	tok, err := d.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != '{' {
		return fmt.Errorf("a JSON %s, not an object", tok.Kind())
	}
	for i := 0; ; i++ {
		if k := d.PeekKind(); k == '}' || k == 0 {
			break
		}
		from := int(d.InputOffset())
		tok, err := d.ReadToken()
		if err != nil {
			return err
		}
		name := tok.String() // before the next read voids tok
		value, err := d.ReadValue()
		if err != nil {
			return err
		}
		to := int(d.InputOffset())
		if err := fn(i, name, obj[to-len(value):to], from, to); err != nil {
			return err
		}
	}
	if _, err := d.ReadToken(); err != nil { // the closing brace
		return err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return fmt.Errorf("data after the object")
	}
	return nil
}

// cut returns a copy of obj without the member eachMember found at
// [from, to). The first member has no comma before it: the one after it
// goes instead.
func cut(obj []byte, from, to int, first bool) []byte {
	rest := obj[to:]
	if first {
		if t := bytes.TrimLeft(rest, " \t\r\n"); len(t) > 0 && t[0] == ',' {
			rest = t[1:]
		}
	}
	out := make([]byte, 0, from+len(rest))
	out = append(out, obj[:from]...)
	return append(out, rest...)
}

// splitProof returns doc without a proof member, and doc's @context.
func splitProof(doc []byte) ([]byte, json.RawMessage, error) {
	var ctx []byte
	found, cutFrom, cutTo, index := false, 0, 0, 0
	err := eachMember(doc, func(i int, name string, value []byte, from, to int) error {
		switch name {
		case "proof":
			found, cutFrom, cutTo, index = true, from, to, i
		case "@context":
			ctx = value
		}
		return nil
	})
	if err != nil {
		return nil, nil, malformed("the document is not a JSON object: %v", err)
	}
	if !found {
		return bytes.TrimSpace(doc), ctx, nil
	}
	return cut(doc, cutFrom, cutTo, index == 0), ctx, nil
}

// checkContext: the proof's @context must be the document's or a prefix of
// it (eddsa-jcs-2022, "Verify Proof"). Both are canonical forms, so equal
// values are equal bytes.
func checkContext(docCtx, proofCtx json.RawMessage) error {
	if len(docCtx) > 0 && bytes.Equal(docCtx, proofCtx) {
		return nil
	}
	dl, pl := contextList(docCtx), contextList(proofCtx)
	if pl == nil || dl == nil || len(pl) > len(dl) {
		return fmt.Errorf("%w: the proof's @context is not the start of the document's", ErrInvalidSignature)
	}
	for i := range pl {
		if !bytes.Equal(pl[i], dl[i]) {
			return fmt.Errorf("%w: the proof's @context is not the start of the document's", ErrInvalidSignature)
		}
	}
	return nil
}

// contextList returns the entries of a canonical @context (a string or
// object is a list of one); nil when there is none.
func contextList(c json.RawMessage) [][]byte {
	if len(c) == 0 {
		return nil
	}
	if c[0] != '[' {
		return [][]byte{c}
	}
	l, err := canonElements(c)
	if err != nil {
		return nil
	}
	if l == nil {
		l = [][]byte{}
	}
	return l
}

// hashData is SHA-256(JCS(proof config)) ‖ SHA-256(JCS(document)), from
// the canonical proof config (the proof without proofValue) and the
// canonical document, given in pieces.
func hashData(canonConfig []byte, canonUnsecured ...[]byte) []byte {
	h1 := sha256.Sum256(canonConfig)
	h := sha256.New()
	for _, b := range canonUnsecured {
		h.Write(b)
	}
	return h.Sum(h1[:])
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
