package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// TestCrashChild is the hub process of TestCrashUnderLoad: the test binary
// re-executed with LMOS_HUB_CRASH_CHILD=1 runs `lmos-hub` with the
// arguments in LMOS_HUB_CHILD_ARGS, exactly as main does.
func TestCrashChild(t *testing.T) {
	if os.Getenv("LMOS_HUB_CRASH_CHILD") != "1" {
		t.Skip("helper process of TestCrashUnderLoad")
	}
	os.Exit(run(strings.Fields(os.Getenv("LMOS_HUB_CHILD_ARGS")), os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// TestCrashUnderLoad kills a hub process with SIGKILL while 8 clients write
// as fast as they can, then checks that every write the hub acknowledged
// (201) survived and the store opens cleanly.
func TestCrashUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: kills a hub process under load")
	}
	dir := t.TempDir()
	// No write rate limit: all writers come from 127.0.0.1 and would
	// otherwise mostly get 429s after the first burst.
	cfgFile := filepath.Join(t.TempDir(), "hub.yaml")
	// No Things quota: the writers create Things as fast as they can.
	if err := os.WriteFile(cfgFile, []byte("http:\n  writeRate: 0\nregistry:\n  maxThings: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := []string{"serve", "--data-dir", dir, "--config", cfgFile, "--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0",
		"--mdns=false", "--admin-token", testToken, "--log-level", "info"}
	args := strings.Join(argv, " ")
	if !slices.Equal(strings.Fields(args), argv) {
		t.Fatalf("temp paths with spaces cannot be passed in LMOS_HUB_CHILD_ARGS: %q", args)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LMOS_HUB_CRASH_CHILD=1", "LMOS_HUB_CHILD_ARGS="+args)
	childOut, childErr := &cliSyncBuffer{}, &cliSyncBuffer{}
	cmd.Stdout, cmd.Stderr = childOut, childErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var waitErr error
	reaped := false
	reap := func() {
		if reaped {
			return
		}
		reaped = true
		_ = cmd.Process.Kill()
		select {
		case waitErr = <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("the child did not exit within 10s of SIGKILL")
		}
	}
	t.Cleanup(reap)

	listening := regexp.MustCompile(`msg="http listening" addr=(\S+)`)
	var base string
	for deadline := time.Now().Add(15 * time.Second); base == ""; {
		if m := listening.FindStringSubmatch(childErr.String()); m != nil {
			base = "http://" + m[1]
			break
		}
		select {
		case err := <-exited:
			reaped = true
			t.Fatalf("the hub process exited (%v) before listening; stderr:\n%s\nstdout:\n%s", err, childErr.String(), childOut.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub process did not listen within 15s; stderr:\n%s", childErr.String())
		}
	}

	// Writers: each PUTs new Things until told to stop, over its own
	// connection, and keeps the ids the hub acknowledged with 201.
	const writers = 8
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		acked    = make([][]string, writers)
		nAcked   atomic.Int64
		failed   = make([]int, writers) // transport errors: in flight at the kill
		statuses sync.Map               // unexpected status → example body
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("urn:uuid:00000000-0000-4000-8%03d-%012d", w, i)
				req, _ := http.NewRequest(http.MethodPut, base+"/things/"+url.PathEscape(id), bytes.NewReader(tdgen.MakeTD(id, fmt.Sprintf("crash %d/%d", w, i))))
				req.Header.Set("Content-Type", "application/td+json")
				req.Header.Set("Authorization", "Bearer "+testToken)
				resp, err := client.Do(req)
				if err != nil {
					failed[w]++
					// The hub is gone: nothing more can be acknowledged.
					<-stop
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					failed[w]++ // cut off mid-response: not acknowledged
				case resp.StatusCode == http.StatusCreated:
					acked[w] = append(acked[w], id)
					nAcked.Add(1)
				default:
					statuses.LoadOrStore(resp.StatusCode, string(body))
				}
			}
		}()
	}

	start := time.Now()
	for {
		elapsed := time.Since(start)
		if elapsed >= 10*time.Second || elapsed >= 1500*time.Millisecond && nAcked.Load() >= 500 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ackedAtKill := nAcked.Load()
	reap() // SIGKILL while the writers are busy
	close(stop)
	wg.Wait()
	loadFor := time.Since(start)
	if waitErr == nil {
		t.Fatalf("the hub process exited cleanly: it was not killed")
	}

	statuses.Range(func(code, body any) bool {
		t.Errorf("a PUT of a new Thing got %d, want 201: %s", code, body)
		return true
	})
	var all []string
	inFlight := 0
	for w := range writers {
		all = append(all, acked[w]...)
		inFlight += failed[w]
	}
	t.Logf("%d writes acknowledged in %s (%d before SIGKILL was sent), %d in flight at the kill",
		len(all), loadFor.Round(time.Millisecond), ackedAtKill, inFlight)
	if len(all) < 500 {
		t.Errorf("only %d writes acknowledged in %s; want at least 500 for a meaningful test", len(all), loadFor.Round(time.Millisecond))
	}

	// Restart on the same data directory: every acknowledged write is there.
	reopen := time.Now()
	h := hubtest.StartIn(t, dir, func(c *Config) { c.Registry.MaxThings = 0 }) // as the child ran
	t.Logf("hub reopened after the crash in %s", time.Since(reopen).Round(time.Millisecond))

	resp, body := h.Do(http.MethodGet, "/things", "", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /things after the crash: %d %s", resp.StatusCode, body)
	}
	var list []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("GET /things after the crash: not a JSON array of TDs: %v", err)
	}
	if len(list) < len(all) {
		t.Errorf("GET /things after the crash: %d Things, want at least the %d acknowledged", len(list), len(all))
	}
	listed := make(map[string]bool, len(list))
	for _, td := range list {
		listed[td.ID] = true
	}

	missing := 0
	for _, id := range all {
		resp, body := h.Do(http.MethodGet, "/things/"+url.PathEscape(id), "", nil, "")
		if resp.StatusCode != http.StatusOK || !listed[id] {
			if missing++; missing <= 10 {
				t.Errorf("acknowledged Thing %s lost: GET %d %s, in GET /things: %v", id, resp.StatusCode, body, listed[id])
			}
			continue
		}
		var td struct {
			ID, Title string
		}
		if err := json.Unmarshal(body, &td); err != nil || td.ID != id || !strings.HasPrefix(td.Title, "crash ") {
			t.Errorf("GET %s after the crash: %v %s", id, err, body)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged writes lost", missing, len(all))
	}
	// The reopened store takes writes.
	h.Put("urn:uuid:00000000-0000-4000-9000-000000000001", tdgen.MakeTD("urn:uuid:00000000-0000-4000-9000-000000000001", "after the crash"))
}
