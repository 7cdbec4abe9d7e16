package agent

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Content types the agent encodes and decodes (PROTOCOL §4.2).
const (
	JSON = lmos.MediaJSON
	CBOR = lmos.MediaCBOR
)

// ErrorTypeBase starts the type of every LMOS problem (PROTOCOL §10).
const ErrorTypeBase = lmos.ErrorTypeBase

// Value is a payload received over MQTT: an action's input or output, a
// property value, event data. Decode it with Decode.
type Value struct {
	Payload []byte
	// ContentType is the payload's media type: application/json or
	// application/cbor (the MQTT 5 Content Type, else the form's).
	ContentType string
}

// Input is the input of an action or a property write.
type Input = Value

// Output is the result of an action, or one of its partial results.
type Output = Value

// IsCBOR reports whether the value is CBOR.
func (v Value) IsCBOR() bool { return isCBOR(v.ContentType) }

// Decode decodes the payload into dst (as encoding/json would; CBOR maps
// onto the same struct fields). An empty or malformed payload is a
// *Problem with status 400, so a handler can return the error as it is.
func (v Value) Decode(dst any) error {
	if len(v.Payload) == 0 {
		return NewProblem(http.StatusBadRequest, "the payload is empty")
	}
	var err error
	if v.IsCBOR() {
		err = lmos.DecodeCBOR(v.Payload, dst)
	} else {
		err = json.Unmarshal(v.Payload, dst)
	}
	if err != nil {
		return NewProblem(http.StatusBadRequest, fmt.Sprintf("cannot decode the payload: %v", err))
	}
	return nil
}

// JSON returns the payload as JSON text, transcoding CBOR.
func (v Value) JSON() ([]byte, error) {
	if !v.IsCBOR() {
		return v.Payload, nil
	}
	if len(v.Payload) == 0 {
		return nil, nil
	}
	var x any
	if err := v.Decode(&x); err != nil {
		return nil, err
	}
	b, err := json.Marshal(x)
	if err != nil {
		return nil, fmt.Errorf("cannot transcode CBOR to JSON: %w", err)
	}
	return b, nil
}

// String returns the payload as JSON text, for logs.
func (v Value) String() string {
	b, err := v.JSON()
	if err != nil {
		return fmt.Sprintf("<%d bytes of %s>", len(v.Payload), v.ContentType)
	}
	return string(b)
}

// Problem is an RFC 9457 problem: what a failed action result and a
// rejected join carry. A handler returning a *Problem (or an error
// wrapping one) fails with exactly that problem.
type Problem = lmos.Problem

// FieldError is one validation error of a rejected document.
type FieldError = lmos.FieldError

// NewProblem returns a problem with the LMOS type and title for status.
func NewProblem(status int, detail string) *Problem {
	p := lmos.ProblemFor(status, detail)
	if p.Title == "" {
		// A status outside the LMOS table keeps its HTTP reason phrase.
		p.Title = http.StatusText(status)
	}
	return &p
}

// isCBOR reports whether contentType is exactly application/cbor, the one
// CBOR type an agent speaks.
func isCBOR(contentType string) bool { return lmos.MediaType(contentType) == CBOR }

// encode encodes v as contentType (JSON unless CBOR). A Value is sent as it
// is when its type matches; nil is an empty payload.
func encode(v any, contentType string) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case Value:
		if x.IsCBOR() == isCBOR(contentType) {
			return x.Payload, nil
		}
		var y any
		if err := x.Decode(&y); err != nil {
			return nil, err
		}
		v = y
	case json.RawMessage:
		if !isCBOR(contentType) {
			return x, nil
		}
		var y any
		if err := json.Unmarshal(x, &y); err != nil {
			return nil, fmt.Errorf("cannot decode raw JSON: %w", err)
		}
		v = y
	}
	var b []byte
	var err error
	if isCBOR(contentType) {
		b, err = lmos.EncodeCBOR(v)
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot encode %T as %s: %w", v, contentType, err)
	}
	return b, nil
}
