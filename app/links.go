package app

import (
	"context"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// linkWatchInterval is how often the hub looks at its links' states to
// announce changes on the feed (hub.WatchLinks).
const linkWatchInterval = time.Second

// links are the sources of the hub's links beyond itself: sync, pull,
// bridge and peers each add theirs when they open.
type links struct {
	mu      sync.Mutex
	sources []func() []hub.LinkState
}

// addLinks makes the links f reports part of the hub's (Main.Links).
func (m *Main) addLinks(f func() []hub.LinkState) {
	m.links.mu.Lock()
	defer m.links.mu.Unlock()
	m.links.sources = append(m.links.sources, f)
}

// Links reports the state of every link of the hub, in the order
// hub.SortLinks gives; empty (not nil) when there is none.
func (m *Main) Links() []hub.LinkState {
	m.links.mu.Lock()
	sources := m.links.sources
	m.links.mu.Unlock()
	out := []hub.LinkState{}
	for _, f := range sources {
		out = append(out, f()...)
	}
	hub.SortLinks(out)
	return out
}

// openLinkWatch announces the links' changes on the hub feed; it opens
// after every component that has links.
func (m *Main) openLinkWatch(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		hub.WatchLinks(ctx, m.Registry, linkWatchInterval, m.Links)
	}()
	m.onClose("link watch", func(context.Context) error {
		cancel()
		<-done
		return nil
	})
	return nil
}
