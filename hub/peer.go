package hub

import (
	"cmp"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// Peers of the federation (PROTOCOL §9 "Federation"): other lmos-hub
// instances an administrator paired with this one. Pairing is one-sided
// (each hub's admin pairs the other): a paired peer's signed requests
// (lmos.VerifyPeer) have the rights of an operate token here, and this hub
// mirrors the peer's own Things.

// DefaultMaxPeers is federation.maxPeers's default: each peer holds a
// mirror (a change feed) open, and every Thing of each is listed here.
const DefaultMaxPeers = 32

// maxPeerURL bounds a peer's URL.
const maxPeerURL = 1024

// Peer is a paired hub.
type Peer struct {
	DID   string    `json:"did"`   // its did:key (the key it signs with)
	URL   string    `json:"url"`   // its HTTP base URL, without a trailing '/'
	Added time.Time `json:"added"` // when it was paired
}

// PeerStore keeps the paired peers durably.
type PeerStore interface {
	LoadPeers(fn func(Peer) error) error
	PutPeer(Peer) error
	DeletePeer(did string) error
}

// Peers is the set of paired peers, read from its store at start and
// kept in memory (every peer request asks Paired). Safe for concurrent
// use.
type Peers struct {
	store PeerStore
	self  string // this hub's DID, which is never a peer
	max   int
	now   func() time.Time

	mu       sync.RWMutex
	byDID    map[string]Peer
	watchers []func(Peer, bool)
}

// NewPeers loads the paired peers of s. self is this hub's own DID; max
// bounds the number of peers (0: DefaultMaxPeers).
func NewPeers(s PeerStore, self string, max int, now func() time.Time) (*Peers, error) {
	if max <= 0 {
		max = DefaultMaxPeers
	}
	if now == nil {
		now = time.Now
	}
	p := &Peers{store: s, self: self, max: max, now: now, byDID: map[string]Peer{}}
	err := s.LoadPeers(func(peer Peer) error {
		p.byDID[peer.DID] = peer
		return nil
	})
	if err != nil {
		return nil, &Error{Code: EINTERNAL, Message: "cannot load the paired peers", Err: err}
	}
	return p, nil
}

// Max is the bound on the number of peers.
func (p *Peers) Max() int { return p.max }

// ValidatePeer checks and normalises a peer to pair: its URL an absolute
// http(s) URL without credentials, query or fragment (a trailing '/' is
// dropped), its DID an Ed25519 did:key that is not self.
func ValidatePeer(rawURL, did, self string) (Peer, error) {
	var fields []FieldError
	u, err := url.Parse(rawURL)
	switch {
	case rawURL == "":
		fields = append(fields, FieldError{Field: "/url", Description: "required: the peer's HTTP base URL, such as http://other-hub:8080"})
	case len(rawURL) > maxPeerURL:
		fields = append(fields, FieldError{Field: "/url", Description: "longer than 1024 bytes"})
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		fields = append(fields, FieldError{Field: "/url", Description: "not an absolute http or https URL"})
	case u.User != nil:
		fields = append(fields, FieldError{Field: "/url", Description: "must not carry credentials: peers authenticate by their keys"})
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(rawURL, "#"):
		fields = append(fields, FieldError{Field: "/url", Description: "must have no query or fragment: it is the peer's base URL"})
	}
	if d, _, err := proof.ParseDID(did); err != nil || d != did {
		fields = append(fields, FieldError{Field: "/did", Description: "not an Ed25519 did:key (the peer's DID is in its /api/status and directory TD)"})
	} else if did == self {
		fields = append(fields, FieldError{Field: "/did", Description: "this hub's own DID: a hub is not its own peer"})
	}
	if len(fields) > 0 {
		return Peer{}, &Error{Code: EINVALID, Message: "invalid peer", Fields: fields}
	}
	return Peer{DID: did, URL: strings.TrimSuffix(u.String(), "/")}, nil
}

// Add pairs the hub at rawURL whose key is did. Pairing a peer again with
// the same URL changes nothing (created false); a DID paired with another
// URL, or a URL paired with another DID, is a conflict (unpair first).
func (p *Peers) Add(rawURL, did string) (Peer, bool, error) {
	peer, err := ValidatePeer(rawURL, did, p.self)
	if err != nil {
		return Peer{}, false, err
	}
	p.mu.Lock()
	if old, ok := p.byDID[peer.DID]; ok {
		p.mu.Unlock()
		if old.URL == peer.URL {
			return old, false, nil
		}
		return Peer{}, false, Errorf(ECONFLICT, "peer %s is already paired at %s; unpair it first to change its URL", old.DID, old.URL)
	}
	for _, o := range p.byDID {
		if o.URL == peer.URL {
			p.mu.Unlock()
			return Peer{}, false, Errorf(ECONFLICT, "%s is already paired as peer %s; unpair it first", o.URL, o.DID)
		}
	}
	if len(p.byDID) >= p.max {
		p.mu.Unlock()
		e := Errorf(EFULL, "this hub is paired with %d peers, the most it may be (federation.maxPeers); unpair one first", len(p.byDID))
		e.Limit = "federation.maxPeers"
		return Peer{}, false, e
	}
	peer.Added = p.now().UTC().Truncate(time.Second)
	if err := p.store.PutPeer(peer); err != nil {
		p.mu.Unlock()
		return Peer{}, false, &Error{Code: EINTERNAL, Message: "cannot store the peer", Err: err}
	}
	p.byDID[peer.DID] = peer
	watchers := slices.Clone(p.watchers)
	p.mu.Unlock()
	for _, w := range watchers {
		w(peer, true)
	}
	return peer, true, nil
}

// Remove unpairs the peer did (ENOTFOUND when it is not paired).
func (p *Peers) Remove(did string) (Peer, error) {
	p.mu.Lock()
	peer, ok := p.byDID[did]
	if !ok {
		p.mu.Unlock()
		return Peer{}, Errorf(ENOTFOUND, "no paired peer %q", did)
	}
	if err := p.store.DeletePeer(did); err != nil {
		p.mu.Unlock()
		return Peer{}, &Error{Code: EINTERNAL, Message: "cannot delete the peer", Err: err}
	}
	delete(p.byDID, did)
	watchers := slices.Clone(p.watchers)
	p.mu.Unlock()
	for _, w := range watchers {
		w(peer, false)
	}
	return peer, nil
}

// List returns the paired peers, oldest pairing first.
func (p *Peers) List() []Peer {
	p.mu.RLock()
	out := make([]Peer, 0, len(p.byDID))
	for _, peer := range p.byDID {
		out = append(out, peer)
	}
	p.mu.RUnlock()
	slices.SortFunc(out, func(a, b Peer) int {
		return cmp.Or(a.Added.Compare(b.Added), strings.Compare(a.DID, b.DID))
	})
	return out
}

// Get returns the paired peer did.
func (p *Peers) Get(did string) (Peer, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	peer, ok := p.byDID[did]
	return peer, ok
}

// Paired reports whether did is a paired peer's DID.
func (p *Peers) Paired(did string) bool {
	_, ok := p.Get(did)
	return ok
}

// Watch calls fn after each pairing (paired true) and unpairing, in the
// goroutine that made the change. It returns the peers paired when it
// was called, so a watcher misses none.
func (p *Peers) Watch(fn func(peer Peer, paired bool)) []Peer {
	p.mu.Lock()
	p.watchers = append(p.watchers, fn)
	p.mu.Unlock()
	return p.List()
}
