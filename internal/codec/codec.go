// Package codec turns payloads between JSON and CBOR for the hub's
// interactions (PROTOCOL §4.2): it decodes either into the JSON data model,
// encodes that model as either, and transcodes, with the wire's CBOR limits
// (package lmos) and a nesting bound on JSON. It knows nothing of Things;
// the hub maps its errors to problems.
package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/fxamacker/cbor/v2"
)

// Error is a payload the codec refuses. Message is safe to show to a
// client; Err is the cause for logs, if any.
type Error struct {
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Message
	}
	return e.Message + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...)}
}

// DepthError is a JSON payload nested deeper than the limit Decode was
// given; Pointer names the first container that is too deep.
type DepthError struct {
	Pointer string
	Limit   int
}

func (e *DepthError) Error() string {
	return fmt.Sprintf("the payload nests deeper than %d levels at %q", e.Limit, e.Pointer)
}

// Decode decodes a JSON or CBOR payload (per contentType) into a JSON
// data-model value: CBOR with the wire's limits, JSON nested at most
// maxDepth levels. Errors are *Error or *DepthError.
func Decode(data []byte, contentType string, maxDepth int) (any, error) {
	var v any
	if lmos.MediaOf(contentType) == lmos.MediaCBOR {
		if err := lmos.DecodeCBOR(data, &v); err != nil {
			return nil, &Error{Message: "invalid CBOR payload", Err: err}
		}
		return jsonModel(v)
	}
	// encoding/json nests up to 10,000 levels; bound it before building
	// maps.
	if ptr, deep := jsonx.TooDeep(data, maxDepth); deep {
		return nil, &DepthError{Pointer: ptr, Limit: maxDepth}
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, &Error{Message: "invalid JSON payload", Err: err}
	}
	if d.More() {
		return nil, errorf("invalid JSON payload: data after the value")
	}
	return v, nil
}

// jsonModel checks that a decoded CBOR value fits the JSON data model:
// byte strings become base64 text (as encoding/json does), undefined
// becomes null; nothing else is needed since map keys are text already.
func jsonModel(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			m, err := jsonModel(e)
			if err != nil {
				return nil, err
			}
			x[k] = m
		}
	case []any:
		for i, e := range x {
			m, err := jsonModel(e)
			if err != nil {
				return nil, err
			}
			x[i] = m
		}
	case cbor.SimpleValue:
		return nil, errorf("invalid CBOR payload: simple value %d has no JSON form", x)
	}
	return v, nil
}

// Encode encodes a JSON data-model value as JSON or CBOR. A JSON number out
// of the float64 range (1e400) has no CBOR form this hub reads back: it is
// refused rather than sent as text. Errors are *Error.
func Encode(v any, contentType string) ([]byte, error) {
	if lmos.MediaOf(contentType) == lmos.MediaCBOR {
		v, err := cborNumbers(v)
		if err != nil {
			return nil, err
		}
		b, err := lmos.EncodeCBOR(v)
		if err != nil {
			return nil, &Error{Message: "cannot encode the payload as CBOR", Err: err}
		}
		return b, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &Error{Message: "cannot encode the payload as JSON", Err: err}
	}
	return b, nil
}

// cborNumbers replaces json.Number (which CBOR would encode as text) by an
// integer or a float.
func cborNumbers(v any) (any, error) {
	var err error
	switch x := v.(type) {
	case json.Number:
		return cborNumber(x)
	case map[string]any:
		for k, e := range x {
			if x[k], err = cborNumbers(e); err != nil {
				return nil, err
			}
		}
	case []any:
		for i, e := range x {
			if x[i], err = cborNumbers(e); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// cborNumber gives the JSON number n the CBOR form that reads back as the
// same number: an integer when it is one CBOR holds, else a float. (It is a
// conversion, not a reader: jsonx.Number reads any number as a float64.)
func cborNumber(n json.Number) (any, error) {
	if i, err := n.Int64(); err == nil {
		if i == 0 && strings.HasPrefix(string(n), "-") {
			return math.Copysign(0, -1), nil // -0 is a float
		}
		return i, nil
	}
	if !strings.ContainsAny(string(n), ".eE") {
		// An integer beyond int64 that CBOR holds natively (-2^64 … 2^64-1)
		// stays exact; larger ones become floats, as JSON numbers are.
		if b, ok := new(big.Int).SetString(string(n), 10); ok {
			if b.IsUint64() || new(big.Int).Not(b).IsUint64() {
				return b, nil
			}
		}
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) {
		return nil, errorf("cannot encode the payload as CBOR: the number %.32s is out of range", string(n))
	}
	return f, nil
}

// Transcode converts a payload between JSON and CBOR (PROTOCOL §4.2). Same
// encodings pass through untouched once the payload is checked (valid JSON;
// well-formed CBOR within the limits above); an empty payload stays empty.
// A JSON payload nests at most maxDepth levels. Errors are as Decode's.
func Transcode(data []byte, from, to string, maxDepth int) ([]byte, error) {
	from, to = lmos.MediaOf(from), lmos.MediaOf(to)
	if len(data) == 0 {
		return data, nil
	}
	if from == to {
		if from == lmos.MediaCBOR {
			if err := lmos.WellformedCBOR(data); err != nil {
				return nil, &Error{Message: "invalid CBOR payload", Err: err}
			}
		} else if !json.Valid(data) {
			return nil, errorf("invalid JSON payload")
		}
		return data, nil
	}
	v, err := Decode(data, from, maxDepth)
	if err != nil {
		return nil, err
	}
	return Encode(v, to)
}
