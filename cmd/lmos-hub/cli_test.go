package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// cliSyncBuffer is a buffer for the log of a hub running in another
// goroutine or process.
type cliSyncBuffer = hubtest.SyncBuffer

// cliGetenv is a getenv backed by m, so the tests never see the real
// environment's LMOS_HUB_* variables.
func cliGetenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// cliResult is what one run() call produced.
type cliResult struct {
	code           int
	stdout, stderr string
}

// cli runs the CLI in-process exactly as main does, with env as the
// environment and stdin as standard input.
func cli(t *testing.T, env map[string]string, stdin string, args ...string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(stdin), &stdout, &stderr, cliGetenv(env))
	return cliResult{code, stdout.String(), stderr.String()}
}

// want fails the test unless the command exited with code.
func (r cliResult) want(t *testing.T, code int, what string) cliResult {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// cliFreeAddr returns a loopback address where nothing listens.
func cliFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// writeStatus PUTs a fresh TD to the hub with token as Bearer token and
// returns the HTTP status.
func writeStatus(t *testing.T, h *hubtest.Hub, token string) int {
	t.Helper()
	id := "urn:uuid:" + newTestUUID(t)
	resp, body := h.Do(http.MethodPut, "/things/"+url.PathEscape(id), "application/td+json", tdgen.MakeTD(id, "probe"), token)
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Fatalf("PUT %s: unexpected %d %s", id, resp.StatusCode, body)
	}
	return resp.StatusCode
}

var testUUIDs struct {
	mu sync.Mutex
	n  int
}

// newTestUUID returns a distinct, well-formed UUID for this test binary.
func newTestUUID(t *testing.T) string {
	testUUIDs.mu.Lock()
	defer testUUIDs.mu.Unlock()
	testUUIDs.n++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", testUUIDs.n)
}

