package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/agent"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest/mqttclient"
)

// asThermostat makes the test binary, started with this variable set, the
// thermostat command itself: main with the arguments after "--".
const asThermostat = "LMOS_TEST_RUN_THERMOSTAT"

func TestMain(m *testing.M) {
	if os.Getenv(asThermostat) == "1" {
		args := os.Args
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		os.Args = append([]string{"thermostat"}, args...)
		flag.CommandLine = flag.NewFlagSet("thermostat", flag.ExitOnError)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// thermostatProc is the thermostat command running as its own process.
type thermostatProc struct {
	cmd    *exec.Cmd
	stderr *hubtest.SyncBuffer
	done   chan error
}

// startThermostat starts the thermostat command with args; config is its
// user configuration directory (XDG_CONFIG_HOME), where it keeps its state
// by default.
func startThermostat(t *testing.T, config string, args ...string) *thermostatProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), asThermostat+"=1", "XDG_CONFIG_HOME="+config, "HOME="+config)
	p := &thermostatProc{cmd: cmd, stderr: &hubtest.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

// stop ends the thermostat as Ctrl-C does and waits for it to exit 0.
func (p *thermostatProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("thermostat exited: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("thermostat did not stop\n%s", p.stderr.String())
	}
}

// waitOnline waits until the hub records the Thing online by its agent;
// it fails when the thermostat exits first.
func waitOnline(t *testing.T, reg *hub.Registry, id string, p *thermostatProc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Online at the hub, and past Connect in the process (a signal
		// before that ends it with Connect's error).
		th, err := reg.Get(id)
		if err == nil && th.Meta.Presence.Status == hub.PresenceOnline && strings.Contains(p.stderr.String(), "thermostat running") {
			return
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("thermostat exited (%v) before it was online:\n%s", err, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("thermostat not online:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitExit waits for the thermostat to exit by itself and returns its
// error (an *exec.ExitError for a non-zero status).
func (p *thermostatProc) waitExit(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("thermostat still running:\n%s", p.stderr.String())
	}
	return nil
}

// restartHub is a hub as main starts it and the URL of the door door
// ("mqtt" or "ws").
func restartHub(t *testing.T, door string) (*hubtest.Hub, string) {
	h := hubtest.Start(t, nil)
	if door == "ws" {
		return h, "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"
	}
	return h, "mqtt://" + h.MQTTAddr()
}

// TestThermostatRestarts starts the thermostat command twice against one
// hub, over MQTT and WebSocket, with its default state directory and with
// one given: the second start gets back in by itself.
func TestThermostatRestarts(t *testing.T) {
	for _, door := range []string{"mqtt", "ws"} {
		for _, explicit := range []bool{false, true} {
			name := door + "/default-state"
			if explicit {
				name = door + "/state-flag"
			}
			t.Run(name, func(t *testing.T) {
				h, url := restartHub(t, door)
				config := t.TempDir()
				const id = "urn:lmos:example:thermostat:restart"
				args := []string{"-hub", url, "-id", id, "-tick", "50ms"}
				stateDir := filepath.Join(config, "lmos-thermostat", "urn_lmos_example_thermostat_restart")
				if explicit {
					stateDir = filepath.Join(t.TempDir(), "state")
					args = append(args, "-state", stateDir)
				}
				for start := range 3 {
					p := startThermostat(t, config, args...)
					waitOnline(t, h.Main.Registry, id, p)
					p.stop(t)
					waitPresence(t, h.Main.Registry, id, hub.PresenceOffline)
					th, err := h.Main.Registry.Get(id)
					if err != nil || th.Meta.Verified == "" {
						t.Fatalf("start %d: the Thing is not verified by the agent's key: %+v %v", start, th.Meta, err)
					}
				}
				if _, err := os.Stat(filepath.Join(stateDir, agent.KeyFileName)); err != nil {
					t.Fatalf("no key in the state directory: %v", err)
				}
				fi, err := os.Stat(filepath.Join(stateDir, agent.CredentialsFileName))
				if door == "ws" {
					if err == nil {
						t.Fatal("a WebSocket agent kept MQTT credentials it was never issued")
					}
					return
				}
				if err != nil {
					t.Fatalf("the credentials were not kept: %v", err)
				}
				if fi.Mode().Perm() != 0o600 {
					t.Fatalf("credentials file mode %v, want 0600", fi.Mode().Perm())
				}
				// The kept credentials are the ones the hub holds.
				var c agent.Credentials
				b, _ := os.ReadFile(filepath.Join(stateDir, agent.CredentialsFileName))
				if err := json.Unmarshal(b, &c); err != nil || c.Username != lmos.TopicKey(id) {
					t.Fatalf("kept credentials %s: %v", b, err)
				}
				if got, want := credHash(t, h, id), hashOf(c.Password); got != want {
					t.Fatalf("the hub holds credential %s, the agent kept %s", got, want)
				}
			})
		}
	}
}

func hashOf(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// credHash is the hash of the Thing's credential the hub stores ("" none).
func credHash(t *testing.T, h *hubtest.Hub, id string) string {
	t.Helper()
	got, err := h.Main.DB.CredentialHash(id)
	if hub.ErrorCode(err) == hub.ENOTFOUND {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestThermostatWithoutState: a thermostat that keeps nothing (-state "")
// proves nothing at its second start over MQTT: the hub refuses it with a
// problem that names the admin's command, the thermostat exits 1 saying
// so, and nothing stored changes; after the admin's reset it gets in again.
// Over WebSocket it needs no credential and comes back at once.
func TestThermostatWithoutState(t *testing.T) {
	const id = "urn:lmos:example:thermostat:nostate"
	t.Run("ws", func(t *testing.T) {
		h, url := restartHub(t, "ws")
		config := t.TempDir()
		for range 2 {
			p := startThermostat(t, config, "-hub", url, "-id", id, "-tick", "50ms", "-state", "")
			waitOnline(t, h.Main.Registry, id, p)
			p.stop(t)
			waitPresence(t, h.Main.Registry, id, hub.PresenceOffline)
		}
	})
	t.Run("mqtt", func(t *testing.T) {
		h, url := restartHub(t, "mqtt")
		config := t.TempDir()
		args := []string{"-hub", url, "-id", id, "-tick", "50ms", "-state", ""}
		p := startThermostat(t, config, args...)
		waitOnline(t, h.Main.Registry, id, p)
		p.stop(t)
		waitPresence(t, h.Main.Registry, id, hub.PresenceOffline)
		before, err := h.Main.Registry.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		beforeRaw, _ := h.Main.Registry.Raw(id)
		hash := credHash(t, h, id)
		if hash == "" {
			t.Fatal("the first join left no credential")
		}
		entries, _ := os.ReadDir(config)
		if len(entries) != 0 {
			t.Fatalf("-state \"\" kept %v", entries)
		}

		p = startThermostat(t, config, args...)
		var ee *exec.ExitError
		if err := p.waitExit(t); !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("second start without state: %v, want exit 1\n%s", err, p.stderr.String())
		}
		out := p.stderr.String()
		if !strings.Contains(out, "Forbidden") || !strings.Contains(out, "lmos-hub things reset-credential") {
			t.Fatalf("the refusal does not say what to do:\n%s", out)
		}
		after, err := h.Main.Registry.Get(id)
		afterRaw, _ := h.Main.Registry.Raw(id)
		if err != nil || !bytes.Equal(afterRaw, beforeRaw) || after.Meta.Modified != before.Meta.Modified || credHash(t, h, id) != hash {
			t.Fatalf("the refused join changed what is stored: %v", err)
		}

		// The admin resets the credential (with the CLI's API call).
		if resp, body := h.Do(http.MethodDelete, "/api/things/"+id+"/credential", "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("reset: %d %s", resp.StatusCode, body)
		}
		p = startThermostat(t, config, args...)
		waitOnline(t, h.Main.Registry, id, p)
		if got := credHash(t, h, id); got == "" || got == hash {
			t.Fatalf("after the reset the Thing holds %q (before %q), want a new credential", got, hash)
		}
		p.stop(t)
	})
}

// TestThermostatLostCredentials: a thermostat whose credentials file is
// gone but whose key is kept gets back in by its key's proof over MQTT; the
// hub issues a new credential and the old one stops working.
func TestThermostatLostCredentials(t *testing.T) {
	h, url := restartHub(t, "mqtt")
	const id = "urn:lmos:example:thermostat:lost"
	state := t.TempDir()
	args := []string{"-hub", url, "-id", id, "-tick", "50ms", "-state", state}
	p := startThermostat(t, t.TempDir(), args...)
	waitOnline(t, h.Main.Registry, id, p)
	p.stop(t)
	waitPresence(t, h.Main.Registry, id, hub.PresenceOffline)
	b, err := os.ReadFile(filepath.Join(state, agent.CredentialsFileName))
	if err != nil {
		t.Fatal(err)
	}
	var old agent.Credentials
	if err := json.Unmarshal(b, &old); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(state, agent.CredentialsFileName)); err != nil {
		t.Fatal(err)
	}

	p = startThermostat(t, t.TempDir(), args...)
	waitOnline(t, h.Main.Registry, id, p)
	b, err = os.ReadFile(filepath.Join(state, agent.CredentialsFileName))
	if err != nil {
		t.Fatalf("the new credentials were not kept: %v", err)
	}
	var fresh agent.Credentials
	if err := json.Unmarshal(b, &fresh); err != nil || fresh.Password == old.Password {
		t.Fatalf("kept %s after the re-join: %v", b, err)
	}
	if got := credHash(t, h, id); got != hashOf(fresh.Password) {
		t.Fatal("the hub does not hold the new credential")
	}
	// The old credential no longer connects.
	if _, ack, err := mqttclient.Dial(t, h.MQTTAddr(), mqttclient.WithCreds(old.Username, old.Password)); err == nil || ack == nil || (ack.ReasonCode != 0x86 && ack.ReasonCode != 0x87) {
		t.Fatalf("the old credential connects: %+v %v", ack, err)
	}
	p.stop(t)
}
