package app

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"path/filepath"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// HubKeyFile is the hub's own key in the data directory (PROTOCOL §6 key
// file, mode 0600).
const HubKeyFile = "hub-key.json"

// openIdentity loads the hub's own did:key, generating it on first start.
// It runs after the store, whose lock keeps a second hub on the same data
// directory from racing it. The hub signs its directory TD with it (and,
// later, the credentials it issues).
func (m *Main) openIdentity(context.Context) error {
	priv, created, err := proof.LoadOrCreateKey(filepath.Join(m.Config.DataDir, HubKeyFile))
	if err != nil {
		return fmt.Errorf("the hub's key: %w", err)
	}
	m.Key = priv
	did := proof.DID(priv.Public().(ed25519.PublicKey))
	if created {
		m.Logger.Info("created the hub's key", "did", did, "file", filepath.Join(m.Config.DataDir, HubKeyFile))
	}
	return nil
}

// DID is the hub's did:key (after Run).
func (m *Main) DID() string {
	if m.Key == nil {
		return ""
	}
	return proof.DID(m.Key.Public().(ed25519.PublicKey))
}
