package app

import (
	"context"

	"github.com/eclipse-lmos/lmos-hub/federation"
	"github.com/eclipse-lmos/lmos-hub/hub"
)

// openPeers loads the paired hubs (PROTOCOL §9.1): the HTTP adapter
// authenticates their signed requests and manages them, and interactions
// with the Things mirrored from them are forwarded to them.
func (m *Main) openPeers(context.Context) error {
	peers, err := hub.NewPeers(m.DB, m.DID(), m.Config.Federation.MaxPeers, m.Now)
	if err != nil {
		return err
	}
	m.Peers = peers
	m.Router.Handle(hub.SourceRemote, federation.NewForwarder(m.Key, peers))
	return nil
}
