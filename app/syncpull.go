package app

import (
	"context"
	"time"

	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
)

// openPull starts mirroring the remote directory's Things (sync.url,
// sync.pull); nothing when sync.pull is empty. The Puller runs until
// Close, retrying a remote that fails; its mirrors stay when it stops,
// and go at the next start without it (dropStaleMirrors).
func (m *Main) openPull(ctx context.Context) error {
	cfg := m.Config
	if cfg.Sync.Pull == "" || cfg.Sync.URL == "" {
		m.dropStaleMirrors(ctx, "")
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
	m.dropStaleMirrors(ctx, p.From())
	m.addLinks(func() []hub.LinkState { return []hub.LinkState{p.State()} })
	p.Start()
	m.onClose("sync pull", func(context.Context) error { return p.Close() })
	return nil
}

// dropStaleMirrors deletes the mirrors of directories the hub no longer
// mirrors: a sync.pull removed or pointed elsewhere, a peer unpaired while
// the hub was down. pulled is the sync pull's source ("" when none); the
// paired peers' are kept. Mirrors are read-only to everyone, so without
// this they would stay for good.
func (m *Main) dropStaleMirrors(ctx context.Context, pulled string) {
	keep := map[string]bool{pulled: pulled != ""}
	if m.Peers != nil {
		for _, p := range m.Peers.List() {
			keep[p.URL] = true
		}
	}
	for _, from := range m.Registry.MirrorSources() {
		if keep[from] {
			continue
		}
		ids := m.Registry.MirroredFrom(from)
		for _, id := range ids {
			if err := m.Registry.Unmirror(ctx, id, from); err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
				m.Logger.Warn("cannot remove a stale mirror", "id", id, "from", from, "err", err)
			}
		}
		m.Logger.Info("mirrors of a directory no longer pulled removed", "from", from, "things", len(ids))
	}
}