func TestCLIThings(t *testing.T) {
	h := hubtest.Start(t, nil)
	env := map[string]string{"LMOS_HUB_URL": h.URL}
	dir := t.TempDir()

	// A TD file as a person writes it: indented, with a final newline, so
	// --raw must give back these exact bytes, whitespace included.
	const id = "urn:uuid:6f1c2b1e-9a4d-4c1e-8f5a-0c2d3e4f5a6b"
	var doc map[string]any
	if err := json.Unmarshal(tdgen.MakeTD(id, "CLI Tool"), &doc); err != nil {
		t.Fatal(err)
	}
	fileBytes, _ := json.MarshalIndent(doc, "", "    ")
	fileBytes = append(fileBytes, '\n')
	file := filepath.Join(dir, "tool.json")
	if err := os.WriteFile(file, fileBytes, 0o600); err != nil {
		t.Fatal(err)
	}

	// put FILE: created, then updated.
	r := cli(t, nil, "", "things", "put", file, "--hub", h.URL, "--token", testToken).want(t, 0, "things put (new)")
	if got := strings.TrimSpace(r.stdout); got != "created "+id {
		t.Errorf("things put (new): stdout %q, want %q", got, "created "+id)
	}
	r = cli(t, map[string]string{"LMOS_HUB_URL": h.URL, "LMOS_HUB_TOKEN": testToken}, "", "things", "put", file).want(t, 0, "things put (again)")
	if got := strings.TrimSpace(r.stdout); got != "updated "+id {
		t.Errorf("things put (again): stdout %q, want %q", got, "updated "+id)
	}

	// put - without id: POST, the hub assigns a urn:uuid.
	delete(doc, "id")
	doc["title"] = "Anonymous Tool"
	anon, _ := json.Marshal(doc)
	r = cli(t, env, string(anon), "things", "put", "-", "--token", testToken).want(t, 0, "things put -")
	m := regexp.MustCompile(`^created (urn:uuid:[0-9a-f-]{36})\n$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("things put -: stdout %q, want \"created urn:uuid:…\"", r.stdout)
	}
	anonID := m[1]
	var got map[string]any
	h.GetJSON("/things/"+url.PathEscape(anonID), http.StatusOK, &got)
	if got["title"] != "Anonymous Tool" {
		t.Errorf("GET %s: title %v", anonID, got["title"])
	}

	// ls: a table with both Things.
	r = cli(t, env, "", "things", "ls").want(t, 0, "things ls")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "TITLE") {
		t.Errorf("things ls: want a header and 2 rows, got %q", r.stdout)
	}
	for _, want := range []string{id, "CLI Tool", anonID, "Anonymous Tool", "lmos:Tool"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("things ls: %q missing from\n%s", want, r.stdout)
		}
	}

	// ls --json: a JSON array of the (enriched) TDs.
	r = cli(t, env, "", "things", "ls", "--json").want(t, 0, "things ls --json")
	var arr []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &arr); err != nil {
		t.Fatalf("things ls --json: not a JSON array: %v\n%s", err, r.stdout)
	}
	ids := map[any]bool{}
	for _, td := range arr {
		ids[td["id"]] = true
	}
	if len(arr) != 2 || !ids[id] || !ids[anonID] {
		t.Errorf("things ls --json: ids %v, want %s and %s", ids, id, anonID)
	}

	// ls --query: JSONPath over the TDs.
	r = cli(t, env, "", "things", "ls", "--query", "$[*].title").want(t, 0, "things ls --query")
	var titles []string
	if err := json.Unmarshal([]byte(r.stdout), &titles); err != nil {
		t.Fatalf("things ls --query: not a JSON array of strings: %v\n%s", err, r.stdout)
	}
	if strings.Join(slices.Sorted(slices.Values(titles)), "|") != "Anonymous Tool|CLI Tool" {
		t.Errorf("things ls --query: titles %q", titles)
	}

	// get: enriched.
	r = cli(t, env, "", "things", "get", id).want(t, 0, "things get")
	var enriched map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &enriched); err != nil {
		t.Fatalf("things get: not JSON: %v\n%s", err, r.stdout)
	}
	if _, ok := enriched["registration"]; !ok {
		t.Errorf("things get: no registration in %s", r.stdout)
	}
	if enriched["id"] != id {
		t.Errorf("things get: id %v", enriched["id"])
	}

	// get --raw: exactly the file's bytes.
	r = cli(t, env, "", "things", "get", id, "--raw").want(t, 0, "things get --raw")
	if r.stdout != string(fileBytes) {
		t.Errorf("things get --raw:\n got %q\nwant %q", r.stdout, fileBytes)
	}

	// rm, then get → 404.
	r = cli(t, env, "", "things", "rm", id, "--token", testToken).want(t, 0, "things rm")
	if got := strings.TrimSpace(r.stdout); got != "deleted "+id {
		t.Errorf("things rm: stdout %q", got)
	}
	r = cli(t, env, "", "things", "get", id).want(t, 1, "things get (deleted)")
	if !strings.Contains(r.stderr, "404") || r.stdout != "" {
		t.Errorf("things get (deleted): stdout %q, stderr %q; want 404 on stderr", r.stdout, r.stderr)
	}
	r = cli(t, env, "", "things", "rm", id, "--token", testToken).want(t, 1, "things rm (deleted)")
	if !strings.Contains(r.stderr, "404") {
		t.Errorf("things rm (deleted): stderr %q; want 404", r.stderr)
	}
}

func TestCLIThingsPutInvalid(t *testing.T) {
	h := hubtest.Start(t, nil)
	file := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(file, hubtest.Sample(t, "invalid-missing-security.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, nil, "", "things", "put", file, "--hub", h.URL, "--token", testToken).want(t, 1, "things put (invalid)")
	if !strings.Contains(r.stderr, "400") || !regexp.MustCompile(`(?m)^\s+/security: `).MatchString(r.stderr) {
		t.Errorf("things put (invalid): stderr %q; want 400 and a line for the field /security", r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("things put (invalid): stdout %q, want nothing", r.stdout)
	}
	var all []any
	h.GetJSON("/things", http.StatusOK, &all)
	if len(all) != 0 {
		t.Errorf("GET /things after an invalid put: %d Things, want none", len(all))
	}
}

func TestCLIThingsWriteWithoutToken(t *testing.T) {
	h := hubtest.Start(t, nil)
	file := filepath.Join(t.TempDir(), "td.json")
	const id = "urn:uuid:0d9e8f7a-6b5c-4d3e-9f2a-1b0c9d8e7f6a"
	if err := os.WriteFile(file, tdgen.MakeTD(id, "no token"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, nil, "", "things", "put", file, "--hub", h.URL).want(t, 1, "things put without token")
	if !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "--token") || !strings.Contains(r.stderr, "LMOS_HUB_TOKEN") {
		t.Errorf("things put without token: stderr %q; want 401 and the --token hint", r.stderr)
	}
	r = cli(t, nil, "", "things", "rm", id, "--hub", h.URL).want(t, 1, "things rm without token")
	if !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "--token") {
		t.Errorf("things rm without token: stderr %q; want 401 and the --token hint", r.stderr)
	}
	r = cli(t, nil, "", "things", "put", file, "--hub", h.URL, "--token", "wrong-token-wrong-token").want(t, 1, "things put with a wrong token")
	if !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "did not accept the token") {
		t.Errorf("things put with a wrong token: stderr %q; want 401 and the bad-token hint", r.stderr)
	}
	h.GetJSON("/things/"+url.PathEscape(id), http.StatusNotFound, nil)
}

func TestCLIThingsHubUnreachable(t *testing.T) {
	addr := cliFreeAddr(t)
	file := filepath.Join(t.TempDir(), "td.json")
	if err := os.WriteFile(file, tdgen.MakeTD("urn:uuid:1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d", "x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"things", "ls", "--hub", "http://" + addr},
		{"things", "get", "urn:x:y", "--hub", addr},
		{"things", "put", file, "--hub", "http://" + addr, "--token", testToken},
		{"things", "rm", "urn:x:y", "--hub", "http://" + addr, "--token", testToken},
	} {
		r := cli(t, nil, "", args...)
		if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the hub") || !strings.Contains(r.stderr, addr) {
			t.Errorf("%q: exit %d, stderr %q; want 1 and \"cannot reach the hub\" at %s", args, r.code, r.stderr, addr)
		}
	}
	// The token commands say so too.
	r := cli(t, nil, "", "token", "list", "--hub", "http://"+addr, "--token", testToken)
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the hub") {
		t.Errorf("token list at a dead hub: exit %d, stderr %q; want 1 and \"cannot reach the hub\"", r.code, r.stderr)
	}
}

// tokenIDFrom extracts the id from `token create`'s stderr.
func tokenIDFrom(t *testing.T, stderr string) string {
	t.Helper()
	m := regexp.MustCompile(`created token ([0-9a-f]+);`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("token create: no token id in stderr %q", stderr)
	}
	return m[1]
}

// secretFrom checks that `token create`'s stdout is one secret line.
func secretFrom(t *testing.T, stdout string) string {
	t.Helper()
	secret := strings.TrimSuffix(stdout, "\n")
	if !strings.HasPrefix(secret, "lmos_") || strings.ContainsAny(secret, " \t\n") || len(secret) < 40 {
		t.Fatalf("token create: stdout %q is not one lmos_ secret", stdout)
	}
	return secret
}

// tokenRowLine returns the `token list` line of token id.
func tokenRowLine(t *testing.T, list, id string) []string {
	t.Helper()
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			return f
		}
	}
	t.Fatalf("token list: no row for %s in\n%s", id, list)
	return nil
}

func TestTokenCommandsOnStoppedHub(t *testing.T) {
	dir := t.TempDir()
	h := hubtest.StartIn(t, dir, nil)
	h.Close()

	r := cli(t, nil, "", "token", "create", "--name", "ci", "--data-dir", dir).want(t, 0, "token create")
	secret := secretFrom(t, r.stdout)
	tokID := tokenIDFrom(t, r.stderr)

	h = hubtest.StartIn(t, dir, nil)
	if code := writeStatus(t, h, secret); code != http.StatusCreated {
		t.Errorf("write with the token created offline: %d, want 201", code)
	}
	h.Close()

	r = cli(t, map[string]string{"LMOS_HUB_DATA_DIR": dir}, "", "token", "list").want(t, 0, "token list")
	if !strings.HasPrefix(r.stdout, "ID") {
		t.Errorf("token list: no header in %q", r.stdout)
	}
	if row := tokenRowLine(t, r.stdout, tokID); len(row) != 7 || row[1] != "ci" || row[2] != "admin" || row[4] != "-" || row[5] != "-" {
		t.Errorf("token list: row %q, want id, ci, admin, created, -, -", row)
	}
	if !strings.Contains(r.stdout, "provisioned") {
		t.Errorf("token list: the --admin-token token is missing:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, secret) {
		t.Errorf("token list shows the secret")
	}

	// Flags go before the id: see TestTokenFlagsAfterID.
	r = cli(t, nil, "", "token", "revoke", "--data-dir", dir, tokID).want(t, 0, "token revoke")
	if got := strings.TrimSpace(r.stdout); got != "revoked "+tokID {
		t.Errorf("token revoke: stdout %q", got)
	}
	r = cli(t, nil, "", "token", "list", "--data-dir", dir).want(t, 0, "token list after revoke")
	if row := tokenRowLine(t, r.stdout, tokID); len(row) != 7 || row[5] == "-" {
		t.Errorf("token list after revoke: row %q, want a revoked time", row)
	}
	r = cli(t, nil, "", "token", "revoke", "--data-dir", dir, "0123456789ab").want(t, 1, "token revoke (unknown id)")
	if !strings.Contains(r.stderr, "0123456789ab") {
		t.Errorf("token revoke (unknown id): stderr %q", r.stderr)
	}

	h = hubtest.StartIn(t, dir, nil)
	if code := writeStatus(t, h, secret); code != http.StatusUnauthorized {
		t.Errorf("write with the revoked token after a restart: %d, want 401", code)
	}
	if code := writeStatus(t, h, testToken); code != http.StatusCreated {
		t.Errorf("write with the provisioned token: %d, want 201", code)
	}
}

func TestTokenCommandsWhileHubRuns(t *testing.T) {
	h := hubtest.Start(t, nil)

	r := cli(t, nil, "", "token", "list", "--data-dir", h.Dir).want(t, exitLocked, "token list on a running hub's data dir")
	if !strings.Contains(r.stderr, "--hub") || !strings.Contains(r.stderr, "in use") {
		t.Errorf("token list (locked): stderr %q; want \"in use\" and a --hub suggestion", r.stderr)
	}

	r = cli(t, nil, "", "token", "create", "--hub", h.URL, "--token", testToken, "--name", "remote").want(t, 0, "token create --hub")
	secret := secretFrom(t, r.stdout)
	tokID := tokenIDFrom(t, r.stderr)
	if code := writeStatus(t, h, secret); code != http.StatusCreated {
		t.Errorf("write with the remotely created token: %d, want 201", code)
	}

	env := map[string]string{"LMOS_HUB_URL": h.URL, "LMOS_HUB_TOKEN": testToken}
	r = cli(t, env, "", "token", "list").want(t, 0, "token list --hub")
	if row := tokenRowLine(t, r.stdout, tokID); len(row) != 7 || row[1] != "remote" || row[2] != "admin" || row[5] != "-" {
		t.Errorf("token list --hub: row %q, want id, remote, admin, created, -, -", row)
	}

	r = cli(t, nil, "", "token", "revoke", "--hub", h.URL, "--token", testToken, tokID).want(t, 0, "token revoke --hub")
	if got := strings.TrimSpace(r.stdout); got != "revoked "+tokID {
		t.Errorf("token revoke --hub: stdout %q", got)
	}
	if code := writeStatus(t, h, secret); code != http.StatusUnauthorized {
		t.Errorf("write with the revoked token: %d, want 401 at once", code)
	}

	r = cli(t, nil, "", "token", "list", "--hub", h.URL).want(t, 1, "token list --hub without token")
	if !strings.Contains(r.stderr, "401") {
		t.Errorf("token list --hub without token: stderr %q; want 401", r.stderr)
	}
	r = cli(t, nil, "", "token", "create", "--hub", h.URL, "--token", secret).want(t, 1, "token create --hub with a revoked token")
	if !strings.Contains(r.stderr, "401") || r.stdout != "" {
		t.Errorf("token create with a revoked token: stdout %q, stderr %q; want 401 and no secret", r.stdout, r.stderr)
	}
}

// TestTokenFlagsAfterID: `token revoke ID --data-dir DIR` (flags after the
// id, as `things` accepts them) must work like `token revoke --data-dir DIR ID`.
func TestTokenFlagsAfterID(t *testing.T) {
	dir := t.TempDir()
	r := cli(t, nil, "", "token", "create", "--name", "ci", "--data-dir", dir).want(t, 0, "token create")
	tokID := tokenIDFrom(t, r.stderr)
	r = cli(t, nil, "", "token", "revoke", tokID, "--data-dir", dir)
	if r.code != exitOK || strings.TrimSpace(r.stdout) != "revoked "+tokID {
		t.Errorf("token revoke ID --data-dir DIR: exit %d, stdout %q, stderr %q; want 0 and \"revoked %s\"", r.code, r.stdout, r.stderr, tokID)
	}
}

// TestTokenUnknownCommand: an unknown token command is a usage error (exit
// 2) that touches no data directory and no hub.
func TestTokenUnknownCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, args := range [][]string{
		{"token", "mint", "--data-dir", dir},
		{"token", "mint", "--hub", "http://" + cliFreeAddr(t), "--token", testToken},
	} {
		r := cli(t, nil, "", args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "mint"`) {
			t.Errorf("%q: exit %d, stderr %q; want %d and unknown command \"mint\"", args, r.code, r.stderr, exitUsage)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("`token mint --data-dir %s` created the data directory", dir)
	}
}

