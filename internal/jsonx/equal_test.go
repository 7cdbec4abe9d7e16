package jsonx

import (
	"encoding/json"
	"math"
	"math/big"
	"testing"
)

func TestEqual(t *testing.T) {
	for _, c := range []struct {
		a, b any
		want bool
	}{
		{json.Number("1"), json.Number("1"), true},
		{json.Number("1"), json.Number("1.0"), false}, // a rewritten number is a change
		{json.Number("1"), float64(1), false},
		{float64(1), json.Number("1"), false},
		{int64(1), float64(1), true},
		{big.NewInt(7), uint64(7), true},
		{nil, nil, true},
		{nil, false, false},
		{"a", "a", true},
		{"1", json.Number("1"), false},
		{true, true, true},
		{map[string]any{"a": []any{json.Number("1"), nil}}, map[string]any{"a": []any{json.Number("1"), nil}}, true},
		{map[string]any{"a": nil}, map[string]any{"b": nil}, false},
		{map[string]any{"a": nil}, map[string]any{}, false},
		{[]any{"x"}, []any{"x", "y"}, false},
		{[]any{}, map[string]any{}, false},
	} {
		if got := Equal(c.a, c.b); got != c.want {
			t.Errorf("Equal(%#v, %#v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestNumber(t *testing.T) {
	for _, c := range []struct {
		v    any
		want float64
		ok   bool
	}{
		{json.Number("2.5"), 2.5, true},
		{json.Number("1e400"), math.Inf(1), true}, // a number, not a finite one
		{json.Number("-1e400"), math.Inf(-1), true},
		{json.Number("abc"), 0, false},
		{float64(3), 3, true},
		{float32(0.5), 0.5, true},
		{int64(-4), -4, true},
		{uint64(5), 5, true},
		{6, 6, true},
		{new(big.Int).Lsh(big.NewInt(1), 70), math.Ldexp(1, 70), true},
		{"7", 0, false},
		{nil, 0, false},
	} {
		got, ok := Number(c.v)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("Number(%#v) = %v %v, want %v %v", c.v, got, ok, c.want, c.ok)
		}
	}
}
