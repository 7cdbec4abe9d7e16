package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// errorTypeBase prefixes problem type URIs, as the LMOS error types do.
const errorTypeBase = "https://eclipse.dev/lmos/protocol/v1/errors#"

// statusOf is the one table mapping hub error codes to HTTP statuses.
var statusOf = map[string]int{
	hub.EINVALID:      http.StatusBadRequest,
	hub.EUNAUTHORIZED: http.StatusUnauthorized,
	hub.EFORBIDDEN:    http.StatusForbidden,
	hub.ENOTFOUND:     http.StatusNotFound,
	hub.EMETHOD:       http.StatusMethodNotAllowed,
	hub.EFULL:         http.StatusInsufficientStorage,
	hub.ECONFLICT:     http.StatusConflict,
	hub.ETOOLARGE:     http.StatusRequestEntityTooLarge,
	hub.EUNSUPPORTED:  http.StatusUnsupportedMediaType,
	hub.ERATELIMIT:    http.StatusTooManyRequests,
	hub.EUNAVAILABLE:  http.StatusServiceUnavailable,
	hub.EINTERNAL:     http.StatusInternalServerError,
}

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type             string           `json:"type"`
	Title            string           `json:"title"`
	Status           int              `json:"status"`
	Detail           string           `json:"detail,omitempty"`
	Instance         string           `json:"instance,omitempty"`
	ValidationErrors []hub.FieldError `json:"validationErrors,omitempty"`
}

// writeError answers with the problem for err and logs what the client
// does not see.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := hub.ErrorCode(err)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		code = hub.EUNAVAILABLE
		err = &hub.Error{Code: code, Message: "the request was cancelled or timed out", Err: err}
	}
	status, ok := statusOf[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	p := Problem{
		Type:             errorTypeBase + code,
		Title:            http.StatusText(status),
		Status:           status,
		Detail:           hub.ErrorMessage(err),
		Instance:         r.URL.RequestURI(),
		ValidationErrors: hub.ErrorFields(err),
	}
	switch status {
	case http.StatusUnauthorized:
		v := `Bearer realm="lmos-hub"`
		if r.Header.Get("Authorization") != "" {
			v += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", v)
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON answers with v as JSON under contentType.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "cannot encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeBytes answers with an encoded body.
func writeBytes(w http.ResponseWriter, status int, contentType string, b []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
