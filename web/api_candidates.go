package web

import (
	"net/http"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// peerCandidates answers GET /api/peers/candidates: the other lmos-hubs
// seen on the LAN over mDNS, which an admin may pair with (POST
// /api/peers). Seeing one changes nothing else (PROTOCOL §9).
func (s *Server) peerCandidates(w http.ResponseWriter, _ *http.Request) {
	var list any = []any{}
	if s.cfg.PeerCandidates != nil {
		list = s.cfg.PeerCandidates()
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, map[string]any{"candidates": list})
}
