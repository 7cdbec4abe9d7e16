package lmos

import (
	"bytes"
	"math/big"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// nested is depth arrays of one element around 0.
func nested(depth int) []byte { return append(bytes.Repeat([]byte{0x81}, depth), 0) }

// array is a CBOR array of n zeros.
func array(n int) []byte {
	b, _ := cbor.Marshal(make([]int, n))
	return b
}

// object is a CBOR map of n distinct text keys.
func object(n int) []byte {
	m := make(map[string]int, n)
	for i := range n {
		m[big.NewInt(int64(i)).String()] = i
	}
	b, _ := cbor.Marshal(m)
	return b
}

func TestCBORLimitsRefuse(t *testing.T) {
	refused := map[string][]byte{
		"nesting over the limit":  nested(MaxCBORDepth + 1),
		"array over the limit":    array(MaxCBORItems + 1),
		"map over the limit":      object(MaxCBORItems + 1),
		"a tag (epoch time)":      {0xc1, 0x1a, 0x5f, 0x00, 0x00, 0x00},
		"a tag (big number)":      {0xc2, 0x49, 1, 0, 0, 0, 0, 0, 0, 0, 0},
		"a duplicate map key":     {0xa2, 0x61, 'a', 0x01, 0x61, 'a', 0x02},
		"invalid UTF-8 text":      {0x62, 0xc3, 0x28},
		"data after the item":     {0x01, 0x02},
		"a truncated item":        {0x82, 0x01},
		"an array claiming 2^32":  {0x9a, 0xff, 0xff, 0xff, 0xff},
		"a byte string past end":  {0x5a, 0x7f, 0xff, 0xff, 0xff, 0x00},
		"a reserved minor (0x1c)": {0x1c},
	}
	for name, data := range refused {
		var v any
		if err := DecodeCBOR(data, &v); err == nil {
			t.Errorf("%s: DecodeCBOR accepted % x… as a %T", name, data[:min(len(data), 16)], v)
		}
		if name != "a duplicate map key" && name != "invalid UTF-8 text" {
			if err := WellformedCBOR(data); err == nil {
				t.Errorf("%s: WellformedCBOR accepted it", name)
			}
		}
	}
}

func TestCBORLimitsAccept(t *testing.T) {
	accepted := map[string][]byte{
		"nesting at the limit": nested(MaxCBORDepth),
		"array at the limit":   array(MaxCBORItems),
		"map at the limit":     object(MaxCBORItems),
		"indefinite length":    {0x9f, 0x01, 0x02, 0xff},
	}
	for name, data := range accepted {
		var v any
		if err := DecodeCBOR(data, &v); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := WellformedCBOR(data); err != nil {
			t.Errorf("%s: WellformedCBOR: %v", name, err)
		}
	}
	// Maps decode with text keys; integers beyond int64 stay exact.
	var v any
	if err := DecodeCBOR([]byte{0xa1, 0x61, 'n', 0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, &v); err != nil {
		t.Fatal(err)
	}
	m, ok := v.(map[string]any)
	if n, isBig := m["n"].(*big.Int); !ok || !isBig || n.String() != "-18446744073709551616" {
		t.Errorf("decoded %#v", v)
	}
}

// FuzzDecodeCBOR: whatever the input, a decoded value stays within the
// limits, and what decodes is well-formed.
func FuzzDecodeCBOR(f *testing.F) {
	for _, s := range [][]byte{
		{}, {0x00}, {0xf6}, {0xa1, 0x61, 'a', 0x01}, {0x9f, 0x01, 0xff}, {0xc1, 0x00},
		nested(MaxCBORDepth), nested(MaxCBORDepth + 1), array(3),
		{0xa2, 0x61, 'a', 0x01, 0x61, 'a', 0x02}, {0x62, 0xc3, 0x28}, {0xfb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0},
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if DecodeCBOR(data, &v) != nil {
			return
		}
		if err := WellformedCBOR(data); err != nil {
			t.Fatalf("decoded % x but WellformedCBOR says %v", data, err)
		}
		var check func(v any, depth int)
		check = func(v any, depth int) {
			if depth > MaxCBORDepth {
				t.Fatalf("decoded a value nested %d deep", depth)
			}
			switch x := v.(type) {
			case []any:
				if len(x) > MaxCBORItems {
					t.Fatalf("decoded an array of %d", len(x))
				}
				for _, e := range x {
					check(e, depth+1)
				}
			case map[string]any:
				if len(x) > MaxCBORItems {
					t.Fatalf("decoded a map of %d", len(x))
				}
				for _, e := range x {
					check(e, depth+1)
				}
			case cbor.Tag, cbor.RawTag:
				t.Fatalf("decoded a tag %v", x)
			}
		}
		check(v, 0)
	})
}