func TestCLIConfigPrint(t *testing.T) {
	const secret = "secret-secret-secret"
	r := cli(t, nil, "", "config", "print", "--http-addr", "127.0.0.1:9999", "--admin-token", secret).want(t, 0, "config print")
	if strings.Contains(r.stdout+r.stderr, secret) {
		t.Errorf("config print shows the admin token:\n%s", r.stdout)
	}
	var cfg Config
	if err := yaml.Unmarshal([]byte(r.stdout), &cfg); err != nil {
		t.Fatalf("config print: not YAML: %v\n%s", err, r.stdout)
	}
	if cfg.HTTP.Addr != "127.0.0.1:9999" || cfg.AdminToken != "<redacted>" {
		t.Errorf("config print: http.addr %q, adminToken %q; want 127.0.0.1:9999 and <redacted>", cfg.HTTP.Addr, cfg.AdminToken)
	}
	if !strings.Contains(r.stdout, "addr: 127.0.0.1:9999") {
		t.Errorf("config print: no \"addr: 127.0.0.1:9999\" in\n%s", r.stdout)
	}
}

func TestCLIMisc(t *testing.T) {
	r := cli(t, nil, "", "version").want(t, 0, "version")
	if !strings.HasPrefix(r.stdout, "lmos-hub ") {
		t.Errorf("version: stdout %q", r.stdout)
	}
	r = cli(t, nil, "", "help").want(t, 0, "help")
	if !strings.Contains(r.stdout, "usage:") {
		t.Errorf("help: stdout %q", r.stdout)
	}

	r = cli(t, nil, "", "frobnicate").want(t, exitUsage, "unknown command")
	if !strings.Contains(r.stderr, `unknown command "frobnicate"`) || !strings.Contains(r.stderr, "lmos-hub --help") {
		t.Errorf("unknown command: stderr %q", r.stderr)
	}
	cli(t, nil, "", "token").want(t, exitUsage, "token without command")
	cli(t, nil, "", "token", "revoke", "--data-dir", t.TempDir()).want(t, exitUsage, "token revoke without id")

	// A bad flag value names the flag and the allowed values.
	r = cli(t, nil, "", "serve", "--join-mode", "maybe").want(t, exitUsage, "serve --join-mode maybe")
	if !strings.Contains(r.stderr, "join-mode") || !strings.Contains(r.stderr, `"maybe" is not one of open, approve, closed`) {
		t.Errorf("serve --join-mode maybe: stderr %q; want the flag and the allowed values", r.stderr)
	}
	// The same in a file or the environment names the setting as written there.
	cfgFile := filepath.Join(t.TempDir(), "hub.yaml")
	if err := os.WriteFile(cfgFile, []byte("join:\n  mode: maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, nil, "", "serve", "--config", cfgFile).want(t, exitUsage, "serve with join.mode: maybe")
	if !strings.Contains(r.stderr, `join.mode: "maybe" is not one of open, approve, closed`) {
		t.Errorf("serve with join.mode: maybe in the file: stderr %q; want join.mode named", r.stderr)
	}
	r = cli(t, map[string]string{"LMOS_HUB_JOIN_MODE": "maybe"}, "", "serve").want(t, exitUsage, "serve with LMOS_HUB_JOIN_MODE=maybe")
	if !strings.Contains(r.stderr, "LMOS_HUB_JOIN_MODE") {
		t.Errorf("serve with LMOS_HUB_JOIN_MODE=maybe: stderr %q; want the variable named", r.stderr)
	}

	r = cli(t, nil, "", "serve", "--help").want(t, exitOK, "serve --help")
	if !strings.Contains(r.stdout, "usage: lmos-hub [serve]") || !strings.Contains(r.stdout, "-http-addr") {
		t.Errorf("serve --help: stdout %q", r.stdout)
	}
}

// TestServeThroughRun runs `lmos-hub serve` through run() itself and stops
// it with SIGTERM: while serve runs, its signal.Notify takes SIGTERM, so the
// signal reaches serve's channel instead of ending the test binary.
func TestServeThroughRun(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr := &cliSyncBuffer{}, &cliSyncBuffer{}
	args := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false", "--admin-token", testToken}
	done := make(chan int, 1)
	go func() { done <- run(args, strings.NewReader(""), stdout, stderr, cliGetenv(nil)) }()

	listening := regexp.MustCompile(`msg="http listening" addr=(\S+)`)
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if m := listening.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve returned %d before listening; log:\n%s", code, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			// serve is stuck before listening; it may not have installed its
			// signal handler, so no signal is sent: the goroutine leaks.
			t.Fatalf("no \"http listening\" within 10s; log:\n%s", stderr.String())
		}
	}
	stopped := false
	stop := func() int {
		stopped = true
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM: %v", err)
		}
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			t.Fatalf("serve did not return within 10s of SIGTERM; log:\n%s", stderr.String())
			return -1
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})

	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %d %s, want 200", resp.StatusCode, body)
	}

	// A second hub on the same data directory refuses to start.
	second := cli(t, nil, "", "serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0", "--mdns=false", "--admin-token", testToken)
	if second.code != exitLocked || !strings.Contains(second.stderr, "in use") {
		t.Errorf("second serve on the same data dir: exit %d, stderr %q; want %d and \"in use\"", second.code, second.stderr, exitLocked)
	}

	// The first one still serves.
	resp, err = http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz after the second start: %v", err)
	}
	resp.Body.Close()

	if code := stop(); code != exitOK {
		t.Errorf("serve after SIGTERM: exit %d, want 0; log:\n%s", code, stderr.String())
	}
	log := stderr.String()
	if !strings.Contains(log, `msg="shutting down" signal=terminated`) || !strings.Contains(log, "msg=stopped") {
		t.Errorf("serve log has no shutdown and stopped lines:\n%s", log)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Errorf("the hub still answers after it stopped")
	}
	// The data directory is free again.
	db, err := store.Open(dir, store.Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("open the store after serve stopped: %v", err)
	}
	db.Close()
}

