package vc

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// Terms of the credentials (W3C VC Data Model 2.0, Bitstring Status List
// v1.0) and the LMOS ones.
const (
	ContextV2 = "https://www.w3.org/ns/credentials/v2"
	// ContextLMOS defines the LMOS terms of a membership credential
	// (LmosGroupMembershipCredential, thing, group). eddsa-jcs-2022 signs
	// the JSON itself, so no verifier needs to fetch it.
	ContextLMOS = "https://eclipse.dev/lmos/protocol/v1/credentials"

	TypeCredential           = "VerifiableCredential"
	TypeMembership           = "LmosGroupMembershipCredential"
	TypeStatusListCredential = "BitstringStatusListCredential"
	TypeStatusList           = "BitstringStatusList"
	TypeStatusEntry          = "BitstringStatusListEntry"
	PurposeRevocation        = "revocation"
)

// Bounds of what is decoded.
const (
	// MaxCredentialBytes bounds a membership credential: a real one is
	// ~1.3 KiB (a group title of 200 characters and 512-byte ids
	// included, under 3 KiB).
	MaxCredentialBytes = 16 << 10
	// StatusListBits is the size of a status list this package reads and
	// writes: the W3C minimum of 131,072 entries, 16 KiB. A list that
	// decompresses to more (a gzip bomb) is refused once 16 KiB + 1 byte
	// is read; one of fewer entries is refused as the spec says.
	StatusListBits  = 131072
	StatusListBytes = StatusListBits / 8
	// maxEncodedList bounds encodedList before decoding: 16 KiB of random
	// bits gzip to at most ~16.5 KiB, base64 to ~22 KiB.
	maxEncodedList = 24 << 10
	// MaxStatusListCredentialBytes bounds the whole status list credential.
	MaxStatusListCredentialBytes = maxEncodedList + 8<<10
)

// The kinds of failure: every error of VerifyMembership and
// VerifyStatusList wraps one of them (errors.Is).
var (
	// ErrMalformed: not a credential of the expected shape, or too large.
	ErrMalformed = errors.New("malformed credential")
	// ErrProof: the proof does not verify (tampered, wrong key).
	ErrProof = errors.New("the credential's proof does not verify")
	// ErrIssuer: the issuer is not the proof's key, not the one expected,
	// or the status list's issuer is not the credential's.
	ErrIssuer = errors.New("wrong issuer")
	// ErrNotValid: outside validFrom … validUntil.
	ErrNotValid = errors.New("the credential is not valid at this time")
	// ErrStatusList: the status list credential is unusable (bad proof,
	// other list, bad encoding, index out of range).
	ErrStatusList = errors.New("the status list cannot be used")
	// ErrRevoked: the credential's status bit is set.
	ErrRevoked = errors.New("the credential is revoked")
)

// Group names the group of a membership.
type Group struct {
	ID    string `json:"id"`
	Title string `json:"title,omitempty"`
}

// Membership is what a membership credential states.
type Membership struct {
	// ID is the credential's id (urn:uuid:…).
	ID string
	// Issuer is the issuing hub's did:key.
	Issuer string
	// Subject is the member: its DID when the hub had verified it, else
	// its Thing id.
	Subject string
	// Thing is the member's Thing id.
	Thing      string
	Group      Group
	ValidFrom  time.Time
	ValidUntil time.Time
	// StatusIndex is the credential's entry in the list at StatusListURL.
	StatusIndex   int
	StatusListURL string
}

// The JSON of the credentials, members in the order they are written.
type credentialStatus struct {
	ID                   string `json:"id"`
	Type                 string `json:"type"`
	StatusPurpose        string `json:"statusPurpose"`
	StatusListIndex      string `json:"statusListIndex"`
	StatusListCredential string `json:"statusListCredential"`
}

type membershipSubject struct {
	ID    string `json:"id"`
	Thing string `json:"thing"`
	Group Group  `json:"group"`
}

type membershipDoc struct {
	Context           []string          `json:"@context"`
	ID                string            `json:"id"`
	Type              []string          `json:"type"`
	Issuer            string            `json:"issuer"`
	ValidFrom         string            `json:"validFrom"`
	ValidUntil        string            `json:"validUntil"`
	CredentialSubject membershipSubject `json:"credentialSubject"`
	CredentialStatus  credentialStatus  `json:"credentialStatus"`
}

// dateTime is the VC 2.0 dateTimeStamp form this package writes.
const dateTime = time.RFC3339

