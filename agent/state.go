package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CredentialsFileName is the file in Options.StateDir that keeps the MQTT
// credentials the hub issued at the agent's join (mode 0600, beside the
// key): an agent restarted with the same StateDir reconnects with them
// instead of joining again, which a hub refuses for a Thing whose
// credentials another client would need (PROTOCOL §4.4).
const CredentialsFileName = "credentials.json"

// loadCredentials returns the credentials kept in dir for the Thing whose
// topic key is tid; nil when none are kept, or they are another Thing's
// (the agent's id changed).
func loadCredentials(dir, tid string) (*Credentials, error) {
	b, err := os.ReadFile(filepath.Join(dir, CredentialsFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the agent's credentials: %w", err)
	}
	var c Credentials
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("cannot read the agent's credentials in %s: %w", filepath.Join(dir, CredentialsFileName), err)
	}
	if c.Username != tid || c.Password == "" {
		return nil, nil
	}
	return &c, nil
}

// saveCredentials keeps c in dir: written aside with mode 0600, then
// renamed over the old file, so a crash leaves either the old credentials
// or the new ones, never half a file.
func saveCredentials(dir string, c Credentials) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create the agent's state directory: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, CredentialsFileName), append(b, '\n')); err != nil {
		return fmt.Errorf("cannot keep the agent's credentials: %w", err)
	}
	return nil
}
