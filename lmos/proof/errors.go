package proof

import (
	"errors"
	"fmt"
)

// The kinds of failure; every error of this package wraps one of them, so a
// caller maps them to its own codes with errors.Is.
var (
	// ErrNoProof: the document carries no proof member.
	ErrNoProof = errors.New("no proof")
	// ErrMalformed: the proof, a key or a DID is not well formed.
	ErrMalformed = errors.New("malformed proof")
	// ErrUnsupported: a proof type, cryptosuite, purpose or DID method this
	// package does not verify.
	ErrUnsupported = errors.New("unsupported proof")
	// ErrInvalidSignature: well formed, but the signature does not match
	// the document and the key.
	ErrInvalidSignature = errors.New("invalid signature")
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}
