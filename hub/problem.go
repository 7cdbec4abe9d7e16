package hub

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
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
	EPRECONDITION: http.StatusPreconditionFailed,
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

// PeerProblem reads the problem object a Thing or peer sent (an agent's
// failure, an error message over WebSocket), keeping only well-typed
// members, cut to bounded lengths: a peer's text is passed on to consumers
// and logs. status may be a number or, as kotlin-wot sends it, a string; 0
// when absent.
func PeerProblem(obj map[string]any) Problem {
	get := func(k string, n int) string {
		s, _ := obj[k].(string)
		return Truncate(s, n)
	}
	p := Problem{Type: get("type", 512), Title: get("title", 512), Detail: get("detail", 4096), Instance: get("instance", 512)}
	switch s := obj["status"].(type) {
	case string:
		p.Status, _ = strconv.Atoi(s)
	default:
		if f, ok := number(s); ok {
			p.Status = int(f)
		}
	}
	return p
}

// Truncate cuts s to at most n bytes without splitting a character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
