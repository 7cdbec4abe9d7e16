package web

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The key binding of a Thing id (PROTOCOL §6): read by anyone who may read
// the directory, changed only with an admin token (key rotation).

type bindingView struct {
	ID      string `json:"id"`
	DID     string `json:"did"`
	Created string `json:"created,omitempty"` // the last accepted proof's
	Since   string `json:"since"`
}

func viewBinding(b hub.Binding) bindingView {
	v := bindingView{ID: b.ID, DID: b.DID, Since: b.Since.UTC().Format(time.RFC3339)}
	if !b.Created.IsZero() {
		v.Created = b.Created.UTC().Format(time.RFC3339)
	}
	return v
}

func (s *Server) getBinding(w http.ResponseWriter, r *http.Request) {
	b, err := s.reg.Binding(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, viewBinding(b))
}

// putBinding is PUT /api/things/{id}/binding {"did": "did:key:…"}: the id
// is bound to that key from now on, whatever it was bound to.
func (s *Server) putBinding(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r, lmos.MediaJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req struct {
		DID string `json:"did"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, r, &hub.Error{Code: hub.EINVALID, Message: `the body must be {"did": "did:key:…"}`, Err: err})
		return
	}
	b, err := s.reg.Rebind(r.Context(), r.PathValue("id"), req.DID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, viewBinding(b))
}

func (s *Server) deleteBinding(w http.ResponseWriter, r *http.Request) {
	if err := s.reg.Unbind(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// byProofKey marks a request writeSigned let through without a token.
type byProofKey struct{}

func byProof(r *http.Request) bool { return r.Context().Value(byProofKey{}) != nil }

// writeSigned is write for PUT /things/{id}, where a request without any
// Authorization may instead be authenticated by the description's proof
// by the key the id is bound to (PROTOCOL §3.5); the registry decides
// that. A token that is sent must be valid.
func (s *Server) writeSigned(h http.HandlerFunc) http.HandlerFunc {
	withToken := s.write(h)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			withToken(w, r)
			return
		}
		if ok, wait := s.limit.Allow(clientAddr(r)); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
			s.writeError(w, r, hub.Errorf(hub.ERATELIMIT, "too many writes from this client; retry in %s", wait.Round(time.Millisecond)))
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), byProofKey{}, true)))
	}
}
