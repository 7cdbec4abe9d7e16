package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse/paho.golang/paho"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// defaultFailoverGrace is Options.FailoverGrace when not set.
const defaultFailoverGrace = 2 * time.Second

// brokerTarget is one hub the MQTT link may connect to: the hub of
// Options.URL first, then the failover hubs (PROTOCOL §9 "Failover").
type brokerTarget struct {
	url  string
	addr string      // host:port of the broker
	tls  *tls.Config // mqtts://; nil: plain MQTT
	// creds are the credentials this hub issued, kept while the agent is
	// on another hub (each hub issues its own).
	creds *Credentials
}

// newTarget reads an mqtt:// or mqtts:// URL; base is the TLS
// configuration of the agent (nil: built when needed).
func newTarget(raw string, opts Options) (*brokerTarget, error) {
	addr, secure, err := brokerAddr(raw)
	if err != nil {
		return nil, err
	}
	t := &brokerTarget{url: raw, addr: addr}
	if secure {
		if t.tls, err = clientTLS(opts, opts.Logger); err != nil {
			return nil, err
		}
		if t.tls.ServerName == "" {
			t.tls.ServerName, _, _ = net.SplitHostPort(addr)
		}
	}
	return t, nil
}

// failoverTargets are the hubs of Options.Failover, in order, without the
// hub of Options.URL and duplicates.
func failoverTargets(opts Options, first *brokerTarget) ([]*brokerTarget, error) {
	out := []*brokerTarget{first}
	for _, u := range opts.Failover {
		if isWS(u) {
			return nil, fmt.Errorf("invalid failover hub %q: an MQTT agent fails over to mqtt:// or mqtts:// hubs", u)
		}
		t, err := newTarget(u, opts)
		if err != nil {
			return nil, fmt.Errorf("invalid failover hub: %w", err)
		}
		if pinned(opts) && t.tls == nil {
			return nil, fmt.Errorf("invalid failover hub %q: the agent is pinned to a certificate and connects only over TLS", u)
		}
		if !hasTarget(out, t.addr) {
			out = append(out, t)
		}
	}
	return out, nil
}

func hasTarget(ts []*brokerTarget, addr string) bool {
	for _, t := range ts {
		if t.addr == addr {
			return true
		}
	}
	return false
}

// Hubs returns the hubs the agent may be on, its own first: Options.URL,
// Options.Failover, and the ones learnt from its hub's lmos:peers or
// found over mDNS since (broker or WebSocket URLs). An agent that lists
// only one has nowhere to go when its hub goes away.
func (a *Agent) Hubs() []string {
	switch l := a.link.(type) {
	case *mqttLink:
		var out []string
		for _, t := range l.targetsNow() {
			out = append(out, t.url)
		}
		return out
	case *wsLink:
		return l.urlsNow()
	}
	return []string{a.opts.URL}
}

// target is the hub the link connects to now.
func (l *mqttLink) target() *brokerTarget {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.targets[l.cur]
}

// Hub returns the broker URL of the hub the agent is on (or trying to
// reach): Options.URL, or a failover hub after its hub went away.
func (a *Agent) Hub() string {
	switch l := a.link.(type) {
	case *mqttLink:
		return l.target().url
	case *wsLink:
		return l.hubURL()
	}
	return a.opts.URL
}

// failoverDue reports whether the link should try the next hub: it has
// more than one, and its hub has been unreachable since lost for longer
// than the grace.
func (l *mqttLink) failoverDue(lost time.Time) bool {
	l.mu.Lock()
	others := len(l.targets) > 1 || l.browse && len(l.peerDIDs) > 0
	l.mu.Unlock()
	return others && time.Since(lost) >= l.a.opts.FailoverGrace
}

// nextHub moves to the next hub in the list, keeping the credentials of
// the one left (each hub issues its own) and taking the next one's. It
// reports whether the list wrapped around to its first hub.
func (l *mqttLink) nextHub() (wrapped bool) {
	l.mu.Lock()
	last := l.cur == len(l.targets)-1
	l.mu.Unlock()
	if last {
		l.findPeer() // over mDNS, added last
	}
	l.mu.Lock()
	if len(l.targets) == 1 {
		l.mu.Unlock()
		return true
	}
	from := l.targets[l.cur]
	l.cur = (l.cur + 1) % len(l.targets)
	to := l.targets[l.cur]
	l.mu.Unlock()
	l.a.mu.Lock()
	from.creds, l.a.creds = l.a.creds, to.creds
	l.a.mu.Unlock()
	l.a.log.Warn("the hub is unreachable; trying another hub", "from", from.url, "to", to.url)
	return to == l.targets[0]
}

