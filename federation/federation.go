package federation

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Mirror is one running mirror of a peer's Things (app makes it a
// dirsync.Puller).
type Mirror interface {
	Start()
	// Close stops the mirror and waits for it; its mirrored Things stay.
	Close() error
	State() hub.LinkState
}

// MirrorFactory makes the mirror into reg of the Things of peer that own
// accepts (the TD as the peer serves it), whose every request authorize
// signs.
type MirrorFactory func(peer hub.Peer, authorize func(*http.Request), own func(doc map[string]any) bool, reg MirrorRegistry) (Mirror, error)

// MirrorRegistry is what a mirror writes to (dirsync.Registry).
type MirrorRegistry interface {
	Mirror(ctx context.Context, id string, raw []byte, from string) (created bool, err error)
	Unmirror(ctx context.Context, id, from string) error
	MirroredFrom(from string) []string
}

// Registry is what the federation needs of the local registry
// (hub.Registry): an unpaired peer's mirrors leave, the presence of its
// Things follows its hub feed.
type Registry interface {
	PresenceSetter
	MirrorRegistry
}

// Config configures a Federation; every member is required but Logger.
type Config struct {
	Key       ed25519.PrivateKey // the hub's own, which its requests are signed with
	Peers     PeerList
	Registry  Registry
	NewMirror MirrorFactory
	Logger    *slog.Logger
}

// Federation keeps one mirror per paired peer: pairing starts it,
// unpairing stops it and removes the peer's mirrored Things.
type Federation struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client

	mu     sync.Mutex
	links  map[string]*link // by the peer's DID
	closed bool
}

// link is one paired peer's mirror.
type link struct {
	peer   hub.Peer
	mirror Mirror
	err    error // the mirror could not be made
	stop   context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	mqtt   string // the peer's broker, from its directory TD
	// known is the presence of the peer's Things as its hub feed last
	// told (by id): a mirror written after the event that told it gets it
	// too, whichever of the two connections was faster.
	known map[string]string
}

// New returns a Federation; Start starts its mirrors.
func New(cfg Config) *Federation {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Federation{cfg: cfg, log: cfg.Logger, client: NewForwarder(cfg.Key, cfg.Peers).client, links: map[string]*link{}}
}

// Start mirrors every paired peer, and from now on each one paired.
func (f *Federation) Start() {
	for _, p := range f.cfg.Peers.Watch(f.changed) {
		f.start(p)
	}
}

// changed follows a pairing or unpairing (hub.Peers.Watch).
func (f *Federation) changed(p hub.Peer, paired bool) {
	if paired {
		f.start(p)
		return
	}
	f.stop(p.DID)
	// The unpaired peer's Things leave with it.
	for _, id := range f.cfg.Registry.MirroredFrom(p.URL) {
		if err := f.cfg.Registry.Unmirror(context.Background(), id, p.URL); err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
			f.log.Warn("cannot remove a mirror of an unpaired peer", "id", id, "peer", p.DID, "err", err)
		}
	}
}

// OwnThing reports whether a TD as a peer serves it is the peer's own
// Thing, not one it mirrors: only those are mirrored, so that no Thing
// goes round (three hubs pairing each other list each Thing once).
func OwnThing(doc map[string]any) bool {
	origin, _ := doc["lmos:origin"].(map[string]any)
	src, _ := origin["source"].(string)
	return src != string(hub.SourceRemote)
}

func (f *Federation) start(p hub.Peer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.links[p.DID] != nil {
		return
	}
	l := &link{peer: p, done: make(chan struct{}), known: map[string]string{}}
	// The Puller's requests are GETs: no body, so signing cannot fail.
	authorize := func(r *http.Request) { _ = lmos.SignPeerRequest(r, f.cfg.Key, time.Now()) }
	l.mirror, l.err = f.cfg.NewMirror(p, authorize, OwnThing, &linkRegistry{f: f, l: l})
	if l.err != nil {
		f.log.Error("cannot mirror a peer", "peer", p.DID, "url", p.URL, "err", l.err)
	} else {
		l.mirror.Start()
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	go func() {
		defer close(l.done)
		var wg sync.WaitGroup
		wg.Go(func() { f.learnBroker(ctx, l, authorize) })
		if l.mirror != nil {
			wg.Go(func() { f.followPresence(ctx, l, authorize) })
		}
		wg.Wait()
	}()
	f.links[p.DID] = l
	f.log.Info("mirroring a peer", "peer", p.DID, "url", p.URL)
}

func (f *Federation) stop(did string) {
	f.mu.Lock()
	l := f.links[did]
	delete(f.links, did)
	f.mu.Unlock()
	if l == nil {
		return
	}
	l.stop()
	<-l.done
	if l.mirror != nil {
		_ = l.mirror.Close()
	}
	f.log.Info("stopped mirroring a peer", "peer", did)
}

// Close stops every mirror (their Things stay, for the next start).
func (f *Federation) Close() error {
	f.mu.Lock()
	f.closed = true
	dids := make([]string, 0, len(f.links))
	for did := range f.links {
		dids = append(dids, did)
	}
	f.mu.Unlock()
	for _, did := range dids {
		f.stop(did)
	}
	return nil
}

// States reports each peer's link (Kind hub.LinkPeer, Name its DID).
func (f *Federation) States() []hub.LinkState {
	f.mu.Lock()
	links := make([]*link, 0, len(f.links))
	for _, l := range f.links {
		links = append(links, l)
	}
	f.mu.Unlock()
	out := make([]hub.LinkState, 0, len(links))
	for _, l := range links {
		s := hub.LinkState{State: hub.LinkDown, LastError: "cannot mirror the peer"}
		if l.err != nil {
			s.LastError = l.err.Error()
		} else {
			s = l.mirror.State()
		}
		s.Kind, s.Name, s.URL = hub.LinkPeer, l.peer.DID, l.peer.URL
		out = append(out, s)
	}
	return out
}

// MQTT is the broker URL the peer did names in its directory TD ("" while
// unknown).
func (f *Federation) MQTT(did string) string {
	f.mu.Lock()
	l := f.links[did]
	f.mu.Unlock()
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mqtt
}

// learnBroker reads the peer's directory TD until it has its MQTT
// broker's URL (lmos:broker), for the lmos:peers agents fail over with.
func (f *Federation) learnBroker(ctx context.Context, l *link, authorize func(*http.Request)) {
	wait := time.Second
	for {
		if u := f.brokerOf(ctx, l.peer, authorize); u != "" {
			l.mu.Lock()
			l.mqtt = u
			l.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

// brokerOf reads the plain MQTT broker link of peer's directory TD.
func (f *Federation) brokerOf(ctx context.Context, peer hub.Peer, authorize func(*http.Request)) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer.URL+lmos.DirectoryPath, nil)
	if err != nil {
		return ""
	}
	authorize(req)
	resp, err := f.client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var td struct {
		Links []struct{ Rel, Href string } `json:"links"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&td) != nil {
		return ""
	}
	for _, l := range td.Links {
		if l.Rel == "lmos:broker" && strings.HasPrefix(l.Href, "mqtt://") {
			return l.Href
		}
	}
	return ""
}
