package vc

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// StatusList is a verified status list credential.
type StatusList struct {
	// ID is the credential's id: the URL it is published at.
	ID     string
	Issuer string
	// ValidFrom is when the list was signed (its last change).
	ValidFrom time.Time
	// Bits are StatusListBytes bytes; bit i (bit 0 = the first byte's most
	// significant bit) set means credential i is revoked.
	Bits []byte
}

type statusSubject struct {
	ID            string `json:"id"`
	Type          string `json:"type"`
	StatusPurpose string `json:"statusPurpose"`
	EncodedList   string `json:"encodedList"`
}

type statusListDoc struct {
	Context           []string      `json:"@context"`
	ID                string        `json:"id"`
	Type              []string      `json:"type"`
	Issuer            string        `json:"issuer"`
	ValidFrom         string        `json:"validFrom"`
	CredentialSubject statusSubject `json:"credentialSubject"`
}

// IssueStatusList returns the revocation status list credential published
// at url, with bits (StatusListBytes bytes), signed by priv at validFrom.
func IssueStatusList(url string, bits []byte, validFrom time.Time, priv ed25519.PrivateKey) ([]byte, error) {
	if len(bits) != StatusListBytes || url == "" {
		return nil, fmt.Errorf("%w: a status list has %d bytes and a URL", ErrMalformed, StatusListBytes)
	}
	enc, err := EncodeList(bits)
	if err != nil {
		return nil, err
	}
	doc := statusListDoc{
		Context:   []string{ContextV2},
		ID:        url,
		Type:      []string{TypeCredential, TypeStatusListCredential},
		Issuer:    proof.DID(priv.Public().(ed25519.PublicKey)),
		ValidFrom: validFrom.UTC().Format(dateTime),
		CredentialSubject: statusSubject{
			ID: url + "#list", Type: TypeStatusList, StatusPurpose: PurposeRevocation, EncodedList: enc,
		},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the status list: %w", err)
	}
	return proof.Sign(b, priv, validFrom)
}

// EncodeList is the encodedList of bits: multibase base64url without
// padding ('u') of the GZIP-compressed bitstring (Bitstring Status List
// v1.0 §3.1).
func EncodeList(bits []byte) (string, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write(bits); err != nil {
		return "", fmt.Errorf("cannot compress the status list: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("cannot compress the status list: %w", err)
	}
	return "u" + base64.RawURLEncoding.EncodeToString(buf.Bytes()), nil
}

// DecodeList reverses EncodeList within the bounds: encodedList at most
// 24 KiB, and exactly StatusListBytes once decompressed (more is refused
// after StatusListBytes+1 bytes are read, so a gzip bomb costs nothing).
func DecodeList(enc string) ([]byte, error) {
	if len(enc) > maxEncodedList {
		return nil, fmt.Errorf("%w: encodedList is %d bytes, more than %d", ErrStatusList, len(enc), maxEncodedList)
	}
	rest, ok := strings.CutPrefix(enc, "u")
	if !ok {
		return nil, fmt.Errorf("%w: encodedList is not multibase base64url ('u')", ErrStatusList)
	}
	// The spec says no padding; a padded one is read all the same.
	z, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(rest, "="))
	if err != nil {
		return nil, fmt.Errorf("%w: encodedList: %v", ErrStatusList, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("%w: encodedList is not GZIP: %v", ErrStatusList, err)
	}
	zr.Multistream(false)
	bits, err := io.ReadAll(io.LimitReader(zr, StatusListBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: encodedList: %v", ErrStatusList, err)
	}
	if len(bits) != StatusListBytes {
		return nil, fmt.Errorf("%w: the list decompresses to %d bytes or more, not %d (%d entries)", ErrStatusList, len(bits), StatusListBytes, StatusListBits)
	}
	return bits, nil
}

type wireStatusList struct {
	Context           json.RawMessage `json:"@context"`
	ID                string          `json:"id"`
	Type              json.RawMessage `json:"type"`
	Issuer            json.RawMessage `json:"issuer"`
	ValidFrom         string          `json:"validFrom"`
	ValidUntil        string          `json:"validUntil"`
	CredentialSubject statusSubject   `json:"credentialSubject"`
}

// VerifyStatusList checks a revocation status list credential at now: its
// shape, its proof by its issuer (the expected one, if given: ErrIssuer),
// its validity dates, and its list's encoding and size. Every failure
// other than the issuer's wraps ErrStatusList.
func VerifyStatusList(b []byte, now time.Time, opts ...Option) (StatusList, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	var w wireStatusList
	if err := readDoc(b, MaxStatusListCredentialBytes, &w); err != nil {
		return StatusList{}, fmt.Errorf("%w: %w", ErrStatusList, err)
	}
	if err := checkTypes(stringList(w.Context), stringList(w.Type), TypeStatusListCredential); err != nil {
		return StatusList{}, fmt.Errorf("%w: %w", ErrStatusList, err)
	}
	iss, err := issuerID(w.Issuer)
	if err != nil {
		return StatusList{}, fmt.Errorf("%w: %w", ErrStatusList, err)
	}
	cs := w.CredentialSubject
	if w.ID == "" || cs.Type != TypeStatusList || cs.StatusPurpose != PurposeRevocation {
		return StatusList{}, fmt.Errorf("%w: not a %s for %s with an id", ErrStatusList, TypeStatusList, PurposeRevocation)
	}
	if err := checkSigner(b, iss, o.issuer, ErrStatusList); err != nil {
		return StatusList{}, err
	}
	sl := StatusList{ID: w.ID, Issuer: iss}
	if w.ValidFrom != "" {
		if sl.ValidFrom, err = time.Parse(time.RFC3339, w.ValidFrom); err != nil {
			return StatusList{}, fmt.Errorf("%w: validFrom: %v", ErrStatusList, err)
		}
		if now.Add(o.skew).Before(sl.ValidFrom) {
			return StatusList{}, fmt.Errorf("%w: not valid before %s", ErrStatusList, w.ValidFrom)
		}
	}
	if w.ValidUntil != "" {
		until, err := time.Parse(time.RFC3339, w.ValidUntil)
		if err != nil || !now.Before(until) {
			return StatusList{}, fmt.Errorf("%w: validUntil %q has passed or is not a date", ErrStatusList, w.ValidUntil)
		}
	}
	if sl.Bits, err = DecodeList(cs.EncodedList); err != nil {
		return StatusList{}, err
	}
	return sl, nil
}