// onPrimary reports whether the link is on the hub of Options.URL: only
// its credentials are kept in StateDir and passed to OnCredentials.
func (l *mqttLink) onPrimary() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur == 0
}

// dialTimeout bounds reaching a broker: with failover hubs, an unplugged
// hub (whose address no longer answers, or whose process hangs) must not
// hold the agent past the grace: an attempt on the lost hub ends with the
// grace (dialBy), one on another hub after FailoverGrace; otherwise the
// agent's Timeout.
func (l *mqttLink) dialTimeout() time.Duration {
	l.mu.Lock()
	others, by := len(l.targets) > 1 || l.browse && len(l.peerDIDs) > 0, l.dialBy
	l.mu.Unlock()
	if !others {
		return l.a.opts.Timeout
	}
	if !by.IsZero() {
		return max(time.Until(by), 250*time.Millisecond)
	}
	return max(l.a.opts.FailoverGrace, time.Second)
}

// limitDial makes attempts end by t (zero: no such limit).
func (l *mqttLink) limitDial(t time.Time) {
	l.mu.Lock()
	l.dialBy = t
	l.mu.Unlock()
}

// maxPeers bounds the failover hubs learnt from a directory TD.
const maxPeers = 16

// learnPeers reads the lmos:peers of the hub's directory TD (PROTOCOL §9)
// and adds their brokers to the failover hubs. It runs after each join;
// a hub without a directory URL (Options.Directory, or found over mDNS)
// teaches nothing.
func (l *mqttLink) learnPeers(ctx context.Context) {
	l.mu.Lock()
	dir := l.directory
	l.mu.Unlock()
	if dir == "" || l.a.opts.NoPeerFailover {
		return
	}
	peers, dids, err := readPeers(ctx, dir, l.target().tls)
	if err != nil {
		l.a.log.Debug("cannot read the hub's peers", "directory", dir, "err", err)
		return
	}
	l.mu.Lock()
	known := len(l.peerDIDs)
	for _, d := range dids {
		if len(l.peerDIDs) < maxPeers {
			l.peerDIDs[d] = true
		}
	}
	learnt := len(l.peerDIDs) - known
	l.mu.Unlock()
	if learnt > 0 {
		l.a.log.Info("learnt the hub's paired hubs", "new", learnt, "directory", dir)
	}
	for _, p := range peers {
		t, err := newTarget(p, l.a.opts)
		if err != nil || (pinned(l.a.opts) && t.tls == nil) {
			continue
		}
		l.mu.Lock()
		if !hasTarget(l.targets, t.addr) && len(l.targets) < 1+len(l.a.opts.Failover)+maxPeers {
			l.targets = append(l.targets, t)
			l.a.log.Info("learnt a failover hub from the hub's peers", "broker", t.url)
		}
		l.mu.Unlock()
	}
}

// readPeers returns the brokers of the lmos:peers of the directory TD at
// dir: a peer's mqtt member, else the lmos:broker link of its own
// directory TD (at its url).
func readPeers(ctx context.Context, dir string, tlsCfg *tls.Config) (brokers, dids []string, err error) {
	peers, err := readPeerList(ctx, dir, tlsCfg)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range peers {
		if strings.HasPrefix(p.DID, "did:key:") {
			dids = append(dids, p.DID)
		}
		if p.MQTT == "" && p.URL != "" {
			pdir, err := directoryOf(p.URL)
			if err != nil {
				continue
			}
			plain, secure, err := brokerLinks(ctx, pdir, "")
			if err != nil {
				continue
			}
			p.MQTT = plain
			if plain == "" {
				p.MQTT = secure
			}
		}
		if p.MQTT != "" {
			brokers = append(brokers, p.MQTT)
		}
	}
	return brokers, dids, nil
}

// peerEntry is one of a directory TD's lmos:peers.
type peerEntry struct {
	DID  string `json:"did"`
	URL  string `json:"url"`
	MQTT string `json:"mqtt"`
}

