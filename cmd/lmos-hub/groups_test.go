package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestGroupsCommandIsWired: `lmos-hub groups` reaches cmd/lmos-hub/groupscli
// (its own tests drive it against a running hub).
func TestGroupsCommandIsWired(t *testing.T) {
	var out, errw bytes.Buffer
	if code := run([]string{"groups", "--help"}, nil, &out, &errw, nil); code != exitOK || !strings.Contains(out.String(), "lmos-hub groups <command>") {
		t.Fatalf("groups --help: exit %d\n%s%s", code, out.String(), errw.String())
	}
	out.Reset()
	if code := run([]string{"groups"}, nil, &out, &errw, nil); code != exitUsage {
		t.Fatalf("groups without a command: exit %d", code)
	}
}
