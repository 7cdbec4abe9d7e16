package web

import (
	"encoding/json"
	"net/http"
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
