package proof

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// canonicalOf is canonical on a copy of s.
func canonicalOf(s string) (string, error) {
	b, err := canonical([]byte(s))
	return string(b), err
}

// RFC 8785's own examples: §3.2.2 (literals, numbers, string escaping) and
// §3.2.3 (members sorted by UTF-16 code units: U+1F600 as the surrogate
// pair D83D DE00 sorts before U+FB33, unlike by code point or UTF-8).
func TestCanonicalRFC8785Examples(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`, "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{`{"b":{"z":1,"a":[{"y":2,"x":"\u0041"}]},"a":"\u2028<>&"}`, "{\"a\":\"\u2028<>&\",\"b\":{\"a\":[{\"x\":\"A\",\"y\":2}],\"z\":1}}"},
	} {
		got, err := canonicalOf(c.in)
		if err != nil || got != c.want {
			t.Errorf("JCS of %s:\n got %s (%v)\nwant %s", c.in, got, err, c.want)
		}
	}
}

// RFC 8785 Appendix B: IEEE 754 doubles (by their bits) and the text JCS
// gives each (ECMAScript's Number.prototype.toString).
func TestCanonicalRFC8785Numbers(t *testing.T) {
	for _, c := range []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	} {
		f := math.Float64frombits(c.bits)
		for _, in := range []string{strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatFloat(f, 'e', 20, 64)} {
			got, err := canonicalOf("[" + in + "]")
			if err != nil || got != "["+c.want+"]" {
				t.Errorf("%016x as %s: got %s (%v), want [%s]", c.bits, in, got, err, c.want)
			}
		}
	}
	// Integers past 2^53 are read as the nearest double, as JCS says.
	if got, err := canonicalOf(`[9007199254740993, 1e2, -0.0, 100E-2]`); err != nil || got != `[9007199254740992,100,0,1]` {
		t.Errorf("got %s (%v)", got, err)
	}
}

// What RFC 8785 (I-JSON, RFC 7493) refuses to canonicalize.
func TestCanonicalRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"duplicate names":      `{"a":1,"a":2}`,
		"nested duplicate":     `{"a":{"b":1,"b":1}}`,
		"invalid UTF-8":        "{\"a\":\"\xff\"}",
		"a lone surrogate":     `{"a":"\ud800"}`,
		"beyond a double":      `[1e400]`,
		"not JSON":             `{"a":}`,
		"data after the value": `{} {}`,
	} {
		if got, err := canonicalOf(in); err == nil {
			t.Errorf("%s: %s canonicalized as %s", name, in, got)
		}
	}
}

// The proof is cut out of the signed bytes wherever it stands: first (the
// comma after it goes), in the middle, last, in any layout; the rest is
// what was signed.
func TestVerifyProofAnywhere(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(nil)
	signed, err := Sign([]byte(`{"id":"urn:x","title":"X","n":[1,{"b":2}]}`), priv, time.Unix(1e9, 0))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(signed, []byte(`,"proof":`))
	proofMember := signed[i+1 : len(signed)-1]
	for name, doc := range map[string]string{
		"last":              string(signed),
		"first":             `{` + string(proofMember) + `,"id":"urn:x","title":"X","n":[1,{"b":2}]}`,
		"first, spaced":     "{\n  " + string(proofMember) + " \n ,\n \"id\":\"urn:x\",\"title\":\"X\",\"n\":[1,{\"b\":2}]\n}\n",
		"middle":            `{"id":"urn:x",` + string(proofMember) + `,"title":"X","n":[1,{"b":2}]}`,
		"middle, spaced":    "{ \"id\" : \"urn:x\" ,\t" + string(proofMember) + "\r\n, \"title\":\"X\",\"n\":[1,{\"b\":2}]}",
		"reordered members": `{"n":[1,{"b":2}],"title":"X",` + string(proofMember) + `,"id":"urn:x"}`,
	} {
		if _, err := Verify([]byte(doc)); err != nil {
			t.Errorf("%s: %v\n%s", name, err, doc)
		}
	}
	for name, doc := range map[string]string{
		"two proofs":            `{` + string(proofMember) + `,"id":"urn:x","title":"X","n":[1,{"b":2}],` + string(proofMember) + `}`,
		"duplicate name":        `{"id":"urn:x","title":"X","title":"X","n":[1,{"b":2}],` + string(proofMember) + `}`,
		"data after":            string(signed) + `{}`,
		"tampered, proof first": `{` + string(proofMember) + `,"id":"urn:x","title":"Y","n":[1,{"b":2}]}`,
	} {
		_, err := Verify([]byte(doc))
		switch {
		case err == nil:
			t.Errorf("%s: verified\n%s", name, doc)
		case name == "tampered, proof first" && !errors.Is(err, ErrInvalidSignature):
			t.Errorf("%s: %v, want an invalid signature", name, err)
		case name != "tampered, proof first" && !errors.Is(err, ErrMalformed):
			// The hub counts on it: a duplicate name is refused before any
			// signature is checked (the hub's preparation of a description).
			t.Errorf("%s: %v, want a malformed document", name, err)
		}
	}
}

// A proof member of the wrong JSON type is malformed, not a panic or a
// silent empty value.
func TestVerifyProofMemberTypes(t *testing.T) {
	for _, m := range []string{"type", "cryptosuite", "created", "verificationMethod", "proofPurpose", "proofValue"} {
		doc := `{"id":"urn:x","proof":{"type":"DataIntegrityProof","cryptosuite":"eddsa-jcs-2022","created":"2026-01-01T00:00:00Z",` +
			`"verificationMethod":"did:key:z6Mk","proofPurpose":"assertionMethod","proofValue":"z1",` + strings.Replace(`"M":7}}`, "M", m, 1)
		doc = strings.Replace(doc, `"`+m+`":"`, `"`+m+`-was":"`, 1)
		if _, err := Verify([]byte(doc)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s a number: %v", m, err)
		}
	}
}

// Whatever JSON object Sign accepts, in whatever layout and wherever an
// old proof stood, verifies once signed, and not once a byte of a member
// value changed.
func FuzzSignVerify(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(nil)
	f.Add([]byte(`{"id":"urn:x","title":"X","@context":"https://www.w3.org/2022/wot/td/v1.1"}`))
	f.Add([]byte(`{"proof":{"a":1} , "id":"urn:x","n":[1e2,-0.0,"\u00e9\ud83d\ude00"]}`))
	f.Add([]byte(" {\n\"@context\":[\"a\",{\"b\":\"c\"}],\"proof\":[],\"x\":{}}\n"))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		signed, err := Sign(doc, priv, time.Unix(1e9, 0))
		if err != nil {
			return
		}
		if _, err := Verify(signed); err != nil {
			t.Fatalf("%s signed as %s does not verify: %v", doc, signed, err)
		}
		i := bytes.Index(signed, []byte(`"title":"`))
		if i < 0 {
			return
		}
		bad := bytes.Clone(signed)
		bad[i+len(`"title":"`)] ^= 1
		if _, err := Verify(bad); err == nil {
			t.Fatalf("%s verifies after a change", bad)
		}
	})
}
