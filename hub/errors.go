package hub

import (
	"errors"
	"fmt"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Error codes. Their values are the problem codes of the wire contract, so
// package lmos's one table gives each its status on every door.
const (
	EINVALID      = lmos.CodeInvalid      // the request or document is malformed or fails validation
	ENOTFOUND     = lmos.CodeNotFound     // no such Thing, token or resource
	ECONFLICT     = lmos.CodeConflict     // the request contradicts the current state
	EUNAUTHORIZED = lmos.CodeUnauthorized // missing, unknown or revoked credentials
	EFORBIDDEN    = lmos.CodeForbidden    // authenticated but not allowed
	ETOOLARGE     = lmos.CodeTooLarge     // body or document over its limit
	EUNSUPPORTED  = lmos.CodeUnsupported  // media type or operation not supported
	ERATELIMIT    = lmos.CodeRateLimit    // the client writes too fast
	EUNAVAILABLE  = lmos.CodeUnavailable  // a component is down or shutting down (transient)
	EFULL         = lmos.CodeFull         // a configured capacity is used up (lasting)
	EMETHOD       = lmos.CodeMethod       // the resource exists, but not with this method
	EFAILED       = lmos.CodeFailed       // the Thing answered an interaction with a failure
	ETIMEOUT      = lmos.CodeTimeout      // the Thing gave no final answer in time
	EINTERNAL     = lmos.CodeInternal     // anything unexpected
)

// FieldError names one invalid member of a document by JSON pointer; it is
// the problem document's validation error.
type FieldError = lmos.FieldError

// Error is the hub's application error: a code, a message safe to show to a
// client, optional field errors, and the wrapped cause for logs.
type Error struct {
	Code    string
	Message string
	Fields  []FieldError
	// Limit names the limit or quota that refused the request, as its
	// setting (for example "registry.maxThings"), so refusals can be
	// counted by reason; "" when no configured limit was hit.
	Limit string
	Err   error
}

func (e *Error) Error() string {
	if e.Err != nil {
		if e.Message == "" {
			return e.Err.Error()
		}
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL
// for any other non-nil error and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// RefusalReason names why err refused a request, for metrics: the Limit of
// the first *Error in its chain when one is set, else its code.
func RefusalReason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		if e.Limit != "" {
			return e.Limit
		}
		return e.Code
	}
	if err == nil {
		return ""
	}
	return EINTERNAL
}

// ErrorMessage returns the client-safe message of err.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Message != "" {
		return e.Message
	}
	return "internal error"
}

// ErrorFields returns the field errors carried by err, if any.
func ErrorFields(err error) []FieldError {
	var e *Error
	if errors.As(err, &e) {
		return e.Fields
	}
	return nil
}
