package web

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Group actions over HTTP (PROTOCOL §7, §10 "Group actions"): POST
// /api/groups/{gid}/actions/{name} invokes the action on every member that
// has it (hub.GroupActions) and answers one result per member: all at once
// as JSON, or one SSE event each as the members answer.

// groupActionRoutes adds the route. Who may: as for POST
// /proxy/{id}/actions/{name}, the operate right (and per member, a Thing
// that requires security needs an authenticated consumer: that member's
// result, not the call's); rate-limited per client first.
func (s *Server) groupActionRoutes() {
	s.mux.HandleFunc("POST /api/groups/{gid}/actions/{name}", s.limited(s.allow(hub.OpInvokeAction, s.groupAction)))
}

// resultOf is the wire form of one member's result (outputs are JSON here).
func resultOf(r hub.MemberResult) lmos.GroupActionResult {
	return lmos.GroupActionResult{Member: r.Member, Status: r.Status, Output: r.Output, Error: r.Problem}
}

func (s *Server) groupAction(w http.ResponseWriter, r *http.Request) {
	ga := s.cfg.GroupActions
	if ga == nil {
		s.writeError(w, r, hub.Errorf(hub.EUNAVAILABLE, "group actions are not running"))
		return
	}
	p, err := s.principalOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	call, err := ga.Prepare(hub.GroupActionRequest{
		Group: r.PathValue("gid"), Action: r.PathValue("name"), Accept: lmos.MediaJSON, Principal: p,
		Traceparent: r.Header.Get("traceparent"), Tracestate: r.Header.Get("tracestate"),
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer call.Release()
	input, ct, err := s.readInput(w, r, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	call.SetInput(input, ct)
	if accepts(r, mtSSE) {
		s.streamGroupAction(w, r, call)
		return
	}
	ctx, cancel := s.proxyContext(r, 0) // the call bounds itself
	defer cancel()
	ans := lmos.GroupActionAnswer{Group: r.PathValue("gid"), Action: r.PathValue("name"), Results: []lmos.GroupActionResult{}}
	call.Run(ctx, func(res hub.MemberResult) { ans.Results = append(ans.Results, resultOf(res)) })
	slices.SortFunc(ans.Results, func(a, b lmos.GroupActionResult) int { return strings.Compare(a.Member, b.Member) })
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, lmos.MediaJSON, ans)
}

// streamGroupAction answers 200 at once and sends one "result" event per
// member as it answers, then a "done" event with the summary; keep-alives
// go out while members are slow.
func (s *Server) streamGroupAction(w http.ResponseWriter, r *http.Request, call *hub.GroupCall) {
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := s.proxyContext(r, 0)
	defer cancel()
	results := make(chan hub.MemberResult)
	done := make(chan lmos.GroupActionSummary, 1)
	go func() {
		done <- call.Run(ctx, func(res hub.MemberResult) {
			select {
			case results <- res:
			case <-ctx.Done(): // the client is gone: the rest are not sent
			}
		})
	}()
	defer func() { cancel(); <-done }()
	e := s.startSSE(w, r)
	live := e.send()
	beat := time.NewTicker(s.cfg.SSEHeartbeat)
	defer beat.Stop()
	for live {
		select {
		case <-beat.C:
			e.buf.WriteString(sseKeepAlive)
		case res := <-results:
			b, _ := json.Marshal(resultOf(res))
			e.event("result", b)
		case sum := <-done:
			done <- sum // for the deferred wait
			b, _ := json.Marshal(sum)
			e.event("done", b)
			e.send()
			return
		}
		live = e.send()
	}
	cancel()
}
