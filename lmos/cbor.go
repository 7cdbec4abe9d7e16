package lmos

import (
	"reflect"

	"github.com/fxamacker/cbor/v2"
)

// The limits every CBOR payload and frame is decoded with, by the hub and
// by agents alike (PROTOCOL §10): a payload is the CBOR data model of a
// JSON value, and the input may be hostile.
const (
	// MaxCBORDepth bounds the nesting of arrays and maps.
	MaxCBORDepth = 32
	// MaxCBORItems bounds the elements of one array and the pairs of one map.
	MaxCBORItems = 4096
)

// cborDec decodes with the limits above: text map keys, no duplicate keys,
// valid UTF-8, and no tags, which have no JSON form (a tag would reach a
// JSON consumer as something else than the sender meant).
var cborDec = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		MaxNestedLevels:  MaxCBORDepth,
		MaxArrayElements: MaxCBORItems,
		MaxMapPairs:      MaxCBORItems,
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		TagsMd:           cbor.TagsForbidden,
		IndefLength:      cbor.IndefLengthAllowed,
		DefaultMapType:   reflect.TypeOf(map[string]any(nil)),
		UTF8:             cbor.UTF8RejectInvalid,
		// Integers beyond int64 (down to -2^64) decode to *big.Int, whose
		// MarshalJSON writes the digits: they stay exact numbers in JSON (a
		// big.Int value would marshal as {}).
		BigIntDec: cbor.BigIntDecodePointer,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// DecodeCBOR decodes one CBOR data item into v within the limits above;
// data after the item is an error.
func DecodeCBOR(data []byte, v any) error { return cborDec.Unmarshal(data, v) }

// WellformedCBOR checks that data is one well-formed CBOR data item within
// the limits above, without decoding it.
func WellformedCBOR(data []byte) error { return cborDec.Wellformed(data) }

// cborEnc is the one CBOR encoding of the hub and agents: floats in the
// shortest form that keeps their value (float16 where exact), map keys in
// the order given (PROTOCOL §10).
var cborEnc = func() cbor.EncMode {
	em, err := cbor.EncOptions{ShortestFloat: cbor.ShortestFloat16, Sort: cbor.SortNone}.EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// EncodeCBOR encodes v as CBOR in the one encoding above.
func EncodeCBOR(v any) ([]byte, error) { return cborEnc.Marshal(v) }
