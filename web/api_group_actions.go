package web

import (
	"bytes"
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
	// The outputs stay held of the hub's budget (groups.actionOutputBytes)
	// until the answer is written (the deferred Release), and the answer
	// is written result by result: never a second copy of all outputs.
	call.KeepOutputs()
	var results []lmos.GroupActionResult
	call.Run(ctx, func(res hub.MemberResult) { results = append(results, resultOf(res)) })
	slices.SortFunc(results, func(a, b lmos.GroupActionResult) int { return strings.Compare(a.Member, b.Member) })
	w.Header().Set("Cache-Control", "no-store")
	writeGroupAnswer(w, r.PathValue("gid"), r.PathValue("name"), results)
}

// writeGroupAnswer writes the JSON answer of a group action, the
// lmos.GroupActionAnswer of gid, action and results, one result at a time.
func writeGroupAnswer(w http.ResponseWriter, gid, action string, results []lmos.GroupActionResult) {
	head, _ := json.Marshal(lmos.GroupActionAnswer{Group: gid, Action: action, Results: []lmos.GroupActionResult{}})
	head = bytes.TrimSuffix(head, []byte("[]}"))
	w.Header().Set("Content-Type", lmos.MediaJSON)
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(append(head, '[')); err != nil {
		return
	}
	for i, res := range results {
		b, err := json.Marshal(res)
		if err != nil { // an output that is not JSON: none reach here (the Router decodes them)
			p := hub.ProblemOf(hub.Errorf(hub.EINTERNAL, "cannot encode the result of member %q", res.Member))
			b, _ = json.Marshal(lmos.GroupActionResult{Member: res.Member, Status: res.Status, Error: &p})
		}
		if i > 0 {
			b = append([]byte{','}, b...)
		}
		if _, err := w.Write(b); err != nil {
			return
		}
	}
	_, _ = w.Write([]byte("]}\n"))
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
	// emit returns once its result is written: until then the output is
	// held of the hub's budget (groups.actionOutputBytes).
	results := make(chan hub.MemberResult)
	sent := make(chan struct{})
	done := make(chan lmos.GroupActionSummary, 1)
	go func() {
		done <- call.Run(ctx, func(res hub.MemberResult) {
			select {
			case results <- res:
			case <-ctx.Done(): // the client is gone: the rest are not sent
				return
			}
			select {
			case <-sent:
			case <-ctx.Done():
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
			live = e.send()
			select {
			case sent <- struct{}{}:
			case <-ctx.Done():
			}
			continue
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
