package app

import (
	"context"
	"fmt"
	"time"

	"github.com/eclipse-lmos/lmos-hub/dirsync"
	"github.com/eclipse-lmos/lmos-hub/hub"
)

// syncOutbox names the store's outbox of the push to sync.url. One name
// whatever the URL: a change of remote keeps the pending changes, which
// apply there as well, and the start's reconciliation queues the rest.
const syncOutbox = "sync"

// openSync starts pushing the local Things to sync.url (PROTOCOL §9). It
// opens last: a remote that is down or slow delays nothing, since what
// waits is in the outbox.
func (m *Main) openSync(context.Context) error {
	cfg := m.Config.Sync
	if cfg.URL == "" {
		return nil
	}
	p, err := dirsync.NewPusher(m.Registry, m.DB.Outbox(syncOutbox), dirsync.PushConfig{
		URL: cfg.URL, Token: cfg.Token, Interval: time.Duration(cfg.Interval), TTL: time.Duration(cfg.TTL),
		Logger: m.Logger,
	})
	if err != nil {
		return fmt.Errorf("sync.url: %w", err)
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("cannot start sync to %s: %w", cfg.URL, err)
	}
	m.Sync = p
	m.addLinks(func() []hub.LinkState { return []hub.LinkState{p.State()} })
	m.onClose("sync push", p.Close)
	return nil
}