// startFirstHub starts a hub on dir without --admin-token, printing to
// stdout, as on a first start.
func startFirstHub(t *testing.T, dir string, stdout io.Writer) *hubtest.Hub {
	t.Helper()
	m := hubtest.NewMain(t, dir, func(c *Config) { c.AdminToken = "" })
	m.Stdout = stdout
	return hubtest.Run(t, m)
}

func TestFirstStartPrintsTokenOnce(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	h := startFirstHub(t, dir, &out)
	var secret string
	for _, line := range strings.Split(out.String(), "\n") {
		if s := strings.TrimSpace(line); strings.HasPrefix(s, "lmos_") {
			if secret != "" {
				t.Fatalf("more than one token line in %q", out.String())
			}
			secret = s
		}
	}
	if secret == "" {
		t.Fatalf("first start printed no lmos_ token:\n%s", out.String())
	}
	if code := writeStatus(t, h, secret); code != http.StatusCreated {
		t.Errorf("write with the printed token: %d, want 201", code)
	}
	if code := writeStatus(t, h, testToken); code != http.StatusUnauthorized {
		t.Errorf("write with a token never installed: %d, want 401", code)
	}
	h.Close()

	var again bytes.Buffer
	h = startFirstHub(t, dir, &again)
	if again.Len() != 0 {
		t.Errorf("restart printed %q, want nothing", again.String())
	}
	if code := writeStatus(t, h, secret); code != http.StatusCreated {
		t.Errorf("write with the printed token after a restart: %d, want 201", code)
	}
	h.Close()

	db, err := os.ReadFile(filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(db, []byte(secret)) {
		t.Errorf("%s holds the admin token in clear", store.FileName)
	}
	// The check above means something only if this is the file with the token.
	if !bytes.Contains(db, []byte(hub.HashToken(secret))) {
		t.Errorf("%s does not hold the token's hash: wrong file?", store.FileName)
	}
	// Its hash is all `token list` has to show: a name, no secret.
	r := cli(t, nil, "", "token", "list", "--data-dir", dir).want(t, 0, "token list")
	if !strings.Contains(r.stdout, "initial") || strings.Contains(r.stdout, secret) {
		t.Errorf("token list after the first start:\n%s", r.stdout)
	}
}

// TestServePortInUse: a taken port fails the start with a hint, not a hang.
func TestServePortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r := cli(t, nil, "", "serve", "--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--mqtt-addr", ln.Addr().String(),
		"--mdns=false", "--admin-token", testToken)
	r.want(t, exitFailure, "serve on a taken port")
	if !strings.Contains(r.stderr, "address already in use") || !strings.Contains(r.stderr, "--mqtt-addr") {
		t.Errorf("stderr = %s", r.stderr)
	}
}

