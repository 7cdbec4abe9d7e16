package lmos

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestStatusTableRoundTripsEveryCode(t *testing.T) {
	codes := Codes()
	if len(codes) != 15 {
		t.Fatalf("the table holds %d codes, PROTOCOL §10 lists 15", len(codes))
	}
	seen := map[int]string{}
	for _, code := range codes {
		status, ok := StatusOf(code)
		if !ok || status < 400 || status > 599 {
			t.Fatalf("StatusOf(%q) = %d, %v", code, status, ok)
		}
		if other, dup := seen[status]; dup {
			t.Fatalf("%q and %q share status %d: a client could not read the code back", code, other, status)
		}
		seen[status] = code
		if back, ok := CodeOf(status); !ok || back != code {
			t.Errorf("CodeOf(%d) = %q, %v, want %q", status, back, ok, code)
		}
		// The titles are the HTTP reason phrases the hub has always sent.
		if got, want := Title(status), http.StatusText(status); got != want {
			t.Errorf("Title(%d) = %q, net/http says %q", status, got, want)
		}
		p := ProblemFor(status, "d")
		if p.Type != ErrorTypeBase+code || p.Title != http.StatusText(status) || p.Status != status || p.Detail != "d" {
			t.Errorf("ProblemFor(%d) = %+v", status, p)
		}
	}
	if _, ok := StatusOf("teapot"); ok {
		t.Error("StatusOf knows a code the table does not hold")
	}
	if _, ok := CodeOf(418); ok {
		t.Error("CodeOf knows a status the table does not hold")
	}
	if p := ProblemFor(418, ""); p.Type != ErrorTypeBase+CodeInternal || p.Title != "" || p.Status != 418 {
		t.Errorf("ProblemFor(418) = %+v", p)
	}
}

// The problem document is byte for byte what the hub has always written:
// type, title and status always, the rest only when set.
func TestProblemJSON(t *testing.T) {
	cases := []struct {
		p    Problem
		want string
	}{
		{Problem{}, `{"type":"","title":"","status":0}`},
		{Problem{Status: 502, Instance: "/things/x"}, `{"type":"","title":"","status":502,"instance":"/things/x"}`},
		{Problem{Type: ErrorTypeBase + "invalid", Title: "Bad Request", Status: 400, Detail: "bad", Instance: "/ws",
			ValidationErrors: []FieldError{{Field: "/title", Description: "is required"}}},
			`{"type":"https://eclipse.dev/lmos/protocol/v1/errors#invalid","title":"Bad Request","status":400,"detail":"bad","instance":"/ws","validationErrors":[{"field":"/title","description":"is required"}]}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.p)
		if err != nil || string(b) != c.want {
			t.Errorf("json.Marshal(%+v) = %s, %v\nwant %s", c.p, b, err, c.want)
		}
		var back Problem
		if err := json.Unmarshal(b, &back); err != nil || back.Detail != c.p.Detail || back.Status != c.p.Status || len(back.ValidationErrors) != len(c.p.ValidationErrors) {
			t.Errorf("round trip of %s: %+v, %v", b, back, err)
		}
	}
}

func TestProblemError(t *testing.T) {
	p := &Problem{Status: 409, Detail: "stuck", ValidationErrors: []FieldError{{Field: "/a", Description: "b"}}}
	if got := p.Error(); got != "Conflict: stuck (/a: b)" {
		t.Errorf("Error() = %q", got)
	}
	p.Title = "Jammed"
	if got := p.Error(); !strings.HasPrefix(got, "Jammed: ") {
		t.Errorf("Error() with a title = %q", got)
	}
}
