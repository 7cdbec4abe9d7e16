package hub

import "time"

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
)

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

// LagSeconds is Lag for JSON and metrics.
func (s LinkState) LagSeconds() float64 { return s.Lag.Seconds() }
