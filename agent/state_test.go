package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// Credentials are kept 0600 and read back for the same Thing only; a
// corrupt file is an error the agent logs (it joins anew), a missing one
// none; a save replaces the file whole.
func TestKeptCredentials(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if c, err := loadCredentials(dir, "urn:a"); c != nil || err != nil {
		t.Fatalf("nothing kept: %v %v", c, err)
	}
	if err := saveCredentials(dir, Credentials{Username: "urn:a", Password: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := saveCredentials(dir, Credentials{Username: "urn:a", Password: "two"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, CredentialsFileName)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v", fi, err)
	}
	if c, err := loadCredentials(dir, "urn:a"); err != nil || c == nil || c.Password != "two" {
		t.Fatalf("kept: %+v %v", c, err)
	}
	if c, err := loadCredentials(dir, "urn:b"); c != nil || err != nil {
		t.Fatalf("another Thing's credentials used: %+v %v", c, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := loadCredentials(dir, "urn:a"); c != nil || err == nil {
		t.Fatalf("corrupt file: %+v %v", c, err)
	}
}
