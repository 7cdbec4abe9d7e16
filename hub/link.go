package hub

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"
)

// Link kinds: the hub's connections beyond itself (PROTOCOL §9).
const (
	LinkSync   = "sync"   // push of local Things to a remote directory
	LinkPull   = "pull"   // mirror of a remote directory's Things
	LinkBridge = "bridge" // MQTT bridge to an upstream broker
	LinkPeer   = "peer"   // a paired hub of the federation
)

// Link states.
const (
	LinkConnected  = "connected"  // the last exchange succeeded
	LinkConnecting = "connecting" // starting, or retrying after a failure
	LinkDown       = "down"       // the last attempt failed; a retry is scheduled
	// LinkRemoved is only ever told in a link event: the link is gone
	// (a peer unpaired, the hub reconfigured).
	LinkRemoved = "removed"
)

// EventLink reports that a link changed state or met a new error. A hub
// event, like presence: announced live, not logged.
const EventLink EventType = "link"

// LinkState is what one link to the world beyond the hub reports for
// /api/status, /metrics, the hub feed, the dashboard and the CLI. Every
// adapter that talks to another directory, broker or hub reports its
// links in this one shape, so that each door shows them alike.
type LinkState struct {
	Kind  string `json:"kind"`  // LinkSync, LinkPull, LinkBridge, LinkPeer
	Name  string `json:"name"`  // unique per kind: the remote's URL, a peer's DID
	URL   string `json:"url"`   // where it connects, without credentials
	State string `json:"state"` // LinkConnected, LinkConnecting, LinkDown
	// Outbox counts the changes or messages waiting to be sent.
	Outbox int `json:"outbox"`
	// Lag is how far behind the remote the link is: the age of the oldest
	// change not yet applied on the other side (0 when none waits).
	// JSON carries it as lagSeconds.
	Lag time.Duration `json:"-"`
	// Things counts the Things this link carries: pushed, or mirrored here.
	Things int `json:"things"`
	// Sent and Received count what crossed the link (changes, messages).
	Sent     uint64 `json:"sent"`
	Received uint64 `json:"received"`
	// Errors counts failed attempts; LastError is the latest one's text.
	Errors      uint64    `json:"errors"`
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	LastSuccess time.Time `json:"lastSuccess,omitzero"`
}

// MarshalJSON writes s with Lag as lagSeconds.
func (s LinkState) MarshalJSON() ([]byte, error) {
	type plain LinkState // without this method
	return json.Marshal(struct {
		plain
		LagSeconds float64 `json:"lagSeconds"`
	}{plain(s), s.Lag.Seconds()})
}

// SortLinks orders links by kind, then name: the order every door shows.
func SortLinks(links []LinkState) {
	slices.SortFunc(links, func(a, b LinkState) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
}

// WatchLinks announces a link event on reg's feed whenever a link of
// states appears, changes state, meets a new error or goes away, looking
// every interval until ctx ends. Links report their state when asked
// (State methods) rather than calling back, so a slow feed never holds a
// link up; one look a second costs a Pi nothing.
func WatchLinks(ctx context.Context, reg *Registry, interval time.Duration, states func() []LinkState) {
	type key struct{ kind, name string }
	type seen struct{ state, lastError string }
	last := map[key]seen{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		now := map[key]seen{}
		cur := states()
		SortLinks(cur)
		for _, s := range cur {
			k, v := key{s.Kind, s.Name}, seen{s.State, s.LastError}
			now[k] = v
			if old, ok := last[k]; !ok || old != v {
				reg.Announce(Event{Type: EventLink, ID: s.Name, Link: &s})
			}
		}
		for k := range last {
			if _, ok := now[k]; !ok {
				reg.Announce(Event{Type: EventLink, ID: k.name, Link: &LinkState{Kind: k.kind, Name: k.name, State: LinkRemoved}})
			}
		}
		last = now
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
