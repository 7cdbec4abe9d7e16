package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The HTTP door of the one access policy (hub.Access, PROTOCOL §3.5): a
// request's principal is its bearer token's, or anonymous without one; a
// token that is unknown, revoked or expired is refused (401) even where an
// anonymous request would pass, so a client learns its token is dead.

// access is the policy, the open one when none is configured.
func (s *Server) access() *hub.Access {
	if s.cfg.Access == nil {
		return hub.OpenAccess()
	}
	return s.cfg.Access
}

// principalOf is who sends r: a verified token's principal or anonymous.
func (s *Server) principalOf(r *http.Request) (hub.Principal, error) {
	if p, ok := hub.PrincipalFrom(r.Context()); ok {
		return p, nil
	}
	if h := r.Header.Get("Authorization"); lmos.IsPeerAuthorization(h) {
		return s.peerPrincipal(r)
	}
	secret := bearer(r)
	if secret == "" && r.URL.Path == "/ws" && r.Header.Get("Authorization") == "" {
		// A browser cannot set headers on a WebSocket: /ws takes the token
		// in the query too (PROTOCOL §5). Only there: elsewhere a secret in
		// a URL ends up in logs and histories for nothing.
		secret = r.URL.Query().Get("token")
	}
	if secret == "" {
		if r.Header.Get("Authorization") != "" {
			return hub.Principal{}, hub.Errorf(hub.EUNAUTHORIZED, "the Authorization header must be \"Bearer <token>\" (or LMOS-Peer from a paired hub)")
		}
		return hub.AnonymousFrom(clientAddr(r)), nil
	}
	t, err := s.tokens.Verify(secret)
	if err != nil {
		return hub.Principal{}, err
	}
	return hub.TokenPrincipal(t, clientAddr(r)), nil
}

// peerPrincipal is the principal of a request signed by a hub
// (lmos.VerifyPeer): a paired peer, or anonymous for a hub this one is not
// paired with (PROTOCOL §9). A signature that does not verify is refused
// like a dead token.
func (s *Server) peerPrincipal(r *http.Request) (hub.Principal, error) {
	did, paired, err := lmos.VerifyPeerRequest(r, s.cfg.Now(), s.cfg.MaxBodyBytes, func(did string) bool {
		return s.cfg.Peers != nil && s.cfg.Peers.Paired(did)
	})
	if err != nil {
		return hub.Principal{}, hub.Errorf(hub.EUNAUTHORIZED, "the LMOS-Peer authorization is refused: %v", err)
	}
	if paired {
		return hub.PeerPrincipal(did, clientAddr(r)), nil
	}
	return hub.AnonymousFrom(clientAddr(r)), nil
}

// allow guards a route with op on no particular Thing; the principal is
// kept in the request's context for a later check on the Thing itself
// (allowThing).
func (s *Server) allow(op hub.Op, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.principalOf(r)
		if err == nil {
			err = s.access().Allow(p, op, nil)
		}
		if err == nil && !p.Authenticated() && (op == hub.OpWriteProperty || op == hub.OpInvokeAction) {
			err = s.sameSite(r)
		}
		if err != nil {
			s.refuse(w, r, err)
			return
		}
		h(w, r.WithContext(hub.ContextWithPrincipal(r.Context(), p)))
	}
}

// sameSite refuses an anonymous write or invocation a browser sends from
// another site's page (cross-site request forgery): with anonymous operate
// such a page could invoke an action without a body, which is a "simple"
// request no CORS preflight stops. A request with a token is not at risk
// (Authorization needs a preflight the hub never grants); a client that
// sends no Origin is not a browser page.
func (s *Server) sameSite(r *http.Request) error {
	if origin, ok := s.originAllowed(r); !ok {
		return hub.Errorf(hub.EFORBIDDEN, "a write or invocation from the page at %s needs a token (or http.allowedOrigins)", lmos.Truncate(origin, 128))
	}
	return nil
}

// originAllowed reports whether r comes from no page (no Origin), from
// the hub's own origin (its Host) or from one of http.allowedOrigins; it
// returns the Origin for the refusal.
func (s *Server) originAllowed(r *http.Request) (string, bool) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return "", true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return origin, false
	}
	host := strings.ToLower(u.Host)
	if host == strings.ToLower(r.Host) {
		return origin, true
	}
	for _, o := range s.cfg.AllowedOrigins {
		if a, err := url.Parse(o); o == "*" || err == nil && strings.EqualFold(a.Host, host) {
			return origin, true
		}
	}
	return origin, false
}

// identify resolves the principal without requiring any level (the
// WebSocket upgrade: an agent joins whatever access.anonymous says; each
// message is checked).
func (s *Server) identify(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.principalOf(r)
		if err != nil {
			s.refuse(w, r, err)
			return
		}
		h(w, r.WithContext(hub.ContextWithPrincipal(r.Context(), p)))
	}
}

// limited rate-limits a changing request per client before anything else,
// so guessing tokens is limited too.
func (s *Server) limited(h http.HandlerFunc) http.HandlerFunc {
	return s.limitedAs("too many writes from this client", h)
}

// limitedRead rate-limits a costly read (the group list) per client
// against the same rate as writes; its refusal says so.
func (s *Server) limitedRead(h http.HandlerFunc) http.HandlerFunc {
	return s.limitedAs("too many requests from this client (group listings count against its write rate)", h)
}

// limitedAs rate-limits h per client, refusing with msg.
func (s *Server) limitedAs(msg string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ok, wait := s.limit.Allow(clientAddr(r)); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
			s.writeError(w, r, hub.Errorf(hub.ERATELIMIT, "%s; retry in %s", msg, wait.Round(time.Millisecond)))
			return
		}
		h(w, r)
	}
}

// allowThing checks op on the Thing a proxy request names, once the
// Thing is known: a Thing whose TD requires security is only operated by
// authenticated consumers.
func (s *Server) allowThing(r *http.Request, op hub.Op, thing hub.Thing) error {
	p, err := s.principalOf(r)
	if err != nil {
		return err
	}
	return s.access().Allow(p, op, &thing)
}

// stillAllowed decides op again for a stream that stays open (an event
// stream, the change feed): a token revoked or expired since, or a Thing
// that came to require security, ends it (PROTOCOL §3.5).
func (s *Server) stillAllowed(r *http.Request, op hub.Op, thing *hub.Thing) error {
	p, err := s.principalOf(r)
	if err != nil {
		return err
	}
	if p.Kind == hub.ByPeer && (s.cfg.Peers == nil || !s.cfg.Peers.Paired(p.PeerDID)) {
		return hub.Errorf(hub.EUNAUTHORIZED, "%s was unpaired", p)
	}
	return s.access().Allow(p, op, thing)
}

// streamError writes err as an SSE error event (the problem as data).
func streamError(r *http.Request, e *sse, err error) {
	p := hub.ProblemOf(err)
	p.Instance = instanceOf(r)
	data, _ := json.Marshal(p)
	e.event("error", data)
}

// refuse answers a refusal of the access policy; writeError counts it
// (lmos_http_refused_total{reason}).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	s.writeError(w, r, err)
}
