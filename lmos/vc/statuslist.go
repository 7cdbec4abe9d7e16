package vc

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// StatusList is a verified status list credential.
type StatusList struct {
	// ID is the credential's id: the URL it is published at.
	ID     string
	Issuer string
	// ValidFrom is when the list was signed.
	ValidFrom time.Time
	// ValidUntil is when the list stops being valid: a verifier refuses
	// it from then on, so a list fetched before a revocation cannot be
	// replayed for longer than the issuer allows.
	ValidUntil time.Time
	// TTL is how long a verifier may keep the list before fetching it
	// again (credentialSubject.ttl; DefaultTTL when absent).
	TTL time.Duration
	// Bits are StatusListBytes bytes; bit i (bit 0 = the first byte's most
	// significant bit) set means credential i is revoked.
	Bits []byte
}

type statusSubject struct {
	ID            string `json:"id"`
	Type          string `json:"type"`
	StatusPurpose string `json:"statusPurpose"`
	EncodedList   string `json:"encodedList"`
	// TTL is in milliseconds (Bitstring Status List v1.0 §2.2).
	TTL json.RawMessage `json:"ttl,omitempty"`
}

// DefaultTTL is the ttl of a status list that states none (Bitstring
// Status List v1.0 §2.2: 300,000 ms).
const DefaultTTL = 5 * time.Minute

// maxTTL bounds a ttl read (a year in milliseconds fits easily).
const maxTTL = 366 * 24 * time.Hour

type statusListDoc struct {
	Context           []string      `json:"@context"`
	ID                string        `json:"id"`
	Type              []string      `json:"type"`
	Issuer            string        `json:"issuer"`
	ValidFrom         string        `json:"validFrom"`
	ValidUntil        string        `json:"validUntil"`
	CredentialSubject statusSubject `json:"credentialSubject"`
}

// IssueStatusList returns the revocation status list credential published
// at url, with bits (StatusListBytes bytes), signed by priv at validFrom,
// valid until validUntil, to be cached by verifiers for at most ttl
// (whole milliseconds; 0 leaves ttl out, which means DefaultTTL).
func IssueStatusList(url string, bits []byte, validFrom, validUntil time.Time, ttl time.Duration, priv ed25519.PrivateKey) ([]byte, error) {
	if len(bits) != StatusListBytes || url == "" {
		return nil, fmt.Errorf("%w: a status list has %d bytes and a URL", ErrMalformed, StatusListBytes)
	}
	validFrom, validUntil = validFrom.UTC().Truncate(time.Second), validUntil.UTC().Truncate(time.Second)
	if !validUntil.After(validFrom) || ttl < 0 || ttl > maxTTL {
		return nil, fmt.Errorf("%w: a status list's validUntil is after its validFrom, its ttl within 0…%s", ErrMalformed, maxTTL)
	}
	enc, err := EncodeList(bits)
	if err != nil {
		return nil, err
	}
	doc := statusListDoc{
		Context:    []string{ContextV2},
		ID:         url,
		Type:       []string{TypeCredential, TypeStatusListCredential},
		Issuer:     proof.DID(priv.Public().(ed25519.PublicKey)),
		ValidFrom:  validFrom.Format(dateTime),
		ValidUntil: validUntil.Format(dateTime),
		CredentialSubject: statusSubject{
			ID: url + "#list", Type: TypeStatusList, StatusPurpose: PurposeRevocation, EncodedList: enc,
		},
	}
	if ttl > 0 {
		doc.CredentialSubject.TTL = json.RawMessage(strconv.FormatInt(ttl.Milliseconds(), 10))
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

// readTTL reads credentialSubject.ttl: a whole number of milliseconds
// from 0 to maxTTL (DefaultTTL when absent).
func readTTL(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 {
		return DefaultTTL, nil
	}
	ms, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || ms < 0 || ms > maxTTL.Milliseconds() {
		return 0, fmt.Errorf("%w: ttl %.32q is not a whole number of milliseconds up to %d", ErrStatusList, raw, maxTTL.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, nil
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
// its validity dates, and its list's encoding and size. A list must have a
// validUntil and now must be before it: one without could be replayed
// forever after a revocation (PROTOCOL §7.1). Every failure other than the
// issuer's wraps ErrStatusList.
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
	if w.ValidUntil == "" {
		return StatusList{}, fmt.Errorf("%w: the list has no validUntil: it could be replayed after a revocation", ErrStatusList)
	}
	if sl.ValidUntil, err = time.Parse(time.RFC3339, w.ValidUntil); err != nil {
		return StatusList{}, fmt.Errorf("%w: validUntil: %v", ErrStatusList, err)
	}
	if !now.Before(sl.ValidUntil) {
		return StatusList{}, fmt.Errorf("%w: the list expired at %s (fetch it again)", ErrStatusList, w.ValidUntil)
	}
	if sl.TTL, err = readTTL(cs.TTL); err != nil {
		return StatusList{}, err
	}
	if sl.Bits, err = DecodeList(cs.EncodedList); err != nil {
		return StatusList{}, err
	}
	return sl, nil
}
