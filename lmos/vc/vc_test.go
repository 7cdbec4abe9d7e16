package vc

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

const listURL = "http://hub.local:8080/credentials/status/memberships"

var t0 = time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)

func key(t testing.TB, seed byte) ed25519.PrivateKey {
	t.Helper()
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func member(idx int) Membership {
	return Membership{Subject: "did:key:z6MkAgent", Thing: "urn:example:lamp", Group: Group{ID: "living-room", Title: "Living room"},
		ValidFrom: t0, ValidUntil: t0.AddDate(1, 0, 0), StatusIndex: idx, StatusListURL: listURL}
}

func issue(t testing.TB, priv ed25519.PrivateKey, m Membership) []byte {
	t.Helper()
	b, err := IssueMembership(m, priv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func list(t testing.TB, priv ed25519.PrivateKey, url string, revoked ...int) []byte {
	t.Helper()
	bits := make([]byte, StatusListBytes)
	for _, i := range revoked {
		bits[i/8] |= 0x80 >> (i % 8)
	}
	b, err := IssueStatusList(url, bits, t0, t0.Add(listValidity), 30*time.Second, priv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// listValidity is how long the test lists are valid.
const listValidity = 2 * time.Hour

func TestMembershipRoundTrip(t *testing.T) {
	hub := key(t, 1)
	cred := issue(t, hub, member(42))
	did := proof.DID(hub.Public().(ed25519.PublicKey))
	m, err := VerifyMembership(cred, list(t, hub, listURL, 41, 43), t0.Add(time.Hour), ExpectIssuer(did))
	if err != nil {
		t.Fatal(err)
	}
	if m.Issuer != did || m.Thing != "urn:example:lamp" || m.Group != (Group{"living-room", "Living room"}) ||
		m.StatusIndex != 42 || m.StatusListURL != listURL || !m.ValidFrom.Equal(t0) || !strings.HasPrefix(m.ID, "urn:uuid:") {
		t.Fatalf("membership %+v", m)
	}
	// The wire shape of PROTOCOL §7.
	var doc map[string]any
	if err := json.Unmarshal(cred, &doc); err != nil {
		t.Fatal(err)
	}
	st := doc["credentialStatus"].(map[string]any)
	if st["id"] != listURL+"#42" || st["statusListIndex"] != "42" || st["statusPurpose"] != "revocation" ||
		st["type"] != "BitstringStatusListEntry" || doc["validUntil"] != "2027-11-24T04:00:00Z" {
		t.Fatalf("credential %s", cred)
	}
	p := doc["proof"].(map[string]any)
	if p["cryptosuite"] != "eddsa-jcs-2022" || p["verificationMethod"] != proof.VerificationMethod(hub.Public().(ed25519.PublicKey)) {
		t.Fatalf("proof %v", p)
	}
}

// Every way a credential must fail, each with its kind of error.
func TestVerifyMembershipRefuses(t *testing.T) {
	hub, other := key(t, 1), key(t, 2)
	hubDID := proof.DID(hub.Public().(ed25519.PublicKey))
	cred := issue(t, hub, member(7))
	good := list(t, hub, listURL)
	now := t0.Add(time.Hour)

	tampered := bytes.Replace(cred, []byte("living-room"), []byte("kitchen"), 1)
	// Another key signs a credential that names the hub as its issuer.
	forged, err := proof.Sign(bytes.Replace(issue(t, other, member(7)),
		[]byte(proof.DID(other.Public().(ed25519.PublicKey))), []byte(hubDID), 1), other, t0)
	if err != nil {
		t.Fatal(err)
	}
	otherList := list(t, other, listURL)
	badList := bytes.Replace(good, []byte(`"revocation"`), []byte(`"suspension"`), 1)
	badList = bytes.Replace(badList, []byte(`"statusPurpose":"suspension"`), []byte(`"statusPurpose":"revocation","x":1`), 1)
	wrongURL := list(t, hub, listURL+"2")
	var asMap map[string]any
	_ = json.Unmarshal(cred, &asMap)

	for _, c := range []struct {
		name       string
		cred, list []byte
		now        time.Time
		opts       []Option
		want       error
	}{
		{"tampered", tampered, good, now, nil, ErrProof},
		{"forged issuer", forged, good, now, nil, ErrIssuer},
		{"another issuer", issue(t, other, member(7)), good, now, []Option{ExpectIssuer(hubDID)}, ErrIssuer},
		{"another issuer's list", cred, otherList, now, nil, ErrIssuer},
		{"revoked", cred, list(t, hub, listURL, 7), now, nil, ErrRevoked},
		{"expired", cred, good, t0.AddDate(1, 0, 0), nil, ErrNotValid},
		{"not yet valid", cred, good, t0.Add(-time.Second), nil, ErrNotValid},
		{"list fails to verify", cred, badList, now, nil, ErrStatusList},
		{"another list of the issuer", cred, wrongURL, now, nil, ErrStatusList},
		{"no list", cred, nil, now, nil, ErrStatusList},
		{"not json", []byte("[]"), good, now, nil, ErrMalformed},
		{"too large", append(cred, bytes.Repeat([]byte(" "), MaxCredentialBytes)...), good, now, nil, ErrMalformed},
		{"unsigned", bytes.Replace(cred, []byte(`"proof"`), []byte(`"proof_"`), 1), good, now, nil, ErrProof},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyMembership(c.cred, c.list, c.now, c.opts...)
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
		})
	}
}

// A statusListIndex that is not a plain decimal index, a wrong type or
// purpose: malformed, whatever the proof says (re-signed by the hub, so
// only the check can refuse it).
func TestMembershipShape(t *testing.T) {
	hub := key(t, 1)
	cred := issue(t, hub, member(7))
	for _, c := range []struct{ from, to string }{
		{`"statusListIndex":"7"`, `"statusListIndex":"-1"`},
		{`"statusListIndex":"7"`, `"statusListIndex":"07"`},
		{`"statusListIndex":"7"`, `"statusListIndex":"0x7"`},
		{`"statusListIndex":"7"`, `"statusListIndex":"99999999999999999999"`},
		{`"statusPurpose":"revocation"`, `"statusPurpose":"suspension"`},
		{`"LmosGroupMembershipCredential"`, `"OtherCredential"`},
		{`"https://www.w3.org/ns/credentials/v2",`, ``},
		{`"thing":"urn:example:lamp",`, ``},
	} {
		doc := bytes.Replace(cred, []byte(c.from), []byte(c.to), 1)
		if bytes.Equal(doc, cred) {
			t.Fatalf("%s not in %s", c.from, cred)
		}
		doc, err := proof.Sign(doc, hub, t0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyMembership(doc, list(t, hub, listURL), t0.Add(time.Hour)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", c.to, err)
		}
	}
}

func gz(t testing.TB, b []byte) string {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return "u" + base64.RawURLEncoding.EncodeToString(buf.Bytes())
}

func TestDecodeList(t *testing.T) {
	// The example of W3C Bitstring Status List v1.0 (§2.2): 131,072 zero bits.
	bits, err := DecodeList("uH4sIAAAAAAAAA-3BMQEAAADCoPVPbQwfoAAAAAAAAAAAAAAAAAAAAIC3AYbSVKsAQAAA")
	if err != nil || len(bits) != StatusListBytes || bytes.Count(bits, []byte{0}) != StatusListBytes {
		t.Fatalf("the W3C example: %d bytes, %v", len(bits), err)
	}
	one := make([]byte, StatusListBytes)
	one[1] = 0x40 // entry 9
	enc, err := EncodeList(one)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeList(enc); err != nil || !bytes.Equal(got, one) {
		t.Fatalf("round trip: %v", err)
	}
	for name, enc := range map[string]string{
		"gzip bomb (1 MiB of zeros)": gz(t, make([]byte, 1<<20)),
		"one byte too many":          gz(t, make([]byte, StatusListBytes+1)),
		"too short":                  gz(t, make([]byte, StatusListBytes-1)),
		"no multibase prefix":        strings.TrimPrefix(enc, "u"),
		"base58 prefix":              "z" + enc[1:],
		"not base64":                 "u!!!!",
		"not gzip":                   "u" + base64.RawURLEncoding.EncodeToString(one),
		"too long":                   "u" + strings.Repeat("A", maxEncodedList),
		"truncated":                  enc[:len(enc)-4],
	} {
		if _, err := DecodeList(enc); !errors.Is(err, ErrStatusList) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestStatusListShape(t *testing.T) {
	hub := key(t, 1)
	good := list(t, hub, listURL, 3)
	sl, err := VerifyStatusList(good, t0)
	if err != nil || sl.ID != listURL || sl.Bits[0] != 0x10 || sl.Issuer != proof.DID(hub.Public().(ed25519.PublicKey)) {
		t.Fatalf("%+v %v", sl.ID, err)
	}
	if _, err := VerifyStatusList(good, t0.Add(-time.Second)); !errors.Is(err, ErrStatusList) {
		t.Fatalf("a list signed later than now: %v", err)
	}
	if sl.TTL != 30*time.Second || !sl.ValidUntil.Equal(t0.Add(listValidity)) {
		t.Fatalf("ttl %s, validUntil %s", sl.TTL, sl.ValidUntil)
	}
	if _, err := IssueStatusList(listURL, make([]byte, 10), t0, t0.Add(time.Hour), 0, hub); err == nil {
		t.Fatal("a short list was signed")
	}
	if _, err := IssueStatusList(listURL, make([]byte, StatusListBytes), t0, t0, 0, hub); err == nil {
		t.Fatal("a list valid for no time was signed")
	}
	// The wire shape: validUntil, and ttl in milliseconds (Bitstring
	// Status List v1.0 §2.2).
	var doc struct {
		ValidUntil string `json:"validUntil"`
		Subject    struct {
			TTL json.Number `json:"ttl"`
		} `json:"credentialSubject"`
	}
	if err := json.Unmarshal(good, &doc); err != nil || doc.ValidUntil != "2026-11-24T06:00:00Z" || doc.Subject.TTL != "30000" {
		t.Fatalf("%s: %v", good, err)
	}
}

// A list fetched before a revocation stops verifying at its validUntil
// (issue 24 point 4: one without a validUntil verified forever, so an
// old copy replayed over plain HTTP hid every later revocation). A list
// without validUntil, or with a malformed ttl, is refused; so is one the
// hub re-signed without validUntil.
func TestStaleStatusListRefused(t *testing.T) {
	hub := key(t, 1)
	cred := issue(t, hub, member(7))
	before := list(t, hub, listURL)   // fetched while the member was a member
	after := list(t, hub, listURL, 7) // the hub revoked entry 7
	if _, err := VerifyMembership(cred, after, t0.Add(time.Minute)); !errors.Is(err, ErrRevoked) {
		t.Fatalf("the current list: %v", err)
	}
	if _, err := VerifyMembership(cred, before, t0.Add(listValidity-time.Second)); err != nil {
		t.Fatalf("the old list within its validity: %v", err)
	}
	for _, now := range []time.Time{t0.Add(listValidity), t0.Add(listValidity + time.Hour)} {
		if _, err := VerifyMembership(cred, before, now); !errors.Is(err, ErrStatusList) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("the old list at %s: %v", now, err)
		}
	}
	// Re-signed by the hub's key without validUntil, or with a bad ttl:
	// the proof holds, the list is refused all the same.
	for name, edit := range map[string][2]string{
		"no validUntil":  {`"validUntil":"2026-11-24T06:00:00Z",`, ``},
		"ttl negative":   {`"ttl":30000`, `"ttl":-1`},
		"ttl fraction":   {`"ttl":30000`, `"ttl":1.5`},
		"ttl string":     {`"ttl":30000`, `"ttl":"30000"`},
		"ttl huge":       {`"ttl":30000`, `"ttl":99999999999999999999`},
		"until not date": {`"validUntil":"2026-11-24T06:00:00Z"`, `"validUntil":"tomorrow"`},
		"until before":   {`"validUntil":"2026-11-24T06:00:00Z"`, `"validUntil":"2026-11-24T03:00:00Z"`},
	} {
		doc := bytes.Replace(before, []byte(edit[0]), []byte(edit[1]), 1)
		if bytes.Equal(doc, before) {
			t.Fatalf("%s: %s not in %s", name, edit[0], before)
		}
		doc, err := proof.Sign(bytes.Replace(doc, []byte(`,"proof"`), []byte(`,"_proof"`), 1), hub, t0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyMembership(cred, doc, t0.Add(time.Minute)); !errors.Is(err, ErrStatusList) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzVerifyMembership(f *testing.F) {
	hub := key(f, 1)
	cred := issue(f, hub, member(5))
	sl := list(f, hub, listURL, 5)
	f.Add(cred, sl)
	f.Add(bytes.Replace(cred, []byte("living"), []byte("dying"), 1), sl)
	f.Add([]byte(`{"@context":["https://www.w3.org/ns/credentials/v2"],"type":"VerifiableCredential"}`), []byte(`{}`))
	f.Add([]byte(`{"proof":[]}`), []byte(`{"credentialSubject":{"encodedList":"uH4sIAAAAAAAAA"}}`))
	f.Add(cred, bytes.Replace(sl, []byte(`"ttl":30000`), []byte(`"ttl":1e99`), 1))
	f.Add(cred, bytes.Replace(sl, []byte(`"validUntil":"2026-11-24T06:00:00Z",`), nil, 1))
	f.Add(cred, []byte(`{"validUntil":"9999-12-31T23:59:59Z","credentialSubject":{"ttl":[1]}}`))
	f.Fuzz(func(t *testing.T, c, l []byte) {
		m, err := VerifyMembership(c, l, t0.Add(time.Hour))
		if err == nil && (m.Issuer == "" || m.StatusIndex < 0) {
			t.Fatalf("verified %+v", m)
		}
	})
}

// FuzzVerifyStatusList: whatever list a verifier is given, it is refused
// or it is a list of the full size, valid now, with a ttl in range.
func FuzzVerifyStatusList(f *testing.F) {
	hub := key(f, 1)
	sl := list(f, hub, listURL, 5)
	f.Add(sl)
	f.Add(bytes.Replace(sl, []byte(`"ttl":30000`), []byte(`"ttl":-5`), 1))
	f.Add(bytes.Replace(sl, []byte(`"ttl":30000`), []byte(`"ttl":1e3`), 1))
	f.Add(bytes.Replace(sl, []byte(`"validUntil":"2026-11-24T06:00:00Z",`), nil, 1))
	f.Add([]byte(`{"validUntil":"2030-01-01T00:00:00Z","credentialSubject":{"ttl":null,"encodedList":"u"}}`))
	now := t0.Add(time.Hour)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := VerifyStatusList(b, now)
		if err != nil {
			return
		}
		if len(got.Bits) != StatusListBytes || !now.Before(got.ValidUntil) || got.TTL < 0 || got.TTL > maxTTL || got.Issuer == "" {
			t.Fatalf("accepted %+v", got)
		}
	})
}

func FuzzDecodeList(f *testing.F) {
	f.Add("uH4sIAAAAAAAAA-3BMQEAAADCoPVPbQwfoAAAAAAAAAAAAAAAAAAAAIC3AYbSVKsAQAAA")
	f.Add(gz(f, make([]byte, 1<<16)))
	f.Add("u")
	f.Fuzz(func(t *testing.T, enc string) {
		bits, err := DecodeList(enc)
		if err == nil && len(bits) != StatusListBytes {
			t.Fatalf("%d bytes", len(bits))
		}
	})
}

func TestAllowClockSkew(t *testing.T) {
	hub := key(t, 1)
	cred, sl := issue(t, hub, member(1)), list(t, hub, listURL)
	early := t0.Add(-time.Minute)
	if _, err := VerifyMembership(cred, sl, early); !errors.Is(err, ErrNotValid) {
		t.Fatalf("a minute early: %v", err)
	}
	if _, err := VerifyMembership(cred, sl, early, AllowClockSkew(2*time.Minute)); err != nil {
		t.Fatalf("a minute early, two allowed: %v", err)
	}
	if _, err := VerifyMembership(cred, sl, t0.AddDate(1, 0, 0), AllowClockSkew(time.Hour)); !errors.Is(err, ErrNotValid) {
		t.Fatalf("expired, with skew: %v", err)
	}
}