// NewID returns a fresh urn:uuid (version 4) for a credential.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// IssueMembership returns m as a membership credential signed by priv
// (m.Issuer is ignored: the issuer is priv's did:key; an empty m.ID gets
// NewID). The proof's created is m.ValidFrom.
func IssueMembership(m Membership, priv ed25519.PrivateKey) ([]byte, error) {
	did := proof.DID(priv.Public().(ed25519.PublicKey))
	if m.ID == "" {
		m.ID = NewID()
	}
	if m.Subject == "" || m.Thing == "" || m.Group.ID == "" || m.StatusListURL == "" || m.StatusIndex < 0 || m.StatusIndex >= StatusListBits {
		return nil, fmt.Errorf("%w: a membership needs a subject, a Thing, a group and a status entry in 0…%d", ErrMalformed, StatusListBits-1)
	}
	if !m.ValidUntil.After(m.ValidFrom) {
		return nil, fmt.Errorf("%w: validUntil must be after validFrom", ErrMalformed)
	}
	idx := strconv.Itoa(m.StatusIndex)
	doc := membershipDoc{
		Context:    []string{ContextV2, ContextLMOS},
		ID:         m.ID,
		Type:       []string{TypeCredential, TypeMembership},
		Issuer:     did,
		ValidFrom:  m.ValidFrom.UTC().Format(dateTime),
		ValidUntil: m.ValidUntil.UTC().Format(dateTime),
		CredentialSubject: membershipSubject{
			ID: m.Subject, Thing: m.Thing, Group: m.Group,
		},
		CredentialStatus: credentialStatus{
			ID: m.StatusListURL + "#" + idx, Type: TypeStatusEntry, StatusPurpose: PurposeRevocation,
			StatusListIndex: idx, StatusListCredential: m.StatusListURL,
		},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the credential: %w", err)
	}
	return proof.Sign(b, priv, m.ValidFrom)
}

// readDoc decodes a credential of at most limit bytes into v; unknown
// members are allowed (VC 2.0 is extensible), duplicate ones are not
// checked here (the proof covers what JCS sees).
func readDoc(b []byte, limit int, v any) error {
	if len(b) > limit {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(b), limit)
	}
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// issuerID reads a VC 2.0 issuer: a URL, or an object with an id.
func issuerID(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s, nil
	}
	var o struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &o) == nil && o.ID != "" {
		return o.ID, nil
	}
	return "", fmt.Errorf("%w: no issuer", ErrMalformed)
}

// checkTypes checks @context starts with the VC 2.0 context and holds
// want, and type holds VerifiableCredential and kind.
func checkTypes(ctx, types []string, kind string, want ...string) error {
	if len(ctx) == 0 || ctx[0] != ContextV2 {
		return fmt.Errorf("%w: @context must begin with %s", ErrMalformed, ContextV2)
	}
	for _, w := range want {
		if !contains(ctx, w) {
			return fmt.Errorf("%w: @context lacks %s", ErrMalformed, w)
		}
	}
	if !contains(types, TypeCredential) || !contains(types, kind) {
		return fmt.Errorf("%w: type must hold %s and %s", ErrMalformed, TypeCredential, kind)
	}
	return nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// stringList reads a JSON string or array of strings (VC 2.0 allows both
// for @context and type; an @context object entry is kept as "").
func stringList(raw json.RawMessage) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var l []json.RawMessage
	if json.Unmarshal(raw, &l) != nil {
		return nil
	}
	out := make([]string, len(l))
	for i, e := range l {
		_ = json.Unmarshal(e, &out[i])
	}
	return out
}

// wireMembership is a membership credential as read.
type wireMembership struct {
	Context           json.RawMessage   `json:"@context"`
	ID                string            `json:"id"`
	Type              json.RawMessage   `json:"type"`
	Issuer            json.RawMessage   `json:"issuer"`
	ValidFrom         string            `json:"validFrom"`
	ValidUntil        string            `json:"validUntil"`
	CredentialSubject membershipSubject `json:"credentialSubject"`
	CredentialStatus  credentialStatus  `json:"credentialStatus"`
}

// ParseMembership reads a membership credential's claims without checking
// its proof, dates or status (a verifier first needs its status list URL).
func ParseMembership(b []byte) (Membership, error) {
	var w wireMembership
	if err := readDoc(b, MaxCredentialBytes, &w); err != nil {
		return Membership{}, err
	}
	if err := checkTypes(stringList(w.Context), stringList(w.Type), TypeMembership, ContextLMOS); err != nil {
		return Membership{}, err
	}
	iss, err := issuerID(w.Issuer)
	if err != nil {
		return Membership{}, err
	}
	m := Membership{ID: w.ID, Issuer: iss, Subject: w.CredentialSubject.ID, Thing: w.CredentialSubject.Thing,
		Group: w.CredentialSubject.Group}
	if m.ID == "" || m.Subject == "" || m.Thing == "" || m.Group.ID == "" {
		return Membership{}, fmt.Errorf("%w: id, credentialSubject.id, .thing and .group.id are required", ErrMalformed)
	}
	if m.ValidFrom, err = time.Parse(time.RFC3339, w.ValidFrom); err != nil {
		return Membership{}, fmt.Errorf("%w: validFrom: %v", ErrMalformed, err)
	}
	if m.ValidUntil, err = time.Parse(time.RFC3339, w.ValidUntil); err != nil {
		return Membership{}, fmt.Errorf("%w: validUntil: %v", ErrMalformed, err)
	}
	st := w.CredentialStatus
	if st.Type != TypeStatusEntry || st.StatusPurpose != PurposeRevocation || st.StatusListCredential == "" {
		return Membership{}, fmt.Errorf("%w: credentialStatus must be a %s for %s with a statusListCredential", ErrMalformed, TypeStatusEntry, PurposeRevocation)
	}
	idx, err := strconv.Atoi(st.StatusListIndex)
	if err != nil || idx < 0 || len(st.StatusListIndex) > 10 || strconv.Itoa(idx) != st.StatusListIndex {
		return Membership{}, fmt.Errorf("%w: statusListIndex %q is not a decimal index", ErrMalformed, st.StatusListIndex)
	}
	m.StatusIndex, m.StatusListURL = idx, st.StatusListCredential
	return m, nil
}

