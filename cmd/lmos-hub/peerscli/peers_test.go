package peerscli_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/peerscli"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

type result struct {
	code           int
	stdout, stderr string
}

func run(env map[string]string, args ...string) result {
	var out, errw bytes.Buffer
	code := peerscli.Run(args, &out, &errw, func(k string) string { return env[k] })
	return result{code, out.String(), errw.String()}
}

func (r result) want(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

type peer struct{ DID, URL string }

func peers(t *testing.T, h *hubtest.Hub) []peer {
	t.Helper()
	var ps []peer
	h.GetJSON("/api/peers", http.StatusOK, &ps)
	return ps
}

// TestPeersCLI pairs two hubs started as main starts them with `lmos-hub
// peers`, lists and unpairs; each refusal exits 1 with the hub's reason
// and pairs nothing.
func TestPeersCLI(t *testing.T) {
	a, b := hubtest.Start(t, nil), hubtest.Start(t, nil)
	env := map[string]string{"LMOS_HUB_URL": a.URL, "LMOS_HUB_TOKEN": hubtest.Token}
	bDID := b.Main.DID()
	r := run(env, "add", b.URL, "--did", bDID).want(t, 0, "add b")
	if !strings.Contains(r.stdout, "paired "+bDID+" "+b.URL) {
		t.Fatalf("add: %q", r.stdout)
	}
	run(env, "add", b.URL, "--did", bDID).want(t, 0, "add b again")
	r = run(env, "ls").want(t, 0, "ls")
	if !strings.Contains(r.stdout, "DID") || !strings.Contains(r.stdout, bDID) || !strings.Contains(r.stdout, b.URL) {
		t.Fatalf("ls:\n%s", r.stdout)
	}
	r = run(env, "ls", "--json").want(t, 0, "ls --json")
	var listed []peer
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 1 || listed[0].DID != bDID {
		t.Fatalf("ls --json %q: %v", r.stdout, err)
	}

	for _, c := range []struct {
		what string
		env  map[string]string
		args []string
		code int
		want []string
	}{
		{"own DID", env, []string{"add", "http://127.0.0.1:9", "--did", a.Main.DID()}, 1, []string{"400", "/did", "own DID"}},
		{"bad URL", env, []string{"add", "ftp://x", "--did", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"}, 1, []string{"400", "/url"}},
		{"no token", map[string]string{"LMOS_HUB_URL": a.URL}, []string{"add", "http://127.0.0.1:9", "--did", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"}, 1, []string{"401", "hint: pairing needs a token of scope admin: pass --token"}},
		{"no --did", env, []string{"add", "http://127.0.0.1:9"}, 2, []string{"needs --did"}},
		{"two URLs", env, []string{"add", "http://x:1", "http://y:1", "--did", bDID}, 2, []string{"the peer's URL"}},
		{"rm unknown", env, []string{"rm", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"}, 1, []string{"404", "no paired peer"}},
		{"rm nothing", env, []string{"rm"}, 2, []string{"at least one DID"}},
		{"unknown command", env, []string{"pair"}, 2, []string{"unknown command"}},
	} {
		r := run(c.env, c.args...).want(t, c.code, c.what)
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr %q does not say %q", c.what, r.stderr, w)
			}
		}
		if ps := peers(t, a); len(ps) != 1 || ps[0].DID != bDID {
			t.Fatalf("%s: peers %+v", c.what, ps)
		}
	}
	// links: the peer's link among the hub's, as /api/status has it.
	var linkState string
	for deadline := time.Now().Add(30 * time.Second); linkState != "connected"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the peer's link is %q, not connected, after 30 s", linkState)
		}
		r = run(env, "links").want(t, 0, "links")
		if !strings.HasPrefix(r.stdout, "KIND") || !strings.Contains(r.stdout, "peer") || !strings.Contains(r.stdout, bDID) {
			t.Fatalf("links:\n%s", r.stdout)
		}
		var ls []struct{ Kind, Name, State string }
		r = run(env, "links", "--json").want(t, 0, "links --json")
		if err := json.Unmarshal([]byte(r.stdout), &ls); err != nil || len(ls) != 1 || ls[0].Kind != "peer" || ls[0].Name != bDID {
			t.Fatalf("links --json %q: %v", r.stdout, err)
		}
		linkState = ls[0].State
	}
	run(env, "links", "x").want(t, 2, "links with an argument")
	r = run(env, "rm", bDID).want(t, 0, "rm b")
	if !strings.Contains(r.stdout, "unpaired "+bDID) {
		t.Fatalf("rm: %q", r.stdout)
	}
	if ps := peers(t, a); len(ps) != 0 {
		t.Fatalf("after rm: %+v", ps)
	}
	if r := run(env, "--help").want(t, 0, "help"); !strings.Contains(r.stdout, "add URL --did DID") {
		t.Fatalf("help: %q", r.stdout)
	}
}
