package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// TestReadmeTour runs the README's five-minute tour (the sh block after
// "<!-- tour -->") with bash against a fresh hub, as a person pastes it,
// and checks what each step printed: the tour cannot drift from the hub.
func TestReadmeTour(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example agent")
	}
	for _, tool := range []string{"bash", "curl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" || os.Getenv("LMOS_INTEROP") == "1" {
				t.Fatalf("%s not found: %v", tool, err)
			}
			t.Skipf("the tour needs %s", tool)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- tour -->\n```sh\n")
	block, _, ok2 := strings.Cut(after, "\n```\n")
	if !ok || !ok2 {
		t.Fatal("README.md has no sh block after <!-- tour -->")
	}
	h := startHub(t, nil)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TOKEN="+hubtest.Token, "HUB="+h.URL, "MQTT=mqtt://"+h.Main.MQTTAddr.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		err = <-done
	}
	got := out.String()
	if err != nil {
		t.Fatalf("the tour failed: %v\n%s", err, got)
	}
	for _, want := range []string{
		"lamp registered: 201",
		"thermostat online",
		`"title":"Desk lamp"`,
		"urn:example:thermostat",                     // search and the list find it
		`"target":21`,                                // setTarget's output
		`"status":"completed"`, `"status":"skipped"`, // one result per member
		"group dissolved: 204",
		"event: thing_updated", "Reading lamp",
		`"things":`,
		"lamp deleted: 204",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the tour's output lacks %q:\n%s", want, got)
		}
	}
}
