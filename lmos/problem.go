package lmos

import "fmt"

// ErrorTypeBase starts the type URI of every LMOS problem; the code follows
// the '#' (PROTOCOL §10).
const ErrorTypeBase = "https://eclipse.dev/lmos/protocol/v1/errors#"

// Problem is an RFC 9457 problem document: how every door (HTTP, MQTT join
// results and failed results, WebSocket errors) and the agent library
// report a failure. type, title and status are always written, as the hub
// has always written them.
type Problem struct {
	Type             string       `json:"type"`
	Title            string       `json:"title"`
	Status           int          `json:"status"`
	Detail           string       `json:"detail,omitempty"`
	Instance         string       `json:"instance,omitempty"`
	ValidationErrors []FieldError `json:"validationErrors,omitempty"`
}

// FieldError names one invalid member of a document by JSON pointer.
type FieldError struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// Error makes a problem an error (the agent library returns *Problem):
// the title (the status's when empty), the detail and the field errors.
func (p *Problem) Error() string {
	s := p.Title
	if s == "" {
		s = Title(p.Status)
	}
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	for _, f := range p.ValidationErrors {
		s += fmt.Sprintf(" (%s: %s)", f.Field, f.Description)
	}
	return s
}

// The problem codes: the fragment of a problem type after ErrorTypeBase.
const (
	CodeInvalid      = "invalid"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeNotFound     = "not-found"
	CodeMethod       = "method"
	CodeConflict     = "conflict"
	CodePrecondition = "precondition-failed"
	CodeTooLarge     = "too-large"
	CodeUnsupported  = "unsupported"
	CodeRateLimit    = "rate-limited"
	CodeInternal     = "internal"
	CodeFailed       = "failed"
	CodeUnavailable  = "unavailable"
	CodeTimeout      = "timeout"
	CodeFull         = "full"
)

// statuses is the one table between problem codes and HTTP statuses, with
// the RFC 9110 reason phrase each status is titled with. Server and client
// read it alike: the hub writes a code's status, the agent library turns a
// status back into its code.
var statuses = []struct {
	code   string
	status int
	title  string
}{
	{CodeInvalid, 400, "Bad Request"},
	{CodeUnauthorized, 401, "Unauthorized"},
	{CodeForbidden, 403, "Forbidden"},
	{CodeNotFound, 404, "Not Found"},
	{CodeMethod, 405, "Method Not Allowed"},
	{CodeConflict, 409, "Conflict"},
	{CodePrecondition, 412, "Precondition Failed"},
	{CodeTooLarge, 413, "Request Entity Too Large"},
	{CodeUnsupported, 415, "Unsupported Media Type"},
	{CodeRateLimit, 429, "Too Many Requests"},
	{CodeInternal, 500, "Internal Server Error"},
	{CodeFailed, 502, "Bad Gateway"},
	{CodeUnavailable, 503, "Service Unavailable"},
	{CodeTimeout, 504, "Gateway Timeout"},
	{CodeFull, 507, "Insufficient Storage"},
}

// Codes lists every problem code of the table, in status order.
func Codes() []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = s.code
	}
	return out
}

// StatusOf returns the HTTP status of a problem code; false for a code the
// table does not hold.
func StatusOf(code string) (int, bool) {
	for _, s := range statuses {
		if s.code == code {
			return s.status, true
		}
	}
	return 0, false
}

// CodeOf returns the problem code of an HTTP status; false for a status
// the table does not hold.
func CodeOf(status int) (string, bool) {
	for _, s := range statuses {
		if s.status == status {
			return s.code, true
		}
	}
	return "", false
}

// Title returns the reason phrase of a status of the table, "" for others.
func Title(status int) string {
	for _, s := range statuses {
		if s.status == status {
			return s.title
		}
	}
	return ""
}

// ProblemFor returns the problem of an HTTP status with the LMOS type and
// title: a status the table does not hold has the type of CodeInternal and
// no title.
func ProblemFor(status int, detail string) Problem {
	code, ok := CodeOf(status)
	if !ok {
		code = CodeInternal
	}
	return Problem{Type: ErrorTypeBase + code, Title: Title(status), Status: status, Detail: detail}
}
