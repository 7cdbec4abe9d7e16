package web

import (
	"encoding/json"
	"net/http"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The pairing API (PROTOCOL §9 "Federation"): an administrator pairs this
// hub with another by its URL and DID; a paired hub's signed requests have
// operate rights here and this hub mirrors its Things.

func (s *Server) peerRoutes() {
	s.mux.HandleFunc("GET /api/peers", s.read(s.listPeers))
	s.mux.HandleFunc("POST /api/peers", s.write(s.addPeer))
	s.mux.HandleFunc("DELETE /api/peers/{did}", s.write(s.removePeer))
}

// peerJSON is a peer as the API shows it: its pairing and its link's
// state (absent before the link starts).
type peerJSON struct {
	hub.Peer
	MQTT string         `json:"mqtt,omitempty"`
	Link *hub.LinkState `json:"link,omitempty"`
}

func (s *Server) peerView(p hub.Peer, states map[string]hub.LinkState) peerJSON {
	v := peerJSON{Peer: p}
	if st, ok := states[p.DID]; ok {
		v.Link = &st
	}
	if s.cfg.PeerMQTT != nil {
		v.MQTT = s.cfg.PeerMQTT(p.DID)
	}
	return v
}

func (s *Server) peerStates() map[string]hub.LinkState {
	out := map[string]hub.LinkState{}
	if s.cfg.PeerStates != nil {
		for _, st := range s.cfg.PeerStates() {
			out[st.Name] = st
		}
	}
	return out
}

// noPeers answers when the hub runs without federation.
func (s *Server) noPeers(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Peers != nil {
		return false
	}
	s.writeError(w, r, hub.Errorf(hub.EUNAVAILABLE, "federation is off on this hub"))
	return true
}

// listPeers is GET /api/peers: any reader sees the peers (the directory
// TD lists them too) with their link states.
func (s *Server) listPeers(w http.ResponseWriter, r *http.Request) {
	if s.noPeers(w, r) {
		return
	}
	states := s.peerStates()
	out := []peerJSON{}
	for _, p := range s.cfg.Peers.List() {
		out = append(out, s.peerView(p, states))
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, out)
}

// addPeer is POST /api/peers {"url", "did"} (admin): 201 with the peer
// when paired, 200 when it was paired already with that URL.
func (s *Server) addPeer(w http.ResponseWriter, r *http.Request) {
	if s.noPeers(w, r) {
		return
	}
	body, err := s.readBody(w, r, lmos.MediaJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req struct {
		URL string `json:"url"`
		DID string `json:"did"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, r, &hub.Error{Code: hub.EINVALID, Message: "the body must be {\"url\": \"http://other-hub:8080\", \"did\": \"did:key:…\"}", Err: err})
		return
	}
	p, created, err := s.cfg.Peers.Add(req.URL, req.DID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.log.Info("paired with a peer", "did", p.DID, "url", p.URL, "by", s.principalName(r))
	}
	writeJSON(w, status, lmos.MediaJSON, s.peerView(p, s.peerStates()))
}

// removePeer is DELETE /api/peers/{did} (admin): the peer is unpaired and
// its mirrored Things leave this hub.
func (s *Server) removePeer(w http.ResponseWriter, r *http.Request) {
	if s.noPeers(w, r) {
		return
	}
	p, err := s.cfg.Peers.Remove(r.PathValue("did"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("unpaired a peer", "did", p.DID, "url", p.URL, "by", s.principalName(r))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) principalName(r *http.Request) string {
	p, _ := s.principalOf(r)
	return p.String()
}

// peerLinks is the directory TD's lmos:peers: the paired hubs, where
// agents fail over to (PROTOCOL §9).
func (s *Server) peerLinks() []any {
	if s.cfg.Peers == nil {
		return nil
	}
	out := []any{}
	for _, p := range s.cfg.Peers.List() {
		m := map[string]any{"did": p.DID, "url": p.URL}
		if s.cfg.PeerMQTT != nil {
			if u := s.cfg.PeerMQTT(p.DID); u != "" {
				m["mqtt"] = u
			}
		}
		out = append(out, m)
	}
	return out
}