// Option is a verification option.
type Option func(*options)

type options struct {
	issuer string
	skew   time.Duration
}

// AllowClockSkew accepts a credential or status list whose validFrom is
// up to d after now: the verifier's clock may lag the issuer's (a LAN
// device without a real-time clock). validUntil is not stretched.
func AllowClockSkew(d time.Duration) Option { return func(o *options) { o.skew = d } }

// ExpectIssuer refuses (ErrIssuer) a credential not issued by did: a
// verifier that knows the hub pins its DID.
func ExpectIssuer(did string) Option { return func(o *options) { o.issuer = did } }

// VerifyMembership checks a membership credential against the issuer's
// status list credential at now: both proofs (eddsa-jcs-2022), that the
// issuer is the did:key that signed (and the expected one, if given), that
// both have the same issuer and the status list is the one the credential
// names, the validity dates of both, and that the credential's status bit
// is not set (ErrRevoked). It returns what the credential states. It is
// CheckMembership, then CheckStatus.
func VerifyMembership(cred, statusList []byte, now time.Time, opts ...Option) (Membership, error) {
	m, err := CheckMembership(cred, now, opts...)
	if err != nil {
		return m, err
	}
	return m, CheckStatus(m, statusList, now, opts...)
}

// CheckMembership checks what a membership credential proves by itself
// at now: its proof, that its issuer signed it (and is the expected one,
// if given), its validity dates. A verifier that fetches the status list
// the credential names checks this first, so that it fetches only a URL
// the issuer signed, never one a forger wrote (a request to wherever a
// presented credential points).
func CheckMembership(cred []byte, now time.Time, opts ...Option) (Membership, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	m, err := ParseMembership(cred)
	if err != nil {
		return Membership{}, err
	}
	if err := checkSigner(cred, m.Issuer, o.issuer, ErrProof); err != nil {
		return m, err
	}
	if now.Add(o.skew).Before(m.ValidFrom) || !now.Before(m.ValidUntil) {
		return m, fmt.Errorf("%w: valid from %s until %s", ErrNotValid, m.ValidFrom.Format(time.RFC3339), m.ValidUntil.Format(time.RFC3339))
	}
	return m, nil
}

// CheckStatus checks m, a membership CheckMembership accepted, against
// its issuer's status list credential at now: the list's proof by the
// same issuer, that it is the list m names, its validity, and m's bit.
func CheckStatus(m Membership, statusList []byte, now time.Time, opts ...Option) error {
	var o options
	for _, f := range opts {
		f(&o)
	}
	sl, err := VerifyStatusList(statusList, now, ExpectIssuer(m.Issuer), AllowClockSkew(o.skew))
	if err != nil {
		return err
	}
	if sl.ID != m.StatusListURL {
		return fmt.Errorf("%w: the credential names the list %q, this is %q", ErrStatusList, m.StatusListURL, sl.ID)
	}
	if m.StatusIndex >= len(sl.Bits)*8 {
		return fmt.Errorf("%w: index %d is beyond the list's %d entries", ErrStatusList, m.StatusIndex, len(sl.Bits)*8)
	}
	if sl.Bits[m.StatusIndex/8]&(0x80>>(m.StatusIndex%8)) != 0 {
		return fmt.Errorf("%w: status entry %d of %s is set", ErrRevoked, m.StatusIndex, sl.ID)
	}
	return nil
}

// checkSigner verifies doc's proof and that its signer is issuer (and
// want, when set); a failing proof wraps kind.
func checkSigner(doc []byte, issuer, want string, kind error) error {
	res, err := proof.Verify(doc)
	if err != nil {
		return fmt.Errorf("%w: %w", kind, err)
	}
	if res.DID != issuer {
		return fmt.Errorf("%w: the issuer %q did not sign it (%s did)", ErrIssuer, issuer, res.DID)
	}
	if want != "" && issuer != want {
		return fmt.Errorf("%w: issued by %q, not %q", ErrIssuer, issuer, want)
	}
	return nil
}
