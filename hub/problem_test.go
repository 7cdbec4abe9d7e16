package hub

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestProblemOf(t *testing.T) {
	for _, code := range []string{EINVALID, ENOTFOUND, ECONFLICT, EUNAUTHORIZED, EFORBIDDEN, ETOOLARGE,
		EUNSUPPORTED, ERATELIMIT, EUNAVAILABLE, EFULL, EMETHOD, EINTERNAL, EFAILED, ETIMEOUT} {
		p := ProblemOf(Errorf(code, "x"))
		if p.Type != ErrorTypeBase+code || p.Status < 400 || p.Title == "" {
			t.Errorf("%s: %+v", code, p)
		}
	}
	p := ProblemOf(fmt.Errorf("wrapped: %w", &Error{Code: EINVALID, Message: "bad", Fields: []FieldError{{"/a", "b"}}}))
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
