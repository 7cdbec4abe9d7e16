package hub

import (
	"context"
	"errors"
	"net/http"
)

// ErrorTypeBase prefixes problem type URIs, as the LMOS error types do.
const ErrorTypeBase = "https://eclipse.dev/lmos/protocol/v1/errors#"

// Problem is an RFC 9457 problem object: how every transport (HTTP, MQTT
// join results, WebSocket errors) reports a failure, with the HTTP status
// the error code stands for.
type Problem struct {
	Type             string       `json:"type"`
	Title            string       `json:"title"`
	Status           int          `json:"status"`
	Detail           string       `json:"detail,omitempty"`
	Instance         string       `json:"instance,omitempty"`
	ValidationErrors []FieldError `json:"validationErrors,omitempty"`
}

// statusOf is the one table mapping error codes to HTTP statuses.
var statusOf = map[string]int{
	EINVALID:      http.StatusBadRequest,
	EUNAUTHORIZED: http.StatusUnauthorized,
	EFORBIDDEN:    http.StatusForbidden,
	ENOTFOUND:     http.StatusNotFound,
	EMETHOD:       http.StatusMethodNotAllowed,
	ECONFLICT:     http.StatusConflict,
	ETOOLARGE:     http.StatusRequestEntityTooLarge,
	EUNSUPPORTED:  http.StatusUnsupportedMediaType,
	ERATELIMIT:    http.StatusTooManyRequests,
	EINTERNAL:     http.StatusInternalServerError,
	EUNAVAILABLE:  http.StatusServiceUnavailable,
	EFULL:         http.StatusInsufficientStorage,
	EFAILED:       http.StatusBadGateway,
	ETIMEOUT:      http.StatusGatewayTimeout,
}

// ProblemOf describes err as a problem. A cancelled or timed-out context
// that no *Error explains counts as unavailable; unknown errors as
// internal, without their text.
func ProblemOf(err error) Problem {
	var e *Error
	if !errors.As(err, &e) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		err = &Error{Code: EUNAVAILABLE, Message: "the request was cancelled or timed out", Err: err}
	}
	code := ErrorCode(err)
	status, ok := statusOf[code]
	if !ok {
		code, status = EINTERNAL, http.StatusInternalServerError
	}
	return Problem{
		Type:             ErrorTypeBase + code,
		Title:            http.StatusText(status),
		Status:           status,
		Detail:           ErrorMessage(err),
		ValidationErrors: ErrorFields(err),
	}
}
