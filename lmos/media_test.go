package lmos

import "testing"

func TestMediaTypeAndMediaOf(t *testing.T) {
	cases := []struct{ in, mt, of string }{
		{"", "", MediaJSON},
		{"application/json", "application/json", MediaJSON},
		{"application/cbor", "application/cbor", MediaCBOR},
		{" Application/CBOR ; charset=x", "application/cbor", MediaCBOR},
		{"application/td+cbor", "application/td+cbor", MediaCBOR},
		{"application/td+json; x=1", "application/td+json", MediaJSON},
		{"text/plain", "text/plain", MediaJSON},
		{"application/cbor-seq", "application/cbor-seq", MediaJSON},
		{"application/problem+json", MediaProblem, MediaJSON},
	}
	for _, c := range cases {
		if got := MediaType(c.in); got != c.mt {
			t.Errorf("MediaType(%q) = %q, want %q", c.in, got, c.mt)
		}
		if got := MediaOf(c.in); got != c.of {
			t.Errorf("MediaOf(%q) = %q, want %q", c.in, got, c.of)
		}
	}
}
