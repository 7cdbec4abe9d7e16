package web

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// hostCheck guards every door against DNS rebinding: a page on a domain
// the attacker re-points at the hub's address reaches the hub with that
// domain in Host (and in Origin, so the WebSocket Origin check passes).
// A request passes when its Host is a name the hub answers to.
type hostCheck struct {
	off      bool            // http.allowedHosts: ["*"]
	exact    map[string]bool // normalized names
	suffixes []string        // ".example.com" for "*.example.com"
	// own returns the hub's own names (host name, hub name, .local names);
	// called per request because the mDNS name can change on a conflict.
	own func() []string
}

func newHostCheck(allowed []string, own func() []string) *hostCheck {
	c := &hostCheck{exact: map[string]bool{}, own: own}
	for _, a := range allowed {
		a = normalizeHost(a)
		switch {
		case a == "*":
			c.off = true
		case strings.HasPrefix(a, "*."):
			c.suffixes = append(c.suffixes, a[1:])
		case a != "":
			c.exact[a] = true
		}
	}
	return c
}

// normalizeHost lowers a name and drops a trailing dot (the root label):
// "Hub.Local." and "hub.local" are the same name.
func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// allows reports whether a request's Host (name or address, with or
// without port) is one the hub answers to.
func (c *hostCheck) allows(host string) bool {
	// Without Host (HTTP/1.0) the request is not from a browser, which
	// always sends one; rebinding needs a browser.
	if c.off || host == "" {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	// An IP literal: rebinding needs a DNS name, so any address that
	// reached the hub is fine. A zone ("fe80::1%25eth0") is dropped.
	if i := strings.IndexByte(name, '%'); i >= 0 {
		name = name[:i]
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	name = normalizeHost(name)
	if name == "" {
		return false
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") || c.exact[name] {
		return true
	}
	for _, s := range c.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	if c.own != nil {
		for _, o := range c.own() {
			if normalizeHost(o) == name {
				return true
			}
		}
	}
	return false
}

// checkHost answers 403 and reports false when the request's Host is not
// one of the hub's names; nothing else is done for such a request.
func (s *Server) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if s.hosts.allows(r.Host) {
		return true
	}
	s.log.Debug("request for a foreign host refused", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
	err := hub.Errorf(hub.EFORBIDDEN, "this hub does not answer to the host %q; if it is reached under that name, add it to http.allowedHosts", r.Host)
	err.Limit = "http.allowedHosts"
	s.writeError(w, r, err)
	return false
}
