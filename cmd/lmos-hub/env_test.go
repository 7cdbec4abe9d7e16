package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestEnvSetsEveryKindOfSetting: the real binary's `config print` shows
// nested settings of each kind set by their LMOS_HUB_* variables.
func TestEnvSetsEveryKindOfSetting(t *testing.T) {
	env := []string{
		"LMOS_HUB_REGISTRY_MAXTHINGS=7",                            // int, nested
		"LMOS_HUB_SEARCH_MAXNODES=5000",                            // int64
		"LMOS_HUB_HTTP_WRITERATE=12.5",                             // float
		"LMOS_HUB_SECURITY_REQUIRESIGNED=true",                     // bool
		"LMOS_HUB_HTTP_WEBSOCKET_IDLETIMEOUT=90s",                  // duration, two levels down
		"LMOS_HUB_GROUPS_STATUSLISTURL=https://hub.example:8443/s", // string
		"LMOS_HUB_HTTP_ALLOWEDHOSTS=hub.example, *.lan.example",    // list
		"LMOS_HUB_DATADIR=/srv/hub",                                // a flag's setting by its derived name
	}
	r := runBinary(t, t.TempDir(), env, "config", "print")
	if r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Fatalf("config print: exit %d, stderr %q", r.code, r.stderr)
	}
	var cfg Config
	if err := yaml.Unmarshal([]byte(r.stdout), &cfg); err != nil {
		t.Fatalf("config print: %v\n%s", err, r.stdout)
	}
	if cfg.Registry.MaxThings != 7 || cfg.Search.MaxNodes != 5000 || cfg.HTTP.WriteRate != 12.5 || !cfg.Security.RequireSigned ||
		time.Duration(cfg.HTTP.WebSocket.IdleTimeout) != 90*time.Second || cfg.Groups.StatusListURL != "https://hub.example:8443/s" ||
		!slices.Equal(cfg.HTTP.AllowedHosts, []string{"hub.example", "*.lan.example"}) || cfg.DataDir != "/srv/hub" {
		t.Errorf("the variables were not all applied:\n%s", r.stdout)
	}
	// A flag still wins over the variable.
	r = runBinary(t, t.TempDir(), env, "config", "print", "--data-dir", "/srv/flag")
	if r.code != 0 || !strings.Contains(r.stdout, "dataDir: /srv/flag") {
		t.Errorf("--data-dir over LMOS_HUB_DATADIR: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestEnvBadValueNamesTheVariable: a value that does not parse, or that
// the setting's check refuses, stops the hub with exit 2 naming the
// variable, before anything is created.
func TestEnvBadValueNamesTheVariable(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"LMOS_HUB_REGISTRY_MAXTHINGS=lots", `"lots" is not a whole number`},
		{"LMOS_HUB_REGISTRY_MAXTHINGS=-1", "registry.maxThings: must be 0 (unlimited) or more"},
		{"LMOS_HUB_SECURITY_REQUIRESIGNED=maybe", "not a boolean"},
		{"LMOS_HUB_HTTP_WEBSOCKET_IDLETIMEOUT=soon", "invalid duration"},
		{"LMOS_HUB_HTTP_ALLOWEDORIGINS=not an origin", "http.allowedOrigins[0]"},
	} {
		work := t.TempDir()
		data := filepath.Join(work, "data")
		name, _, _ := strings.Cut(tc.env, "=")
		r := runBinary(t, work, []string{tc.env}, "serve", "--data-dir", data, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false")
		if r.code != exitUsage || !strings.Contains(r.stderr, "environment variable "+name) || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d naming %s and %q", tc.env, r.code, r.stderr, exitUsage, name, tc.want)
		}
		if _, err := os.Stat(data); err == nil {
			t.Errorf("%s: the refused start created the data directory", tc.env)
		}
	}
}

// TestEnvUnknownVariableWarned: an LMOS_HUB_* variable no setting has is
// warned about by name (with the likely one), in config print and in the
// serving hub's log; the hub still starts (a warning, not an error).
func TestEnvUnknownVariableWarned(t *testing.T) {
	env := []string{"LMOS_HUB_REGISTRY_MAX_THINGS=5", "LMOS_HUB_URL=http://localhost:8080"}
	r := runBinary(t, t.TempDir(), env, "config", "print")
	if r.code != 0 || !strings.Contains(r.stderr, "warning: unknown environment variable LMOS_HUB_REGISTRY_MAX_THINGS ignored") ||
		!strings.Contains(r.stderr, "did you mean LMOS_HUB_REGISTRY_MAXTHINGS?") || strings.Contains(r.stderr, "LMOS_HUB_URL") {
		t.Errorf("config print: exit %d, stderr %q; want 0 and a warning naming LMOS_HUB_REGISTRY_MAX_THINGS only", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "maxThings: 1024") {
		t.Errorf("the unknown variable changed registry.maxThings:\n%s", r.stdout)
	}

	p := startBinaryEnv(t, t.TempDir(), env, "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false")
	p.stop(t)
	if log := p.stderr.String(); !strings.Contains(log, "unknown environment variable ignored") ||
		!strings.Contains(log, "name=LMOS_HUB_REGISTRY_MAX_THINGS did_you_mean=LMOS_HUB_REGISTRY_MAXTHINGS") {
		t.Errorf("the hub's log does not warn about LMOS_HUB_REGISTRY_MAX_THINGS:\n%s", log)
	}
}

// TestConfigEnvListsTheVariables: `config env` lists each setting's
// variable beside its YAML name and flag.
func TestConfigEnvListsTheVariables(t *testing.T) {
	r := runBinary(t, t.TempDir(), nil, "config", "env")
	if r.code != 0 {
		t.Fatalf("config env: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range [][]string{
		{"LMOS_HUB_REGISTRY_MAXTHINGS", "registry.maxThings", "-"},
		{"LMOS_HUB_HTTP_WEBSOCKET_IDLETIMEOUT", "http.webSocket.idleTimeout", "-"},
		{"LMOS_HUB_HTTP_ADDR", "http.addr", "--http-addr"},
		{"LMOS_HUB_DATA_DIR", "dataDir", "(older", "name;", "wins)", "--data-dir"},
	} {
		found := false
		for _, line := range strings.Split(r.stdout, "\n") {
			found = found || slices.Equal(strings.Fields(line), want)
		}
		if !found {
			t.Errorf("config env has no line %q:\n%s", want, r.stdout)
		}
	}
}

// TestTokenCommandsReadTheDataDirVariable: the token commands find the
// data directory by the variable the hub reads, under either name.
func TestTokenCommandsReadTheDataDirVariable(t *testing.T) {
	for _, name := range []string{"LMOS_HUB_DATADIR", "LMOS_HUB_DATA_DIR"} {
		dir := t.TempDir()
		r := cli(t, map[string]string{name: dir}, "", "token", "create", "--name", "by-env").want(t, 0, "token create with "+name)
		id := tokenIDFrom(t, r.stderr)
		list := cli(t, nil, "", "token", "list", "--data-dir", dir).want(t, 0, "token list")
		if !strings.Contains(list.stdout, id) {
			t.Errorf("%s=%s: the token %s is not in that data directory:\n%s", name, dir, id, list.stdout)
		}
	}
}