// token create --scope --expires, offline and through the API: the token
// has its scope (a read token cannot write: 403) and its expiry is listed.
func TestTokenCreateWithScopeAndExpiry(t *testing.T) {
	dir := t.TempDir()
	r := cli(t, nil, "", "token", "create", "--name", "viewer", "--scope", "read", "--expires", "30d", "--data-dir", dir).want(t, 0, "token create --scope read")
	secret := secretFrom(t, r.stdout)
	tokID := tokenIDFrom(t, r.stderr)
	cli(t, nil, "", "token", "create", "--scope", "root", "--data-dir", dir).want(t, 1, "token create --scope root")
	cli(t, nil, "", "token", "create", "--expires", "soon", "--data-dir", dir).want(t, 1, "token create --expires soon")
	r = cli(t, nil, "", "token", "list", "--data-dir", dir).want(t, 0, "token list")
	row := tokenRowLine(t, r.stdout, tokID)
	if len(row) != 7 || row[2] != "read" || row[4] == "-" || row[6] != "-" {
		t.Fatalf("token list: row %q, want scope read and an expiry", row)
	}
	if exp, err := time.Parse(time.RFC3339, row[4]); err != nil || time.Until(exp) < 29*24*time.Hour || time.Until(exp) > 31*24*time.Hour {
		t.Fatalf("expiry %q is not 30 days from now (%v)", row[4], err)
	}
	h := hubtest.StartIn(t, dir, nil)
	if code := writeStatus(t, h, secret); code != http.StatusForbidden {
		t.Errorf("write with a read token: %d, want 403", code)
	}
	r = cli(t, nil, "", "token", "create", "--hub", h.URL, "--token", testToken, "--scope", "operate", "--expires", "12h").want(t, 0, "token create --hub --scope operate")
	remoteID := tokenIDFrom(t, r.stderr)
	r = cli(t, nil, "", "token", "list", "--hub", h.URL, "--token", testToken).want(t, 0, "token list --hub")
	if row := tokenRowLine(t, r.stdout, remoteID); len(row) != 7 || row[2] != "operate" || row[4] == "-" {
		t.Fatalf("token list --hub: row %q, want operate with an expiry", row)
	}
}

