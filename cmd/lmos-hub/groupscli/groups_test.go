package groupscli_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/groupscli"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

type result struct {
	code           int
	stdout, stderr string
}

func run(env map[string]string, args ...string) result {
	var out, errw bytes.Buffer
	code := groupscli.Run(args, &out, &errw, func(k string) string { return env[k] })
	return result{code, out.String(), errw.String()}
}

func (r result) want(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

type group struct {
	ID, Title     string
	Members       []string
	RequireSigned bool
	SelfJoin      bool
}

func groups(t *testing.T, h *hubtest.Hub) []group {
	t.Helper()
	var gs []group
	h.GetJSON("/api/groups", http.StatusOK, &gs)
	return gs
}

// TestGroupsCLI drives `lmos-hub groups` against a hub started as main
// starts it, and checks what the hub holds after each command.
func TestGroupsCLI(t *testing.T) {
	h := hubtest.Start(t, nil)
	h.Put("urn:example:a", tdgen.MakeTD("urn:example:a", "A"))
	h.Put("urn:example:b", tdgen.MakeTD("urn:example:b", "B"))
	env := map[string]string{"LMOS_HUB_URL": h.URL, "LMOS_HUB_TOKEN": hubtest.Token}

	run(env, "create", "--title", "Living room", "--id", "living", "--self-join", "urn:example:a").want(t, 0, "create living")
	r := run(env, "create", "--title", "Anonymous group").want(t, 0, "create without id")
	generated := strings.TrimSpace(strings.TrimPrefix(r.stdout, "created "))
	if gs := groups(t, h); len(gs) != 2 || !slices.ContainsFunc(gs, func(g group) bool { return g.ID == generated }) {
		t.Fatalf("groups %+v, want living and %q", gs, generated)
	}
	run(env, "add", "living", "urn:example:b", "--hub", h.URL).want(t, 0, "add b")
	r = run(env, "ls").want(t, 0, "ls")
	if !strings.Contains(r.stdout, "living") || !strings.Contains(r.stdout, "urn:example:a,urn:example:b") || !strings.Contains(r.stdout, "self-join") {
		t.Fatalf("ls:\n%s", r.stdout)
	}
	r = run(env, "ls", "--json").want(t, 0, "ls --json")
	var listed []group
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 2 {
		t.Fatalf("ls --json %q: %v", r.stdout, err)
	}

	// Refusals: exit 1 with the hub's problem, nothing changed.
	r = run(env, "add", "living", "urn:example:ghost").want(t, 1, "add an unknown Thing")
	if !strings.Contains(r.stderr, "404") || !strings.Contains(r.stderr, "urn:example:ghost") {
		t.Fatalf("stderr %q", r.stderr)
	}
	r = run(map[string]string{"LMOS_HUB_URL": h.URL}, "rm", "living", "urn:example:a").want(t, 1, "rm without a token")
	if !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "hint:") {
		t.Fatalf("stderr %q", r.stderr)
	}
	r = run(env, "create", "--title", "Again", "--id", "living").want(t, 1, "create an existing id")
	if !strings.Contains(r.stderr, "409") {
		t.Fatalf("stderr %q", r.stderr)
	}
	r = run(env, "create", "--title", "Bad", "urn:example:ghost").want(t, 1, "create with an unknown member")
	if !strings.Contains(r.stderr, "/members/0") {
		t.Fatalf("stderr %q", r.stderr)
	}
	if gs := groups(t, h); len(gs) != 2 || gs[1].ID != "living" || !slices.Equal(gs[1].Members, []string{"urn:example:a", "urn:example:b"}) {
		t.Fatalf("groups after the refusals %+v", gs)
	}

	run(env, "rm", "living", "urn:example:a").want(t, 0, "rm a")
	run(env, "dissolve", generated, "living").want(t, 0, "dissolve both")
	if gs := groups(t, h); len(gs) != 0 {
		t.Fatalf("groups after dissolving %+v", gs)
	}
	r = run(env, "dissolve", "living").want(t, 1, "dissolve again")
	if !strings.Contains(r.stderr, "404") {
		t.Fatalf("stderr %q", r.stderr)
	}

	// Rotating the status list: an admin's; an operate token is refused
	// (exit 1, nothing changed).
	operate, _, err := h.Main.Tokens.CreateScoped("op", hub.ScopeOperate, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r = run(map[string]string{"LMOS_HUB_URL": h.URL, "LMOS_HUB_TOKEN": operate}, "rotate-credentials").want(t, 1, "rotate with an operate token")
	if !strings.Contains(r.stderr, "403") || !strings.Contains(r.stderr, "admin token") || h.Main.Registry.StatusListGeneration() != 0 {
		t.Fatalf("stderr %q, generation %d", r.stderr, h.Main.Registry.StatusListGeneration())
	}
	r = run(env, "rotate-credentials").want(t, 0, "rotate")
	if !strings.Contains(r.stdout, "generation 1") || h.Main.Registry.StatusListGeneration() != 1 {
		t.Fatalf("stdout %q", r.stdout)
	}
	run(env, "rotate-credentials", "extra").want(t, 2, "rotate with an argument")

	// Usage errors: exit 2.
	run(env).want(t, 2, "no command")
	run(env, "frobnicate").want(t, 2, "unknown command")
	run(env, "create").want(t, 2, "create without --title")
	run(env, "add", "living").want(t, 2, "add without a Thing")
	run(env, "ls", "--hub", "ftp://x").want(t, 2, "bad hub URL")
	run(env, "ls", "--bogus").want(t, 2, "unknown flag")
	run(env, "--help").want(t, 0, "help")
}

// A group title is anyone's text with an operate token: `groups ls` writes
// no control character of it to the terminal, C1 ones included (U+009B
// starts an escape sequence on some terminals, as ESC [ does).
func TestGroupsLsWritesNoControlCharacters(t *testing.T) {
	h := hubtest.Start(t, nil)
	env := map[string]string{"LMOS_HUB_URL": h.URL, "LMOS_HUB_TOKEN": hubtest.Token}
	run(env, "create", "--id", "g", "--title", "Kitchen\u009b2J\x1b[31m\u0085x").want(t, 0, "create")
	out := run(env, "ls").want(t, 0, "ls").stdout
	if strings.ContainsFunc(out, func(r rune) bool { return r != '\n' && r != '\t' && (r < 0x20 || r >= 0x7f && r <= 0x9f) }) {
		t.Fatalf("ls wrote a control character: %q", out)
	}
	if !strings.Contains(out, "Kitchen 2J [31m x") {
		t.Fatalf("ls: %q", out)
	}
}
