package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/store"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// runCLI runs lmos-hub with args and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb, func(string) string { return "" })
	return code, out.String(), errb.String()
}

// ackedWrites PUTs Things from writers goroutines until stop closes and
// records each id whose PUT the hub acknowledged.
type ackedWrites struct {
	mu    sync.Mutex
	ids   []string
	fails []string
	wg    sync.WaitGroup
	stop  chan struct{}
}

func startWriters(h *hubtest.Hub, writers int) *ackedWrites {
	a := &ackedWrites{stop: make(chan struct{})}
	for w := range writers {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-a.stop:
					return
				default:
				}
				id := fmt.Sprintf("urn:backup:w%d:%d", w, i)
				req, _ := http.NewRequest(http.MethodPut, h.URL+lmos.ThingPath(id), bytes.NewReader(hubtest.BareTD(id, "load")))
				req.Header.Set("Content-Type", "application/td+json")
				req.Header.Set("Authorization", "Bearer "+hubtest.Token)
				resp, err := http.DefaultClient.Do(req)
				a.mu.Lock()
				switch {
				case err != nil:
					a.fails = append(a.fails, fmt.Sprintf("%s: %v", id, err))
				case resp.StatusCode == http.StatusCreated:
					a.ids = append(a.ids, id)
				default:
					a.fails = append(a.fails, fmt.Sprintf("%s: %s", id, resp.Status))
				}
				a.mu.Unlock()
				if resp != nil {
					resp.Body.Close()
				}
			}
		}()
	}
	return a
}

// acked returns the ids acknowledged so far.
func (a *ackedWrites) acked() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.ids)
}

// A backup taken through the running hub's API while writers keep PUTting
// Things and agents keep joining over MQTT restores to a hub that has every
// write acknowledged before the backup began, and that hub serves them (the
// Things, and the MQTT credentials the joins issued).
func TestBackupUnderWriteLoadRestores(t *testing.T) {
	h := hubtest.Start(t, nil)
	load := startWriters(h, 3)
	defer func() { close(load.stop); load.wg.Wait() }()
	join := func(i int) (string, mqttclient.Creds) {
		id := fmt.Sprintf("urn:backup:mqtt:%d", i)
		return id, h.MQTT(nil).MustJoin(id, hubtest.BareTD(id, "joined"))
	}
	joined := map[string]mqttclient.Creds{}
	for i := range 5 {
		id, c := join(i)
		joined[id] = c
	}
	for deadline := time.Now().Add(time.Minute); len(load.acked()) < 50; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the writers got %d PUTs acknowledged in a minute", len(load.acked()))
		}
	}

	before := load.acked()
	file := filepath.Join(t.TempDir(), "hub.backup")
	done := make(chan [3]string)
	go func() {
		code, out, errOut := runCLI("backup", "--hub", h.URL, "--token", hubtest.Token, file)
		done <- [3]string{fmt.Sprint(code), out, errOut}
	}()
	// Joins go on while the backup streams.
	joinsDuring := 0
	var res [3]string
	for waiting := true; waiting; {
		select {
		case res = <-done:
			waiting = false
		default:
			join(100 + joinsDuring)
			joinsDuring++
		}
	}
	if res[0] != "0" || !strings.Contains(res[1], "backed up hub") {
		t.Fatalf("backup: exit %s\nstdout: %s\nstderr: %s", res[0], res[1], res[2])
	}
	close(load.stop)
	load.wg.Wait()
	load.stop = make(chan struct{}) // for the deferred close
	if len(load.fails) > 0 {
		t.Fatalf("writes failed: %v", load.fails[:min(5, len(load.fails))])
	}
	total := len(load.acked())
	h.Close()

	dir := t.TempDir()
	if code, out, errOut := runCLI("restore", "--data-dir", dir, file); code != exitOK {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	h2 := hubtest.StartIn(t, dir, nil)
	for _, id := range before {
		if resp, body := h2.Do(http.MethodGet, lmos.ThingPath(id), "", nil, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("restored hub: GET %s = %d %s", id, resp.StatusCode, body)
		}
	}
	for id, c := range joined {
		if resp, _ := h2.Do(http.MethodGet, lmos.ThingPath(id), "", nil, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("restored hub: the joined Thing %s is missing (%d)", id, resp.StatusCode)
		}
		if _, ack, err := mqttclient.Dial(t, h2.MQTTAddr(), mqttclient.WithCreds(c.Username, c.Password)); err != nil {
			t.Errorf("restored hub refuses %s's credential: %v %+v", id, err, ack)
		}
	}
	t.Logf("restored %d PUTs acknowledged before the backup began (of %d in all) and %d joins (%d more during it)",
		len(before), total, len(joined), joinsDuring)
}

