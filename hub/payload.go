package hub

import (
	"errors"

	"github.com/eclipse-lmos/lmos-hub/internal/codec"
)

// DecodeValue decodes a JSON or CBOR payload (per contentType) into a JSON
// data-model value (internal/codec), a JSON one nested at most a little
// deeper than a TD may be. Errors are EINVALID.
func (d Decoder) DecodeValue(data []byte, contentType string) (any, error) {
	v, err := codec.Decode(data, contentType, d.limit()+payloadDepthSlack)
	return v, codecError(err)
}

// EncodeValue encodes a JSON data-model value as JSON or CBOR. A JSON
// number out of the float64 range (1e400) has no CBOR form this hub reads
// back: it is refused (EINVALID) rather than sent as text.
func EncodeValue(v any, contentType string) ([]byte, error) {
	b, err := codec.Encode(v, contentType)
	return b, codecError(err)
}

// Transcode converts a payload between JSON and CBOR (PROTOCOL §4.2). Same
// encodings pass through untouched once the payload is checked; an empty
// payload stays empty. Errors are EINVALID.
func (d Decoder) Transcode(data []byte, from, to string) ([]byte, error) {
	b, err := codec.Transcode(data, from, to, d.limit()+payloadDepthSlack)
	return b, codecError(err)
}

// codecError gives the codec's refusals the hub's code: EINVALID, and a
// payload nested too deep is refused like a TD (registry.maxDepth).
func codecError(err error) error {
	if err == nil {
		return nil
	}
	var d *codec.DepthError
	if errors.As(err, &d) {
		return depthError(d.Pointer, d.Limit)
	}
	var e *codec.Error
	if errors.As(err, &e) {
		return &Error{Code: EINVALID, Message: e.Message, Err: e.Err}
	}
	return err
}
