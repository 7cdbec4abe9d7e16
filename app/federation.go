package app

import (
	"context"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// openPeers loads the paired hubs (PROTOCOL §9 "Federation"): the HTTP
// adapter authenticates their signed requests and manages them.
func (m *Main) openPeers(context.Context) error {
	peers, err := hub.NewPeers(m.DB, m.DID(), m.Config.Federation.MaxPeers, m.Now)
	if err != nil {
		return err
	}
	m.Peers = peers
	return nil
}
