package app

import (
	"context"
	"time"

	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
)

// openPull starts mirroring the remote directory's Things (sync.url,
// sync.pull); nothing when sync.pull is empty. The Puller runs until
// Close, retrying a remote that fails; its mirrors stay when it stops.
func (m *Main) openPull(context.Context) error {
	cfg := m.Config
	if cfg.Sync.Pull == "" || cfg.Sync.URL == "" {
		return nil
	}
	p, err := dirsync.NewPuller(dirsync.PullConfig{
		URL:        cfg.Sync.URL,
		Token:      cfg.Sync.Token,
		JSONPath:   cfg.Sync.Pull,
		Registry:   m.Registry,
		Logger:     m.Logger.With("component", "sync"),
		Interval:   time.Duration(cfg.Sync.Interval),
		MaxTDBytes: cfg.Registry.MaxTDBytes,
		// 0 (unlimited here) keeps the Puller's own bound.
		MaxThings: cfg.Registry.MaxThings,
	})
	if err != nil {
		return err
	}
	m.Pull = p
	m.addLinks(func() []hub.LinkState { return []hub.LinkState{p.State()} })
	p.Start()
	m.onClose("sync pull", func(context.Context) error { return p.Close() })
	return nil
}
