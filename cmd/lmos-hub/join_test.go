package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestJoinCommandIsWired: `lmos-hub join` reaches cmd/lmos-hub/joincli (its
// own tests drive it against a running hub).
func TestJoinCommandIsWired(t *testing.T) {
	var out, errw bytes.Buffer
	if code := run([]string{"join", "--help"}, nil, &out, &errw, nil); code != exitOK || !strings.Contains(out.String(), "lmos-hub join <command>") {
		t.Fatalf("join --help: exit %d\n%s%s", code, out.String(), errw.String())
	}
	out.Reset()
	if code := run([]string{"join"}, nil, &out, &errw, nil); code != exitUsage {
		t.Fatalf("join without a command: exit %d", code)
	}
	out.Reset()
	if code := run([]string{"help"}, nil, &out, &errw, nil); code != exitOK || !strings.Contains(out.String(), "lmos-hub join ls|approve|deny") {
		t.Fatalf("help lacks join: %s", out.String())
	}
}
