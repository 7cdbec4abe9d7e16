package joincli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/cmd/lmos-hub/joincli"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

type result struct {
	code           int
	stdout, stderr string
}

func run(env map[string]string, args ...string) result {
	var out, errw bytes.Buffer
	code := joincli.Run(args, &out, &errw, func(k string) string { return env[k] })
	return result{code, out.String(), errw.String()}
}

func (r result) want(t *testing.T, code int, what string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// pendingIDs is GET /api/join's list, oldest first.
func pendingIDs(t *testing.T, h *hubtest.Hub) []string {
	t.Helper()
	var st struct {
		List []struct{ ID string } `json:"list"`
	}
	resp, body := h.Do("GET", "/api/join", "", nil, hubtest.Token)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("GET /api/join: %d %s", resp.StatusCode, body)
	}
	var ids []string
	for _, p := range st.List {
		ids = append(ids, p.ID)
	}
	return ids
}

// TestJoinCLI drives `lmos-hub join` against a hub started as main starts
// it, under join mode approve, with joins parked over MQTT from three
// loopback addresses at moved times; it checks what the hub holds after
// each command, and that every refusal changes nothing.
func TestJoinCLI(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	m := hubtest.NewMain(t, t.TempDir(), func(c *app.Config) { c.Join.Mode = "approve" })
	m.Now = clock
	h := hubtest.Run(t, m)
	env := map[string]string{"LMOS_HUB_URL": h.URL, "LMOS_HUB_TOKEN": hubtest.Token}

	join := func(from, id string) {
		t.Helper()
		c, _, err := mqttclient.DialFrom(t, from, h.MQTTAddr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var res lmos.JoinResult
		if p := c.Join(lmos.TopicKey(id), tdgen.MakeTD(id, "T "+id), ""); json.Unmarshal(p, &res) != nil || res.Status != lmos.JoinPending {
			t.Fatalf("join %s from %s: %s", id, from, p)
		}
	}
	for i := range 3 {
		for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
			join(from, fmt.Sprintf("urn:cli:%s-%d", from[len(from)-1:], i))
		}
		now.Add(int64(time.Hour))
	}
	all := pendingIDs(t, h)
	if len(all) != 9 {
		t.Fatalf("pending %v", all)
	}

	r := run(env, "ls").want(t, 0, "ls")
	if !strings.Contains(r.stdout, "urn:cli:2-0") || !strings.Contains(r.stdout, "127.0.0.3") || !strings.Contains(r.stdout, "EXPIRES") {
		t.Fatalf("ls:\n%s", r.stdout)
	}
	r = run(env, "ls", "--json").want(t, 0, "ls --json")
	var st struct {
		List []struct {
			ID                string
			Received, Expires time.Time
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.List) != 9 || !st.List[0].Expires.Equal(st.List[0].Received.Add(24*time.Hour)) {
		t.Fatalf("ls --json %q: %v", r.stdout, err)
	}

	// Refusals: usage errors (exit 2) and the hub's problems (exit 1);
	// nothing changes.
	for _, c := range []struct {
		args []string
		env  map[string]string
		code int
		msg  string
	}{
		{[]string{"deny"}, env, 2, "needs Thing ids"},
		{[]string{"deny", "--all", "urn:cli:2-0"}, env, 2, "not both"},
		{[]string{"deny", "--all", "--source", "127.0.0.2"}, env, 2, "give it alone"},
		{[]string{"deny", "--older-than", "soon"}, env, 2, "older-than"},
		{[]string{"approve"}, env, 2, "at least one"},
		{[]string{"purge"}, env, 2, "unknown command"},
		{[]string{"deny", "--all"}, map[string]string{"LMOS_HUB_URL": h.URL}, 1, "401"},
		{[]string{"deny", "--all", "--token", "not-the-token-0123456789"}, env, 1, "401"},
		{[]string{"deny", "--source", "not-an-address"}, env, 1, "400"},
		{[]string{"deny", "urn:cli:absent"}, env, 1, "404"},
	} {
		r := run(c.env, c.args...).want(t, c.code, strings.Join(c.args, " "))
		if !strings.Contains(r.stderr, c.msg) {
			t.Fatalf("%v: stderr %q lacks %q", c.args, r.stderr, c.msg)
		}
		if got := pendingIDs(t, h); !slices.Equal(got, all) {
			t.Fatalf("%v changed the list: %v", c.args, got)
		}
	}

	run(env, "approve", "urn:cli:2-0").want(t, 0, "approve")
	if resp, _ := h.Do("GET", "/things/urn:cli:2-0", "", nil, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("approved Thing: %d", resp.StatusCode)
	}
	run(env, "deny", "urn:cli:3-0").want(t, 0, "deny one")
	r = run(env, "deny", "--source", "127.0.0.4", "--older-than", "90m").want(t, 0, "deny by source and age")
	if !strings.Contains(r.stdout, "denied urn:cli:4-0") || !strings.Contains(r.stdout, "denied urn:cli:4-1") || !strings.Contains(r.stdout, "2 denied, 5 still pending") {
		t.Fatalf("deny by source and age:\n%s", r.stdout)
	}
	if got := pendingIDs(t, h); !slices.Equal(got, []string{"urn:cli:2-1", "urn:cli:3-1", "urn:cli:2-2", "urn:cli:3-2", "urn:cli:4-2"}) {
		t.Fatalf("after the denials: %v", got)
	}
	r = run(env, "deny", "--all").want(t, 0, "deny --all")
	if !strings.Contains(r.stdout, "5 denied, 0 still pending") || len(pendingIDs(t, h)) != 0 {
		t.Fatalf("deny --all:\n%s", r.stdout)
	}
	for _, id := range []string{"urn:cli:3-0", "urn:cli:4-0", "urn:cli:2-2"} {
		if resp, _ := h.Do("GET", "/things/"+id, "", nil, ""); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("denied %s: %d", id, resp.StatusCode)
		}
	}
}