// restore refuses while a hub runs on the data directory, and refuses a
// file that is not a hub store; either way the directory is as it was.
func TestRestoreRefusals(t *testing.T) {
	src := hubtest.Start(t, nil)
	src.Put("urn:backup:a", hubtest.BareTD("urn:backup:a", "A"))
	file := filepath.Join(t.TempDir(), "good.db")
	if code, _, errOut := runCLI("backup", "--hub", src.URL, "--token", hubtest.Token, file); code != exitOK {
		t.Fatalf("backup: exit %d: %s", code, errOut)
	}

	h := hubtest.Start(t, nil)
	h.Put("urn:backup:mine", hubtest.BareTD("urn:backup:mine", "Mine"))
	listing := dirListing(t, h.Dir)
	code, out, errOut := runCLI("restore", "--data-dir", h.Dir, file)
	if code != exitLocked || out != "" || !strings.Contains(errOut, "in use by another lmos-hub process") ||
		!strings.Contains(errOut, "stop the hub first") || !strings.Contains(errOut, "nothing was changed") {
		t.Errorf("restore while the hub runs: exit %d (want %d)\nstdout: %s\nstderr: %s", code, exitLocked, out, errOut)
	}
	if got := dirListing(t, h.Dir); !slices.Equal(got, listing) {
		t.Errorf("the data directory changed: %v, was %v", got, listing)
	}
	if resp, _ := h.Do(http.MethodGet, lmos.ThingPath("urn:backup:mine"), "", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("the running hub lost its Thing: %d", resp.StatusCode)
	}
	if resp, _ := h.Do(http.MethodGet, lmos.ThingPath("urn:backup:a"), "", nil, ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the running hub serves the backup's Thing: %d", resp.StatusCode)
	}
	// Without --hub, backup reads the data directory, which the hub holds.
	code, _, errOut = runCLI("backup", "--data-dir", h.Dir, filepath.Join(t.TempDir(), "x.db"))
	if code != exitLocked || !strings.Contains(errOut, "back up through it with --hub URL --token TOKEN") {
		t.Errorf("backup of a running hub's directory: exit %d: %s", code, errOut)
	}
	h.Close()

	storeBytes, err := os.ReadFile(filepath.Join(h.Dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	for name, junk := range map[string][]byte{"text": []byte("not a database\n"), "truncated": truncated(t, file)} {
		bad := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(bad, junk, 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut = runCLI("restore", "--data-dir", h.Dir, bad)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "is not a valid lmos-hub store") || !strings.Contains(errOut, "nothing was changed") {
			t.Errorf("restore of %s: exit %d (want %d)\nstdout: %s\nstderr: %s", name, code, exitUsage, out, errOut)
		}
		if b, _ := os.ReadFile(filepath.Join(h.Dir, store.FileName)); !bytes.Equal(b, storeBytes) {
			t.Errorf("restore of %s changed the store", name)
		}
		if got := dirListing(t, h.Dir); !slices.Equal(got, listing) {
			t.Errorf("restore of %s: the data directory holds %v, was %v", name, got, listing)
		}
	}
	h2 := hubtest.StartIn(t, h.Dir, nil)
	if resp, _ := h2.Do(http.MethodGet, lmos.ThingPath("urn:backup:mine"), "", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("after the refused restores the hub lost its Thing: %d", resp.StatusCode)
	}
}

// truncated is the first half of the file.
func truncated(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b[:len(b)/2]
}

func dirListing(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// The CLI backs up a stopped hub's data directory directly, and restore
// puts it into another, keeping the store it replaces.
func TestBackupStoppedDirCLI(t *testing.T) {
	h := hubtest.Start(t, nil)
	h.Put("urn:backup:stopped", hubtest.BareTD("urn:backup:stopped", "S"))
	h.Close()
	file := filepath.Join(t.TempDir(), "stopped.db")
	code, out, errOut := runCLI("backup", "--data-dir", h.Dir, file)
	if code != exitOK || !strings.Contains(out, "(1 Things)") {
		t.Fatalf("backup of a stopped dir: exit %d\n%s%s", code, out, errOut)
	}
	other := hubtest.Start(t, nil)
	other.Put("urn:backup:replaced", hubtest.BareTD("urn:backup:replaced", "R"))
	other.Close()
	code, out, errOut = runCLI("restore", "--data-dir", other.Dir, file)
	if code != exitOK || !strings.Contains(out, "kept as") {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	h2 := hubtest.StartIn(t, other.Dir, nil)
	if resp, _ := h2.Do(http.MethodGet, lmos.ThingPath("urn:backup:stopped"), "", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("restored hub: GET urn:backup:stopped = %d", resp.StatusCode)
	}
	if resp, _ := h2.Do(http.MethodGet, lmos.ThingPath("urn:backup:replaced"), "", nil, ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("restored hub still serves the replaced store's Thing: %d", resp.StatusCode)
	}
	if code, _, _ := runCLI("backup", "--help"); code != exitOK {
		t.Errorf("backup --help: exit %d", code)
	}
}

// POST /api/backup needs an admin token: none is 401, a read token 403,
// and neither streams any of the store.
func TestBackupAPIRefusals(t *testing.T) {
	h := hubtest.Start(t, nil)
	h.Put("urn:backup:secret", hubtest.BareTD("urn:backup:secret", "Secret"))
	resp, body := h.Do(http.MethodPost, "/api/tokens", "application/json", []byte(`{"name":"reader","scope":"read"}`), hubtest.Token)
	var tok struct{ Token string }
	if err := json.Unmarshal(body, &tok); err != nil || tok.Token == "" {
		t.Fatalf("create read token: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {tok.Token, http.StatusForbidden}, {"wrong-token", http.StatusUnauthorized}} {
		resp, body := h.Do(http.MethodPost, "/api/backup", "", nil, c.token)
		if resp.StatusCode != c.want || resp.Header.Get("Content-Type") != lmos.MediaProblem ||
			bytes.Contains(body, []byte("urn:backup:secret")) || resp.Header.Get("Content-Disposition") != "" {
			t.Errorf("POST /api/backup with %q: %d %s %q, want %d and a problem only", c.token, resp.StatusCode,
				resp.Header.Get("Content-Type"), body, c.want)
		}
	}
	resp, body = h.Do(http.MethodPost, "/api/backup", "", nil, hubtest.Token)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("urn:backup:secret")) ||
		!strings.HasPrefix(resp.Header.Get("Content-Disposition"), `attachment; filename="lmos-hub-`) {
		t.Errorf("POST /api/backup with the admin token: %d %v (%d bytes)", resp.StatusCode, resp.Header, len(body))
	}
	// The CLI says what to do about a refused token.
	code, _, errOut := runCLI("backup", "--hub", h.URL, "--token", tok.Token, filepath.Join(t.TempDir(), "x.db"))
	if code != exitFailure || !strings.Contains(errOut, "403") || !strings.Contains(errOut, "pass an admin token") {
		t.Errorf("backup with a read token: exit %d: %s", code, errOut)
	}
}
