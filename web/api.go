package web

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	now := s.cfg.Now()
	st := map[string]any{
		"name":       s.cfg.HubName,
		"hubId":      s.cfg.HubID,
		"version":    s.cfg.Version,
		"started":    s.started.UTC().Format(time.RFC3339),
		"uptime":     now.Sub(s.started).Round(time.Second).String(),
		"things":     s.reg.Count(),
		"revision":   s.reg.Revision(),
		"components": s.checks(),
		"access":     map[string]any{"anonymous": s.access().Anonymous()},
	}
	if s.cfg.StoreSize != nil {
		st["storeBytes"] = s.cfg.StoreSize()
	}
	if s.cfg.MDNS != nil {
		st["mdns"] = s.cfg.MDNS()
	}
	st["links"] = s.links()
	if s.cfg.Key != nil {
		st["did"] = proof.DID(s.cfg.Key.Public().(ed25519.PublicKey))
	}
	if a := s.cfg.Admission; a != nil {
		st["join"] = statusOf(a.State(false), a.PendingCount())
	}
	if s.cfg.MCP != nil {
		st["mcp"] = map[string]any{"path": "/mcp"} // the MCP door (PROTOCOL §11)
	}
	if t := s.cfg.TLS; t != nil {
		st["tls"] = map[string]any{"fingerprint": t.Fingerprint(), "httpsPort": t.HTTPSPort, "mqttsPort": t.MQTTSPort,
			"only": t.Only, "notAfter": t.NotAfter().UTC().Format(time.RFC3339)}
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, st)
}

// checks runs every health check; the map holds "up" or the error text.
func (s *Server) checks() map[string]string {
	out := make(map[string]string, len(s.cfg.Checks))
	for name, check := range s.cfg.Checks {
		if err := check(); err != nil {
			out[name] = err.Error()
		} else {
			out[name] = "up"
		}
	}
	return out
}

// healthz answers 200 "up" when every component is up, 200 "degraded"
// when only an optional one failed, else 503 "down".
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	c := s.checks()
	status, code := "up", http.StatusOK
	for _, v := range c {
		if v != "up" {
			status, code = "down", http.StatusServiceUnavailable
		}
	}
	for name, check := range s.cfg.Optional {
		state, err := check()
		if err != nil {
			state = err.Error()
			if status == "up" {
				status = "degraded"
			}
		}
		c[name] = state
	}
	writeJSON(w, code, lmos.MediaJSON, map[string]any{"status": status, "components": c})
}

type tokenView struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Scope   string `json:"scope"`
	Created string `json:"created"`
	Expires string `json:"expires,omitempty"`
	Revoked string `json:"revoked,omitempty"`
	Token   string `json:"token,omitempty"`
	// Thing is the Thing a Thing-bound token speaks for on group channels.
	Thing string `json:"thing,omitempty"`
}

func viewToken(t hub.Token) tokenView {
	v := tokenView{ID: t.ID, Name: t.Name, Scope: string(t.EffectiveScope()), Created: t.Created.UTC().Format(time.RFC3339), Thing: t.Thing}
	if !t.Revoked.IsZero() {
		v.Revoked = t.Revoked.UTC().Format(time.RFC3339)
	}
	if !t.Expires.IsZero() {
		v.Expires = t.Expires.UTC().Format(time.RFC3339)
	}
	return v
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	all, err := s.tokens.List()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]tokenView, len(all))
	for i, t := range all {
		out[i] = viewToken(t)
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, out)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r, lmos.MediaJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// scope defaults to admin, as every token before scopes (read for a
	// token bound to a Thing: it is for that Thing's group channels);
	// expires is a lifetime ("30d", "12h") or an RFC 3339 time, absent
	// for none.
	var req struct {
		Name    string `json:"name"`
		Scope   string `json:"scope"`
		Expires string `json:"expires"`
		Thing   string `json:"thing"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, r, &hub.Error{Code: hub.EINVALID, Message: "the body must be {\"name\": \"…\", \"scope\": \"read|operate|admin\", \"expires\": \"30d\"}", Err: err})
		return
	}
	if req.Scope == "" && req.Thing != "" {
		req.Scope = string(hub.ScopeRead)
	} else if req.Scope == "" {
		req.Scope = string(hub.ScopeAdmin)
	}
	expires, err := hub.ParseExpiry(req.Expires, s.cfg.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	secret, t, err := s.tokens.CreateBound(req.Name, hub.Scope(req.Scope), expires, req.Thing)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v := viewToken(t)
	v.Token = secret
	writeJSON(w, http.StatusCreated, lmos.MediaJSON, v)
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := s.tokens.Revoke(r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