// token create --thing binds a token to a Thing (group channels, PROTOCOL
// §7): scope read unless asked, listed with its Thing, offline and through
// the API; a bad id is refused.
func TestTokenCreateBoundToAThing(t *testing.T) {
	dir := t.TempDir()
	r := cli(t, nil, "", "token", "create", "--thing", "urn:x:lamp", "--data-dir", dir).want(t, 0, "token create --thing")
	id := tokenIDFrom(t, r.stderr)
	cli(t, nil, "", "token", "create", "--thing", "not an id", "--data-dir", dir).want(t, 1, "token create --thing with a bad id")
	r = cli(t, nil, "", "token", "list", "--data-dir", dir).want(t, 0, "token list")
	if row := tokenRowLine(t, r.stdout, id); len(row) != 7 || row[2] != "read" || row[6] != "urn:x:lamp" {
		t.Fatalf("token list: row %q, want scope read bound to urn:x:lamp", row)
	}
	h := hubtest.StartIn(t, dir, nil)
	r = cli(t, nil, "", "token", "create", "--hub", h.URL, "--token", testToken, "--thing", "urn:x:fan", "--scope", "operate").want(t, 0, "token create --hub --thing")
	remoteID := tokenIDFrom(t, r.stderr)
	r = cli(t, nil, "", "token", "list", "--hub", h.URL, "--token", testToken).want(t, 0, "token list --hub")
	if row := tokenRowLine(t, r.stdout, remoteID); len(row) != 7 || row[2] != "operate" || row[6] != "urn:x:fan" {
		t.Fatalf("token list --hub: row %q, want operate bound to urn:x:fan", row)
	}
}
