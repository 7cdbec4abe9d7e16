package app

import (
	"context"
	"net/http"

	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/federation"
	"github.com/eclipse-lmos/lmos-hub/hub"
)

// openPeers loads the paired hubs (PROTOCOL §9.1) and starts mirroring
// each one's Things (a dirsync.Puller per peer, its requests signed with
// the hub's key); interactions with those Things are forwarded to their
// hub. The HTTP adapter authenticates the peers' signed requests and
// manages the pairings.
func (m *Main) openPeers(context.Context) error {
	peers, err := hub.NewPeers(m.DB, m.DID(), m.Config.Federation.MaxPeers, m.Now)
	if err != nil {
		return err
	}
	m.Peers = peers
	m.Router.Handle(hub.SourceRemote, federation.NewForwarder(m.Key, peers))
	log := m.Logger.With("component", "federation")
	m.Federation = federation.New(federation.Config{Key: m.Key, Peers: peers, Registry: m.Registry, Logger: log,
		NewMirror: func(p hub.Peer, authorize func(*http.Request), own func(map[string]any) bool, reg federation.MirrorRegistry) (federation.Mirror, error) {
			return dirsync.NewPuller(dirsync.PullConfig{URL: p.URL, From: p.URL, Authorize: authorize, Filter: own,
				Registry: reg, Logger: log.With("peer", p.DID)})
		}})
	m.Federation.Start()
	m.addLinks(m.Federation.States)
	m.onClose("federation", func(context.Context) error { return m.Federation.Close() })
	return nil
}
