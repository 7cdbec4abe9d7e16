package web

import (
	"net/http"
)

// The MQTT credential of a joined Thing (PROTOCOL §3, §4.4): only an admin
// resets it, for an agent that lost it. The hub keeps only its hash, so
// there is nothing to read.

// deleteThingCredential is DELETE /api/things/{id}/credential: the Thing's
// credential is deleted and its connections end; the Thing stays
// registered, and its agent's next join is issued a new credential under
// the join mode. 404 when the Thing holds none.
func (s *Server) deleteThingCredential(w http.ResponseWriter, r *http.Request) {
	a := s.joinAdmission(w, r)
	if a == nil {
		return
	}
	if err := a.ResetCredential(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
