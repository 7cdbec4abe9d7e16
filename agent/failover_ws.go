package agent

import (
	"context"
	"fmt"
	"github.com/coder/websocket"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// The WebSocket link's failover (PROTOCOL §9.2): the same list and rules
// as the MQTT link's (failover.go), of ws:// and wss:// URLs; a WebSocket
// agent holds no per-hub credentials (it registers its TD, signed, on
// every socket).

// wsFailoverURLs are Options.URL's /ws URL then Options.Failover's, in
// order, without duplicates.
func wsFailoverURLs(first string, opts Options) ([]string, error) {
	out := []string{first}
	for _, raw := range opts.Failover {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || !isWS(raw) {
			return nil, fmt.Errorf("invalid failover hub %q: a WebSocket agent fails over to ws:// or wss:// hubs", raw)
		}
		if pinned(opts) && u.Scheme != "wss" {
			return nil, fmt.Errorf("invalid failover hub %q: the agent is pinned to a certificate and connects only over TLS", raw)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/ws"
		}
		if s := u.String(); !containsString(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hubURL is the /ws URL the link connects to now.
func (l *wsLink) hubURL() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.urls[l.cur]
}

// wsFailoverDue: the link has other hubs, and its hub has been
// unreachable since lost for longer than the grace.
func (l *wsLink) failoverDue(lost time.Time) bool {
	l.mu.Lock()
	n := len(l.urls)
	l.mu.Unlock()
	return n > 1 && time.Since(lost) >= l.a.opts.FailoverGrace
}

// nextHub moves to the next hub; it reports whether the list wrapped.
func (l *wsLink) nextHub() (wrapped bool) {
	l.mu.Lock()
	from := l.urls[l.cur]
	l.cur = (l.cur + 1) % len(l.urls)
	to := l.urls[l.cur]
	wrapped = l.cur == 0
	l.mu.Unlock()
	l.a.log.Warn("the hub is unreachable; trying another hub", "from", from, "to", to)
	return wrapped
}

// dialTimeout bounds one dial and registration: by the grace on a lost
// hub (by, non-zero) when there are other hubs; else the agent's Timeout.
func (l *wsLink) dialTimeout(by time.Time) time.Duration {
	l.mu.Lock()
	n := len(l.urls)
	l.mu.Unlock()
	switch {
	case n <= 1:
		return l.a.opts.Timeout
	case !by.IsZero():
		return min(l.a.opts.Timeout, max(time.Until(by), 250*time.Millisecond))
	}
	return min(l.a.opts.Timeout, max(l.a.opts.FailoverGrace, time.Second))
}

// learnPeers adds the /ws URLs of the paired peers of the hub: the
// lmos:peers of its directory TD (Options.Directory).
func (l *wsLink) learnPeers(ctx context.Context) {
	if l.a.opts.NoPeerFailover || pinned(l.a.opts) {
		return // a pinned agent trusts one certificate: its hub's
	}
	dir, err := directoryOf(l.a.opts.Directory)
	if err != nil || dir == "" {
		return
	}
	peers, err := readPeerList(ctx, dir, nil)
	if err != nil {
		l.a.log.Debug("cannot read the hub's peers", "directory", dir, "err", err)
		return
	}
	for _, p := range peers {
		u, err := url.Parse(p.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			continue
		}
		u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
		u.Path, u.RawQuery = "/ws", ""
		l.mu.Lock()
		if s := u.String(); !containsString(l.urls, s) && len(l.urls) < 1+len(l.a.opts.Failover)+maxPeers {
			l.urls = append(l.urls, s)
			l.a.log.Info("learnt a failover hub from the hub's peers", "url", s)
		}
		l.mu.Unlock()
	}
}

// keepAlive pings the hub every Options.KeepAlive until stop; a ping not
// answered within as long closes c (the hub went silent: unplugged or
// hung, which a socket alone notices only after minutes), so the agent
// reconnects, or fails over, and marks silent.
func (l *wsLink) keepAlive(c *websocket.Conn, stop <-chan struct{}, silent *atomic.Bool) {
	t := time.NewTicker(l.a.opts.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.a.ctx, l.a.opts.KeepAlive)
		err := c.Ping(ctx)
		cancel()
		if err != nil {
			select {
			case <-stop:
				return // the connection ended by itself
			default:
			}
			if l.a.ctx.Err() == nil {
				l.a.log.Warn("the hub does not answer pings; reconnecting", "err", err)
				silent.Store(true)
			}
			c.CloseNow()
			return
		}
	}
}
