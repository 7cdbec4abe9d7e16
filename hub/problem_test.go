package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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

func TestThingFailedKeepsTheThingsTextsAndAlways502(t *testing.T) {
	def := ThingFailed(nil)
	if def.Status != 502 || def.Type != lmos.ErrorTypeBase+EFAILED || def.Detail != ThingFailure || def.Instance != "" {
		t.Fatalf("no problem object: %+v", def)
	}
	full := map[string]any{"type": "urn:x:jam", "title": "Jammed", "detail": "paper", "instance": "/job/7", "status": "418"}
	if p := ThingFailed(full); !reflect.DeepEqual(p, lmos.Problem{Type: "urn:x:jam", Title: "Jammed", Status: 502, Detail: "paper", Instance: "/job/7"}) {
		t.Errorf("full problem: %+v", p)
	}
	// Members that are missing, empty or not strings keep the hub's.
	for _, peer := range []map[string]any{{}, {"type": 7, "title": "", "detail": json.Number("1"), "instance": []any{}, "status": 200}} {
		if p := ThingFailed(peer); !reflect.DeepEqual(p, def) {
			t.Errorf("%v: %+v, want %+v", peer, p, def)
		}
	}
	long := strings.Repeat("é", 3000)
	if p := ThingFailed(map[string]any{"detail": long}); len(p.Detail) > 4096 || !utf8.ValidString(p.Detail) {
		t.Errorf("detail of %d bytes passed on", len(p.Detail))
	}
}
