package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// joinRoutes mounts the join-approval API (PROTOCOL §3.4, §4.4): all of it
// needs an admin token, since the pending list names the LAN's devices and
// their addresses.
func (s *Server) joinRoutes() {
	m := s.mux
	m.HandleFunc("GET /api/join", s.admin(s.joinState))
	m.HandleFunc("GET /api/join/pending/{id}", s.admin(s.pendingTD))
	m.HandleFunc("POST /api/join/permit", s.write(s.permitJoin))
	m.HandleFunc("POST /api/join/pending/{id}/approve", s.write(s.decideJoin(true)))
	m.HandleFunc("POST /api/join/pending/{id}/deny", s.write(s.decideJoin(false)))
	m.HandleFunc("POST /api/join/pending/deny", s.write(s.denyJoins))
}

// joinAdmission is the join policy, or an error written when the hub has
// none.
func (s *Server) joinAdmission(w http.ResponseWriter, r *http.Request) *hub.Admission {
	if s.cfg.Admission == nil {
		s.writeError(w, r, hub.Errorf(hub.EUNAVAILABLE, "this hub has no join policy"))
	}
	return s.cfg.Admission
}

// pendingView is one entry of GET /api/join: who knocked, through which
// door, when, and what the description offers (not the document itself:
// GET /api/join/pending/{id}).
type pendingView struct {
	ID     string `json:"id"`
	Title  string `json:"title,omitempty"`
	Door   string `json:"door"`
	Source string `json:"source"`
	// Signer is the DID of the parked description's proof: the key an
	// approval binds the id to (omitted when unsigned).
	Signer string `json:"signer,omitempty"`
	// Proven: the requester proved the id its own (its bound key, its
	// MQTT credential); other entries are anonymous and may give way to
	// newer joins when the list is full.
	Proven   bool      `json:"proven,omitempty"`
	Received time.Time `json:"received"`
	// Expires is when the entry is dropped unless decided on
	// (join.pendingTTL after received).
	Expires    time.Time `json:"expires"`
	Bytes      int       `json:"bytes"`
	Properties []string  `json:"properties"`
	Actions    []string  `json:"actions"`
	Events     []string  `json:"events"`
}

func viewPending(p hub.PendingJoin, ttl time.Duration) pendingView {
	v := pendingView{ID: p.ID, Title: p.Title, Door: string(p.Door), Source: hub.SourceOf(p.Addr), Signer: p.Signer, Proven: p.Proven,
		Received: p.Received, Expires: p.Received.Add(ttl), Bytes: len(p.TD), Properties: []string{}, Actions: []string{}, Events: []string{}}
	var td struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Actions    map[string]json.RawMessage `json:"actions"`
		Events     map[string]json.RawMessage `json:"events"`
	}
	if json.Unmarshal(p.TD, &td) == nil { // validated when parked
		for k := range td.Properties {
			v.Properties = append(v.Properties, k)
		}
		for k := range td.Actions {
			v.Actions = append(v.Actions, k)
		}
		for k := range td.Events {
			v.Events = append(v.Events, k)
		}
		slices.Sort(v.Properties)
		slices.Sort(v.Actions)
		slices.Sort(v.Events)
	}
	return v
}

// joinStatus is the join member of /api/status and the head of GET
// /api/join.
type joinStatus struct {
	Mode        string     `json:"mode"`
	Effective   string     `json:"effective"`
	PermitUntil *time.Time `json:"permitUntil,omitempty"`
	Remaining   int        `json:"remaining"`
	Pending     int        `json:"pending"`
}

func statusOf(st hub.JoinState, pending int) joinStatus {
	return joinStatus{Mode: st.Mode, Effective: st.Effective, PermitUntil: st.PermitUntil, Remaining: st.Remaining, Pending: pending}
}

