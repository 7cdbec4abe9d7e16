package mdns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// Candidate is another lmos-hub seen on the LAN: a hub an admin may pair
// with (PROTOCOL §9). Candidates are only proposed, never paired.
type Candidate struct {
	// DID is the hub's key (did:key), from the proof of its directory TD.
	DID string `json:"did"`
	// URL is the base URL of its directory ("http://192.0.2.7:8080"),
	// what POST /api/peers takes.
	URL string `json:"url"`
	// Name is its mDNS instance name (its hub name).
	Name string `json:"name"`
	// LastSeen is when its announcement was last received.
	LastSeen time.Time `json:"lastSeen"`
	// Paired: an admin paired this hub with it already (set by the
	// caller that knows the peers).
	Paired bool `json:"paired"`
}

// CandidatesConfig configures Candidates.
type CandidatesConfig struct {
	// Self is this hub's DID: its own announcement is no candidate.
	Self string
	// Max bounds the list (default 32); more hubs are logged and skipped
	// until one goes away.
	Max int
	// FetchTimeout bounds reading one directory TD (default 5 s).
	FetchTimeout time.Duration
	// Client reads directory TDs (default: no proxy, no redirect).
	Client *http.Client
	Logger *slog.Logger
}

// maxDirectoryTD bounds a directory TD read from a candidate.
const maxDirectoryTD = 256 << 10

// Candidates follows the _wot._tcp directories on the LAN and keeps those
// that are lmos-hubs: a directory whose TXT says type=Directory and whose
// directory TD is a ThingDirectory with an lmos:broker link, signed by a
// did:key (an lmos-hub signs its directory TD with its own key). The list
// follows the mDNS records: a goodbye or an expiry removes a hub.
type Candidates struct {
	cfg CandidatesConfig
	log *slog.Logger

	mu      sync.Mutex
	byKey   map[string]Candidate // instance key → candidate
	pending map[string]dnssd.Event
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// NewCandidates starts the worker that reads announced directories' TDs.
func NewCandidates(cfg CandidatesConfig) *Candidates {
	if cfg.Max <= 0 {
		cfg.Max = 32
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = 5 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{
			Transport: &http.Transport{Proxy: nil, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Candidates{cfg: cfg, log: cfg.Logger, byKey: map[string]Candidate{}, pending: map[string]dnssd.Event{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// Handle takes a browser event; it never blocks. Added and Updated
// directories are read by the worker (the latest event per instance);
// Seen refreshes; Removed drops.
func (c *Candidates) Handle(ev dnssd.Event) {
	e := ev.Entry
	if e.Service != lmos.ServiceWoT || !strings.EqualFold(e.TXT()[lmos.TXTType], lmos.TypeDirectory) {
		return
	}
	key := e.Key()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev.Kind {
	case dnssd.Removed:
		delete(c.pending, key)
		if cand, ok := c.byKey[key]; ok {
			delete(c.byKey, key)
			c.log.Info("peer candidate gone", "name", cand.Name, "did", cand.DID, "reason", ev.Reason)
		}
		return
	case dnssd.Seen:
		if cand, ok := c.byKey[key]; ok {
			cand.LastSeen = time.Now()
			c.byKey[key] = cand
			return
		}
	}
	if len(c.pending) >= 4*c.cfg.Max {
		return // a flood: bounded; a later announcement brings it back
	}
	c.pending[key] = ev
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// List returns the candidates, by name.
func (c *Candidates) List() []Candidate {
	c.mu.Lock()
	out := make([]Candidate, 0, len(c.byKey))
	for _, cand := range c.byKey {
		out = append(out, cand)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Candidate) int { return strings.Compare(a.Name+a.URL, b.Name+b.URL) })
	return out
}

// Close stops the worker.
func (c *Candidates) Close() {
	close(c.stop)
	<-c.done
}

func (c *Candidates) run() {
	defer close(c.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-c.stop
		cancel()
	}()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		}
		for {
			c.mu.Lock()
			var key string
			var ev dnssd.Event
			for key, ev = range c.pending {
				break
			}
			delete(c.pending, key)
			c.mu.Unlock()
			if key == "" {
				break
			}
			c.look(ctx, key, ev.Entry)
		}
	}
}

// look reads the directory TD of e and keeps it as a candidate when it is
// another lmos-hub.
func (c *Candidates) look(ctx context.Context, key string, e dnssd.Entry) {
	cand, err := c.probe(ctx, e)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if _, had := c.byKey[key]; had {
			delete(c.byKey, key)
		}
		if !errors.Is(err, errSelf) {
			c.log.Info("not a peer candidate", "name", e.Instance, "addrs", e.IPs, "reason", err)
		}
		return
	}
	if _, had := c.byKey[key]; !had && len(c.byKey) >= c.cfg.Max {
		c.log.Warn("peer candidate skipped: the list is full", "name", cand.Name, "url", cand.URL, "max", c.cfg.Max)
		return
	}
	if _, had := c.byKey[key]; !had {
		c.log.Info("peer candidate seen", "name", cand.Name, "url", cand.URL, "did", cand.DID)
	}
	c.byKey[key] = cand
}

var errSelf = errors.New("this hub itself")

// probe fetches and checks the directory TD an announcement points to.
func (c *Candidates) probe(ctx context.Context, e dnssd.Entry) (Candidate, error) {
	u, err := e.TDURL()
	if err != nil {
		return Candidate{}, err
	}
	base := strings.TrimSuffix(u, e.TXT()[lmos.TXTPath])
	client := c.cfg.Client
	if fp := e.TXT()[lmos.TXTTLS]; strings.HasPrefix(u, "https://") && fp != "" {
		check, err := lmos.Pin(fp)
		if err != nil {
			return Candidate{}, err
		}
		client = &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: lmos.PinnedConfig(check)}}
		defer client.CloseIdleConnections()
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Candidate{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Candidate{}, fmt.Errorf("cannot read its directory TD: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Candidate{}, fmt.Errorf("its directory TD: %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDirectoryTD+1))
	if err != nil || len(b) > maxDirectoryTD {
		return Candidate{}, fmt.Errorf("cannot read its directory TD (at most %d bytes): %v", maxDirectoryTD, err)
	}
	did, err := lmosHubDID(b)
	if err != nil {
		return Candidate{}, err
	}
	if did == c.cfg.Self {
		return Candidate{}, errSelf
	}
	return Candidate{DID: did, URL: base, Name: e.Instance, LastSeen: time.Now()}, nil
}

// lmosHubDID returns the DID that signed an lmos-hub's directory TD, or
// why b is not one.
func lmosHubDID(b []byte) (string, error) {
	var td struct {
		Type  json.RawMessage `json:"@type"`
		Links []struct {
			Rel string `json:"rel"`
		} `json:"links"`
	}
	if err := json.Unmarshal(b, &td); err != nil {
		return "", fmt.Errorf("its directory TD is not a JSON object: %w", err)
	}
	if !strings.Contains(string(td.Type), `"ThingDirectory"`) {
		return "", errors.New("its TD is not a ThingDirectory")
	}
	broker := false
	for _, l := range td.Links {
		broker = broker || l.Rel == "lmos:broker"
	}
	if !broker {
		return "", errors.New("its directory TD has no lmos:broker link: not an lmos-hub")
	}
	r, err := proof.Verify(b)
	if err != nil {
		return "", fmt.Errorf("its directory TD is not signed by its key: %w", err)
	}
	return r.DID, nil
}
