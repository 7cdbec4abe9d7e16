package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/cliargs"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

func TestThingsUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no command", nil, nil, "missing command"},
		{"unknown command", []string{"list"}, nil, `unknown command "list"`},
		{"ls with argument", []string{"ls", "extra"}, nil, "takes no arguments"},
		{"ls empty query", []string{"ls", "--query="}, nil, "--query needs a JSONPath"},
		{"get without id", []string{"get"}, nil, "exactly one Thing id"},
		{"get two ids", []string{"get", "urn:a", "urn:b"}, nil, "exactly one Thing id"},
		{"get empty id", []string{"get", ""}, nil, "must not be empty"},
		{"put without file", []string{"put"}, nil, "exactly one file"},
		{"put two files", []string{"put", "a.json", "b.json"}, nil, "exactly one file"},
		{"rm without id", []string{"rm"}, nil, "at least one Thing id"},
		{"unknown flag", []string{"ls", "--bogus"}, nil, "flag provided but not defined: -bogus"},
		{"flag of another command", []string{"get", "urn:a", "--json"}, nil, "flag provided but not defined: -json"},
		{"flag after id", []string{"get", "urn:a", "--bogus"}, nil, "flag provided but not defined: -bogus"},
		{"missing flag value", []string{"ls", "--hub"}, nil, "flag needs an argument: -hub"},
		{"bad timeout", []string{"ls", "--timeout", "soon"}, nil, "-timeout"},
		{"zero timeout", []string{"ls", "--timeout", "0s"}, nil, "--timeout must be"},
		{"bad hub URL", []string{"ls", "--hub", "ftp://hub.local"}, nil, "is not a hub URL"},
		{"bad hub URL from env", []string{"ls"}, map[string]string{"LMOS_HUB_URL": "http://"}, "is not a hub URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runThings(tc.args, strings.NewReader(""), &stdout, &stderr, cliGetenv(tc.env))
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr %q", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.want)
			}
			if !strings.Contains(stderr.String(), "(see: lmos-hub things") {
				t.Errorf("stderr does not point to the usage: %q", stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

func TestThingsHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"ls", "-h"}, {"get", "--help"}} {
		var stdout, stderr bytes.Buffer
		if code := runThings(args, nil, &stdout, &stderr, cliGetenv(nil)); code != 0 {
			t.Errorf("%q: exit %d, want 0", args, code)
		}
		if !strings.Contains(stdout.String(), "usage: lmos-hub things") {
			t.Errorf("%q: stdout %q has no usage text", args, stdout.String())
		}
	}
}

// Bad input files fail before any request is made (exit 1, no hub needed).
func TestThingsPutBadFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		arg   string
		stdin string
		want  string
	}{
		{"missing file", filepath.Join(dir, "absent.json"), "", "absent.json"},
		{"empty stdin", "-", "", "stdin is empty"},
		{"not JSON", "-", "title: x", "is not a Thing Description"},
		{"JSON array", "-", "[1]", "is not a Thing Description"},
		{"id not a string", "-", `{"id": 7, "title": "x"}`, `"id" must be a non-empty string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// The hub address is unroutable on purpose: no request may be sent.
			code := runThings([]string{"put", "--hub", "http://127.0.0.1:1", tc.arg}, strings.NewReader(tc.stdin), &stdout, &stderr, cliGetenv(nil))
			if code != 1 || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "cannot reach") {
				t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

func TestThingsHelpers(t *testing.T) {
	if got := linkNext([]string{`</things>; rel="canonical"; etag="3", </things?offset=100&limit=100>; rel="next"`}); got != "/things?offset=100&limit=100" {
		t.Errorf("linkNext = %q", got)
	}
	if got := linkNext([]string{`</things>; rel="canonical"`}); got != "" {
		t.Errorf("linkNext without next = %q", got)
	}
	if got := idFromLocation("/things/urn:uuid:0a1b"); got != "urn:uuid:0a1b" {
		t.Errorf("idFromLocation = %q", got)
	}
	if got := idFromLocation("http://hub:8080/things/https:%2F%2Fex.org%2Fa"); got != "https://ex.org/a" {
		t.Errorf("idFromLocation(absolute, escaped) = %q", got)
	}
	if got := lmos.ThingPath("https://ex.org/a b"); got != "/things/https:%2F%2Fex.org%2Fa%20b" {
		t.Errorf("thingPath = %q", got)
	}
	for in, want := range map[string]string{
		"localhost:8080":           "http://localhost:8080",
		"http://hub.local:8080/":   "http://hub.local:8080",
		"https://hub.example/lmos": "https://hub.example/lmos",
	} {
		u, err := cliargs.HubURL(in)
		if err != nil || u.String() != want {
			t.Errorf("cliargs.HubURL(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
}