func (s *Server) joinState(w http.ResponseWriter, r *http.Request) {
	a := s.joinAdmission(w, r)
	if a == nil {
		return
	}
	st := a.State(true)
	ttl := a.PendingTTL()
	list := make([]pendingView, len(st.Pending))
	for i, p := range st.Pending {
		list[i] = viewPending(p, ttl)
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, struct {
		joinStatus
		List []pendingView `json:"list"`
	}{statusOf(st, len(list)), list})
}

func (s *Server) pendingTD(w http.ResponseWriter, r *http.Request) {
	a := s.joinAdmission(w, r)
	if a == nil {
		return
	}
	p, err := a.PendingTD(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", lmos.MediaTD)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(p.TD)
}

func (s *Server) permitJoin(w http.ResponseWriter, r *http.Request) {
	a := s.joinAdmission(w, r)
	if a == nil {
		return
	}
	body, err := s.readBody(w, r, lmos.MediaJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req struct {
		Seconds *int `json:"seconds"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Seconds == nil {
		s.writeError(w, r, &hub.Error{Code: hub.EINVALID, Message: "the body must be {\"seconds\": N}", Err: err,
			Fields: []hub.FieldError{{Field: "/seconds", Description: "is required, an integer"}}})
		return
	}
	if _, err := a.Permit(*req.Seconds); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("permit-join window", "seconds", *req.Seconds)
	writeJSON(w, http.StatusOK, lmos.MediaJSON, statusOf(a.State(false), a.PendingCount()))
}

// decideJoin is approve (true) or deny of a pending join: 204 when done.
func (s *Server) decideJoin(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := s.joinAdmission(w, r)
		if a == nil {
			return
		}
		id := r.PathValue("id")
		var err error
		if approve {
			err = a.Approve(r.Context(), id)
		} else {
			err = a.Deny(id)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.Info("join decided", "id", id, "approved", approve)
		w.WriteHeader(http.StatusNoContent)
	}
}

// denyJoins denies pending joins in bulk: the body is {"all": true}, or
// {"source": ADDR} and/or {"olderThan": DURATION} (both: both hold). It
// answers the denied ids, oldest first, and how many joins still wait.
func (s *Server) denyJoins(w http.ResponseWriter, r *http.Request) {
	a := s.joinAdmission(w, r)
	if a == nil {
		return
	}
	body, err := s.readBody(w, r, lmos.MediaJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	f, err := parseDenyFilter(body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ids, err := a.DenyAll(f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("joins denied in bulk", "count", len(ids), "all", f.All, "source", f.Source, "olderThan", f.OlderThan)
	writeJSON(w, http.StatusOK, lmos.MediaJSON, struct {
		Denied  []string `json:"denied"`
		Pending int      `json:"pending"`
	}{ids, a.PendingCount()})
}

// parseDenyFilter reads the body of a bulk deny: one JSON object of the
// members all, source and olderThan (a Go duration) and nothing after it;
// the filter it names must select something (hub.PendingFilter.Check).
func parseDenyFilter(body []byte) (hub.PendingFilter, error) {
	var req struct {
		All       bool   `json:"all"`
		Source    string `json:"source"`
		OlderThan string `json:"olderThan"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil {
		if _, tail := dec.Token(); tail != io.EOF {
			err = errors.New("data after the JSON object")
		}
	}
	if err != nil {
		return hub.PendingFilter{}, &hub.Error{Code: hub.EINVALID, Err: err,
			Message: `the body must be {"all": true}, or {"source": ADDRESS} and/or {"olderThan": DURATION}`}
	}
	f := hub.PendingFilter{All: req.All, Source: req.Source}
	if req.OlderThan != "" {
		if f.OlderThan, err = time.ParseDuration(req.OlderThan); err != nil {
			return hub.PendingFilter{}, &hub.Error{Code: hub.EINVALID, Message: "olderThan is not a duration", Err: err,
				Fields: []hub.FieldError{{Field: "/olderThan", Description: `must be a duration such as "90m" or "48h"`}}}
		}
	}
	if err := f.Check(); err != nil {
		return hub.PendingFilter{}, err
	}
	return f, nil
}