// readPeerList returns the lmos:peers of the directory TD at dir (at most
// maxPeers).
func readPeerList(ctx context.Context, dir string, tlsCfg *tls.Config) ([]peerEntry, error) {
	var td struct {
		Peers []peerEntry `json:"lmos:peers"`
	}
	if err := getJSON(ctx, dir, tlsCfg, &td); err != nil {
		return nil, err
	}
	if len(td.Peers) > maxPeers {
		td.Peers = td.Peers[:maxPeers]
	}
	return td.Peers, nil
}

// getJSON reads the JSON document at u (at most 1 MiB) into v.
func getJSON(ctx context.Context, u string, tlsCfg *tls.Config, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: tlsCfg}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	return nil
}

// directoryOf is the directory TD URL of Options.Directory (a hub's base
// URL or its /.well-known/wot).
func directoryOf(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("invalid Options.Directory %q: an http:// or https:// URL of the hub", raw)
	}
	if !strings.HasSuffix(u.Path, lmos.DirectoryPath) {
		u.Path = strings.TrimSuffix(u.Path, "/") + lmos.DirectoryPath
	}
	return u.String(), nil
}

// targetsNow returns the hubs the agent may be on.
func (l *mqttLink) targetsNow() []*brokerTarget {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*brokerTarget(nil), l.targets...)
}

// keepAliveWatch is paho's pinger, telling the link when the keep alive
// ended a connection (no PINGRESP in time, or the PINGREQ not written):
// the hub went silent rather than away, and was silent for a keep alive
// already.
type keepAliveWatch struct {
	*paho.DefaultPinger
	silent *atomic.Bool
}

// Run is the pinger's, noting the keep alive's failure.
func (w keepAliveWatch) Run(ctx context.Context, conn net.Conn, keepAlive uint16) error {
	err := w.DefaultPinger.Run(ctx, conn, keepAlive)
	if err != nil && ctx.Err() == nil {
		w.silent.Store(true)
	}
	return err
}

// mdnsFailoverWait bounds one search for a paired hub over mDNS.
const mdnsFailoverWait = 3 * time.Second

// findPeer browses mDNS, when the agent found its hub there, for a paired
// peer of its hub (a DID of the hub's lmos:peers, proved by the peer's
// signed directory TD) that is not among its hubs yet, and adds it: the
// peer's address may have changed since it was paired, or the URL it was
// paired by may not resolve here.
func (l *mqttLink) findPeer() {
	l.mu.Lock()
	dids := maps.Clone(l.peerDIDs)
	browse := l.browse
	l.mu.Unlock()
	if !browse || len(dids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(l.a.ctx, mdnsFailoverWait)
	defer cancel()
	info, err := findHub(ctx, FindOptions{Logger: l.a.log}, &hubFilter{info: func(ctx context.Context, h HubInfo) error {
		addr, secure, err := brokerAddr(h.BrokerURL)
		if err != nil || secure {
			return errors.New("no plain MQTT broker")
		}
		if hasTarget(l.targetsNow(), addr) {
			return errors.New("one of the agent's hubs already")
		}
		did, err := directoryDID(ctx, h.DirectoryURL, h.TLSFingerprint)
		if err != nil {
			return err
		}
		if !dids[did] {
			return fmt.Errorf("%s is not paired with the agent's hub", did)
		}
		return nil
	}})
	if err != nil {
		l.a.log.Debug("no paired hub found over mDNS", "err", err)
		return
	}
	t, err := newTarget(info.BrokerURL, l.a.opts)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.targets = append(l.targets, t)
	l.mu.Unlock()
	l.a.log.Info("found a paired hub over mDNS", "name", info.Name, "broker", info.BrokerURL)
}

// directoryDID returns the DID whose proof the directory TD at u carries
// (an lmos-hub signs its own).
func directoryDID(ctx context.Context, u, fp string) (string, error) {
	var tlsCfg *tls.Config
	if strings.HasPrefix(u, "https://") && fp != "" {
		check, err := lmos.Pin(fp)
		if err != nil {
			return "", err
		}
		tlsCfg = lmos.PinnedConfig(check)
	}
	var raw json.RawMessage
	if err := getJSON(ctx, u, tlsCfg, &raw); err != nil {
		return "", err
	}
	r, err := proof.Verify(raw)
	if err != nil {
		return "", fmt.Errorf("its directory TD is not signed: %w", err)
	}
	return r.DID, nil
}
