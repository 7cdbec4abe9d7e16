package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/faultproxy"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// syncChild is a hub process (TestCrashChild: main's own run) pushing to
// a remote directory.
type syncChild struct {
	base   string
	stderr *cliSyncBuffer
	kill   func() // SIGKILL, and wait for the exit
}

// startSyncChild runs a hub process on dir with the sync.* environment env.
func startSyncChild(t *testing.T, dir string, env ...string) syncChild {
	t.Helper()
	argv := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0",
		"--mdns=false", "--admin-token", testToken, "--log-level", "info"}
	args := strings.Join(argv, " ")
	if !slices.Equal(strings.Fields(args), argv) {
		t.Fatalf("temp paths with spaces cannot be passed in LMOS_HUB_CHILD_ARGS: %q", args)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LMOS_HUB_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "LMOS_HUB_CRASH_CHILD=1", "LMOS_HUB_CHILD_ARGS="+args), env...)
	c := syncChild{stderr: &cliSyncBuffer{}}
	cmd.Stdout, cmd.Stderr = &cliSyncBuffer{}, c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	done := false
	c.kill = func() {
		if done {
			return
		}
		done = true
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("the hub process did not exit within 10s of SIGKILL")
		}
	}
	t.Cleanup(c.kill)
	listening := regexp.MustCompile(`msg="http listening" addr=(\S+)`)
	testwait.Eventually(t, time.Minute, "the hub process listens", func() bool {
		select {
		case err := <-exited:
			done = true
			t.Fatalf("the hub process exited (%v); stderr:\n%s", err, c.stderr.String())
		default:
		}
		m := listening.FindStringSubmatch(c.stderr.String())
		if m != nil {
			c.base = "http://" + m[1]
		}
		return m != nil
	})
	return c
}

// send makes one request to base with the admin token; it fails the test
// unless the answer is want.
func send(t *testing.T, method, u string, body []byte, want int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/td+json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, u, resp.StatusCode, b.String(), want)
	}
	return b.Bytes()
}

// thingTitles reads GET {base}/things: id → title.
func thingTitles(t *testing.T, base string) map[string]string {
	t.Helper()
	var list []struct{ ID, Title string }
	if err := json.Unmarshal(send(t, http.MethodGet, base+"/things", nil, http.StatusOK), &list); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(list))
	for _, th := range list {
		out[th.ID] = th.Title
	}
	return out
}

// TestSyncKilledWithFullOutboxReplays: a hub process pushing to a remote
// directory that is down takes 215 changes (creations, edits, deletions
// of Things already pushed) and is killed with SIGKILL; restarted once the
// remote is back, it replays them all: the remote ends up holding exactly
// the hub's Things.
func TestSyncKilledWithFullOutboxReplays(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: kills a hub process")
	}
	remote := hubtest.Start(t, nil)
	proxy := faultproxy.New(t, remote.URL)
	dir := t.TempDir()
	env := []string{"LMOS_HUB_SYNC_URL=" + proxy.URL(), "LMOS_HUB_SYNC_TOKEN=" + hubtest.Token}
	hub1 := startSyncChild(t, dir, env...)
	thing := func(base, id, title string, want int) {
		send(t, http.MethodPut, base+"/things/"+url.PathEscape(id), tdgen.MakeTD(id, title), want)
	}
	for i := range 10 {
		thing(hub1.base, fmt.Sprintf("urn:k:base%d", i), "v1", http.StatusCreated)
	}
	testwait.Eventually(t, time.Minute, "the first Things pushed", func() bool {
		return maps.Equal(thingTitles(t, remote.URL), thingTitles(t, hub1.base))
	})
	proxy.Down()
	for i := range 200 {
		thing(hub1.base, fmt.Sprintf("urn:k:new%03d", i), "new", http.StatusCreated)
	}
	for i := range 5 {
		thing(hub1.base, fmt.Sprintf("urn:k:base%d", i), "v2", http.StatusNoContent)
		send(t, http.MethodDelete, hub1.base+"/things/"+url.PathEscape(fmt.Sprintf("urn:k:base%d", 5+i)), nil, http.StatusNoContent)
	}
	want := thingTitles(t, hub1.base)
	// The pusher has met the closed remote since the last change.
	failures := strings.Count(hub1.stderr.String(), "cannot push to the remote directory")
	testwait.Eventually(t, 2*time.Minute, "a failed push after the changes", func() bool {
		return strings.Count(hub1.stderr.String(), "cannot push to the remote directory") > failures
	})
	hub1.kill()
	proxy.Up()
	hub2 := startSyncChild(t, dir, env...)
	var got map[string]string
	testwait.Eventually(t, 2*time.Minute, "the remote holds the hub's Things", func() bool {
		got = thingTitles(t, remote.URL)
		return maps.Equal(got, want)
	})
	if len(got) != 205 || got["urn:k:base0"] != "v2" || got["urn:k:base9"] != "" {
		t.Fatalf("remote holds %d Things: %v", len(got), got)
	}
	if !maps.Equal(thingTitles(t, hub2.base), want) {
		t.Fatal("the restarted hub lost Things")
	}
}
