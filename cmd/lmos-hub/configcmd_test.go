package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/eclipse-lmos/lmos-hub/app"
)

func writeConfigFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lmos-hub.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunConfigPrint(t *testing.T) {
	path := writeConfigFile(t, "http:\n  allowedOrigins: [\"https://example.com\"]\nmdns:\n  interfaces: [eth0]\n")
	env := map[string]string{"LMOS_HUB_ADMIN_TOKEN": "s3cret-s3cret-s3cret", "LMOS_HUB_CONFIG": path}
	var stdout, stderr bytes.Buffer
	code := runConfig([]string{"print", "--http-addr", "127.0.0.1:0", "--join-mode=approve"}, &stdout, &stderr, cliGetenv(env))
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	if strings.Contains(stdout.String(), "s3cret") {
		t.Errorf("the admin token is printed:\n%s", stdout.String())
	}
	want, err := app.LoadConfig([]string{"--http-addr", "127.0.0.1:0", "--join-mode=approve"}, cliGetenv(env))
	if err != nil {
		t.Fatal(err)
	}
	// The output parses back, with no unknown key, into the redacted configuration.
	got := app.DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader(stdout.Bytes()))
	dec.KnownFields(true)
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("output does not parse back: %v\n%s", err, stdout.String())
	}
	if !reflect.DeepEqual(got, want.Redacted()) {
		t.Errorf("parsed back %+v\nwant %+v\noutput:\n%s", got, want.Redacted(), stdout.String())
	}
	if got.AdminToken != "<redacted>" || got.HTTP.Addr != "127.0.0.1:0" || got.Join.Mode != "approve" {
		t.Errorf("unexpected values: %+v", got)
	}
	// It is also a valid --config file (with the token left out).
	path2 := writeConfigFile(t, strings.Replace(stdout.String(), "adminToken: <redacted>", "adminToken: \"\"", 1))
	again, err := app.LoadConfig([]string{"--config", path2}, cliGetenv(nil))
	if err != nil {
		t.Fatalf("printed configuration does not load: %v", err)
	}
	want.AdminToken = ""
	if !reflect.DeepEqual(again, want) {
		t.Errorf("reloaded %+v, want %+v", again, want)
	}
}

func TestRunConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "missing command"},
		{[]string{"show"}, nil, `unknown command "show"`},
		{[]string{"print", "--join-mode", "maybe"}, nil, `"maybe" is not one of open, approve, closed`},
		{[]string{"print"}, map[string]string{"LMOS_HUB_MDNS": "maybe"}, "LMOS_HUB_MDNS"},
		{[]string{"print", "--bogus"}, nil, "flag provided but not defined: -bogus"},
	} {
		var stdout, stderr bytes.Buffer
		code := runConfig(tc.args, &stdout, &stderr, cliGetenv(tc.env))
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("runConfig(%q): exit %d, stderr %q, stdout %q; want exit 2 and %q", tc.args, code, stderr.String(), stdout.String(), tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := runConfig([]string{"print", "-h"}, &stdout, &stderr, cliGetenv(nil)); code != 0 || !strings.Contains(stdout.String(), "-http-addr") {
		t.Errorf("config print -h: exit %d, stdout %q", code, stdout.String())
	}
}
