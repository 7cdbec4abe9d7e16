package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

func TestProblemOf(t *testing.T) {
	for _, code := range []string{EINVALID, ENOTFOUND, ECONFLICT, EUNAUTHORIZED, EFORBIDDEN, ETOOLARGE,
		EUNSUPPORTED, ERATELIMIT, EUNAVAILABLE, EFULL, EMETHOD, EINTERNAL, EFAILED, ETIMEOUT} {
		p := ProblemOf(Errorf(code, "x"))
		if p.Type != lmos.ErrorTypeBase+code || p.Status < 400 || p.Title == "" {
			t.Errorf("%s: %+v", code, p)
		}
	}
	p := ProblemOf(fmt.Errorf("wrapped: %w", &Error{Code: EINVALID, Message: "bad", Fields: []FieldError{{Field: "/a", Description: "b"}}}))
	if p.Status != 400 || p.Detail != "bad" || len(p.ValidationErrors) != 1 {
		t.Errorf("wrapped: %+v", p)
	}
	if p := ProblemOf(errors.New("secret internals")); p.Status != 500 || p.Detail != "internal error" {
		t.Errorf("plain error leaks or maps wrong: %+v", p)
	}
	if p := ProblemOf(context.DeadlineExceeded); p.Status != 503 {
		t.Errorf("deadline: %+v", p)
	}
}

func TestProblemOfTimeoutKeepsItsCode(t *testing.T) {
	err := fmt.Errorf("cannot invoke: %w", &Error{Code: ETIMEOUT, Message: "late", Err: context.DeadlineExceeded})
	if p := ProblemOf(err); p.Status != 504 || p.Detail != "late" {
		t.Errorf("timeout: %+v", p)
	}
}

func TestPeerProblem(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6,000 bytes
	p := PeerProblem(map[string]any{"type": 7, "title": "Jammed", "detail": long, "status": "503", "instance": []any{}})
	if p.Type != "" || p.Title != "Jammed" || p.Instance != "" || p.Status != 503 {
		t.Errorf("problem %+v", p)
	}
	if len(p.Detail) > 4096 || !utf8.ValidString(p.Detail) || len(p.Detail) < 4094 {
		t.Errorf("detail cut to %d bytes (valid UTF-8: %v)", len(p.Detail), utf8.ValidString(p.Detail))
	}
	if p := PeerProblem(map[string]any{"status": json.Number("502")}); p.Status != 502 {
		t.Errorf("numeric status: %+v", p)
	}
}
