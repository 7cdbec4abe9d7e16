package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Media types of the interaction proxy (PROTOCOL §3.3).
const (
	mtSSE = "text/event-stream"
)

// proxyRoutes adds the interaction proxy. The access policy decides each
// operation as on every other door (hub.Access, PROTOCOL §3.5): first
// without the Thing, then, once the Thing is known, with it (a Thing whose
// TD requires security). Writes and invocations are rate-limited per
// client first.
func (s *Server) proxyRoutes() {
	m := s.mux
	m.HandleFunc("GET /proxy/{id}/properties/{name}", s.allow(hub.OpReadProperty, s.proxyReadProperty))
	m.HandleFunc("PUT /proxy/{id}/properties/{name}", s.limited(s.allow(hub.OpWriteProperty, s.proxyWriteProperty)))
	m.HandleFunc("POST /proxy/{id}/actions/{name}", s.limited(s.allow(hub.OpInvokeAction, s.proxyInvoke)))
	m.HandleFunc("GET /proxy/{id}/events/{name}", s.allow(hub.OpSubscribeEvent, s.proxyEvents))
}

// accepts reports whether the Accept header names media type mt.
func accepts(r *http.Request, mt string) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if lmos.MediaType(part) == mt {
			return true
		}
	}
	return false
}

// resultType is the encoding a consumer wants results in: CBOR when it
// accepts application/cbor, JSON otherwise.
func resultType(r *http.Request) string {
	if accepts(r, lmos.MediaCBOR) {
		return lmos.MediaCBOR
	}
	return lmos.MediaJSON
}

// interaction builds the Interaction a proxy request stands for.
func interaction(r *http.Request, op hub.Op) hub.Interaction {
	return hub.Interaction{ThingID: r.PathValue("id"), Op: op, Name: r.PathValue("name"), Accept: resultType(r), Door: hub.SourceHTTP,
		Traceparent: r.Header.Get("traceparent"), Tracestate: r.Header.Get("tracestate")}
}

// proxyContext ends when the request does, after timeout (0: never), or
// when the server closes its streams.
func (s *Server) proxyContext(r *http.Request, timeout time.Duration) (context.Context, context.CancelFunc) {
	var ctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(r.Context(), timeout)
	} else {
		ctx, cancel = context.WithCancel(r.Context())
	}
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// readInput reads the body of a write or an invocation: JSON or CBOR, which
// must decode (with the CBOR limits); an action may have no body at all.
func (s *Server) readInput(w http.ResponseWriter, r *http.Request, optional bool) ([]byte, string, error) {
	if optional && r.ContentLength <= 0 && r.Header.Get("Content-Type") == "" {
		return nil, lmos.MediaJSON, nil
	}
	body, err := s.readBody(w, r, lmos.MediaJSON, lmos.MediaCBOR)
	if err != nil {
		return nil, "", err
	}
	ct := lmos.MediaOf(r.Header.Get("Content-Type"))
	if len(body) == 0 && optional {
		return nil, ct, nil
	}
	if _, err := s.reg.Decoder().DecodeValue(body, ct); err != nil {
		return nil, "", err
	}
	return body, ct, nil
}

func (s *Server) router() (*hub.Router, error) {
	if s.cfg.Router == nil {
		return nil, hub.Errorf(hub.EUNAVAILABLE, "the interaction proxy is not running")
	}
	return s.cfg.Router, nil
}

// proxyReadProperty is readproperty, or observeproperty as server-sent
// events when the client accepts text/event-stream.
func (s *Server) proxyReadProperty(w http.ResponseWriter, r *http.Request) {
	if accepts(r, mtSSE) {
		s.proxyStream(w, r, hub.OpObserveProperty)
		return
	}
	rt, err := s.router()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	in := interaction(r, hub.OpReadProperty)
	if _, t, err := rt.Check(in); err == nil {
		if err := s.allowThing(r, in.Op, t); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	ctx, cancel := s.proxyContext(r, s.cfg.ProxyTimeout)
	defer cancel()
	var value hub.Result
	if err := rt.Deliver(ctx, in, func(res hub.Result) error { value = res; return nil }); err != nil {
		s.writeError(w, r, err)
		return
	}
	if value.Status == hub.StatusFailed {
		// The value did not decode (or the transport failed to read it):
		// a failure of the Thing, 502 (PROTOCOL §10).
		s.writeAgentProblem(w, r, value.Problem)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeBytes(w, http.StatusOK, value.ContentType, value.Data)
}

// proxyRequest checks a write or invocation and reads its body; it answers
// the error itself and reports ok false. The Thing and affordance are
// checked first: a request for an unknown one is 404 whatever its body.
// The input is checked against its schema here too, so a streamed
// invocation is refused with 400 rather than in a stream begun with 200.
func (s *Server) proxyRequest(w http.ResponseWriter, r *http.Request, op hub.Op, optionalBody bool) (*hub.Router, hub.Interaction, bool) {
	rt, err := s.router()
	if err != nil {
		s.writeError(w, r, err)
		return nil, hub.Interaction{}, false
	}
	in := interaction(r, op)
	_, t, err := rt.Check(in)
	if err == nil {
		err = s.allowThing(r, op, t)
	}
	if err != nil {
		s.writeError(w, r, err)
		return nil, hub.Interaction{}, false
	}
	if in.Input, in.ContentType, err = s.readInput(w, r, optionalBody); err == nil {
		// Refused now, not in a stream that began with 200.
		err = rt.Validate(in)
	}
	if err != nil {
		s.writeError(w, r, err)
		return nil, hub.Interaction{}, false
	}
	return rt, in, true
}

func (s *Server) proxyWriteProperty(w http.ResponseWriter, r *http.Request) {
	rt, in, ok := s.proxyRequest(w, r, hub.OpWriteProperty, false)
	if !ok {
		return
	}
	ctx, cancel := s.proxyContext(r, s.cfg.ProxyTimeout)
	defer cancel()
	if err := rt.Deliver(ctx, in, func(hub.Result) error { return nil }); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// proxyInvoke invokes an action and answers with its final result, or
// streams every result as server-sent events when the client accepts
// text/event-stream.
func (s *Server) proxyInvoke(w http.ResponseWriter, r *http.Request) {
	rt, in, ok := s.proxyRequest(w, r, hub.OpInvokeAction, true)
	if !ok {
		return
	}
	if accepts(r, mtSSE) {
		in.Accept = lmos.MediaJSON
		s.streamInvocation(w, r, rt, in)
		return
	}
	ctx, cancel := s.proxyContext(r, s.cfg.ProxyTimeout)
	defer cancel()
	var final hub.Result
	err := rt.Deliver(ctx, in, func(res hub.Result) error {
		if res.Final() {
			final = res
		}
		return nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case final.Status == hub.StatusFailed:
		s.writeAgentProblem(w, r, final.Problem)
	case len(final.Data) == 0:
		w.WriteHeader(http.StatusNoContent)
	default:
		writeBytes(w, http.StatusOK, final.ContentType, final.Data)
	}
}

// writeAgentProblem answers with the problem a Thing reported (or the
// hub's, for a payload of the Thing that does not decode), which has the
// status 502 (hub.ThingFailed); instance is the request.
func (s *Server) writeAgentProblem(w http.ResponseWriter, r *http.Request, p *lmos.Problem) {
	out := hub.ThingProblem(p)
	out.Instance = instanceOf(r)
	out.ValidationErrors = nil
	s.log.Debug("proxied interaction failed", "path", r.URL.Path, "type", out.Type, "detail", out.Detail)
	w.Header().Set("Content-Type", lmos.MediaProblem)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(out.Status)
	_ = json.NewEncoder(w).Encode(out)
}

// delivery runs an interaction on its own goroutine so its results can be
// interleaved with keep-alives; results arrive one at a time on c, and the
// outcome on done. Cancel ctx and wait on done before returning.
type delivery struct {
	c    chan hub.Result
	done chan error
}

func deliver(ctx context.Context, rt *hub.Router, in hub.Interaction) *delivery {
	d := &delivery{c: make(chan hub.Result), done: make(chan error, 1)}
	go func() {
		d.done <- rt.Deliver(ctx, in, func(res hub.Result) error {
			select {
			case d.c <- res:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	return d
}

// Every block an SSE stream sends carries an event with data. r3labs/sse v2
// (a common Go client) hands a block without data to the application as an
// event: a lone retry: block, and a comment-only block once any event had
// an id (it fills in the last id). So the reconnection time goes with the
// first event, and the keep-alive is one empty line: it keeps proxies from
// timing the connection out, every SSE parser skips it, and two of them
// make an empty block, which r3labs drops.
const (
	sseRetry     = "retry: 2000\n"
	sseKeepAlive = "\n"
)

// sse writes server-sent events with keep-alives.
type sse struct {
	s       *Server
	r       *http.Request
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     bytes.Buffer
	retried bool // the retry field went out with the first event
}

func (s *Server) startSSE(w http.ResponseWriter, r *http.Request) *sse {
	h := w.Header()
	h.Set("Content-Type", mtSSE)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{s: s, r: r, w: w, rc: http.NewResponseController(w)}
}

// event queues one event; data is JSON, sent compact on one line (or line
// by line if it is not JSON).
func (e *sse) event(name string, data []byte) {
	if !e.retried {
		e.buf.WriteString(sseRetry)
		e.retried = true
	}
	e.buf.WriteString("event: ")
	e.buf.WriteString(name)
	e.buf.WriteByte('\n')
	var c bytes.Buffer
	if len(data) > 0 && json.Compact(&c, data) == nil {
		data = c.Bytes()
	}
	for _, line := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") {
		e.buf.WriteString("data: ")
		e.buf.WriteString(strings.ReplaceAll(line, "\r", ""))
		e.buf.WriteByte('\n')
	}
	e.buf.WriteByte('\n')
}

// send writes what is queued; false when the client is gone or too slow
// (then the stream is counted as dropped).
func (e *sse) send() bool {
	return e.s.sendSSE(e.r, e.w, e.rc, &e.buf, "proxy")
}

// streamInvocation sends every result of an invocation as an event named
// after its status (pending, running, completed, failed) whose data is the
// output or, for failed, the problem. A timeout or an error after the
// stream started is a failed event with the hub's problem.
func (s *Server) streamInvocation(w http.ResponseWriter, r *http.Request, rt *hub.Router, in hub.Interaction) {
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := s.proxyContext(r, s.cfg.ProxyTimeout)
	defer cancel()
	d := deliver(ctx, rt, in)
	e := s.startSSE(w, r)
	if !e.send() {
		cancel()
		<-d.done
		return
	}
	s.pump(r, e, d, cancel, func(res hub.Result) {
		data := res.Data
		if res.Status == hub.StatusFailed {
			out := hub.ThingProblem(res.Problem)
			out.Instance = instanceOf(r)
			data, _ = json.Marshal(out)
		}
		e.event(res.Status, data)
	}, func(err error) {
		p := hub.ProblemOf(err)
		p.Instance = instanceOf(r)
		data, _ := json.Marshal(p)
		e.event(hub.StatusFailed, data)
	})
}

// proxyStream is observeproperty or subscribeevent as server-sent events:
// one event per value, named after the affordance, until the client goes.
func (s *Server) proxyStream(w http.ResponseWriter, r *http.Request, op hub.Op) {
	rt, err := s.router()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	in := interaction(r, op)
	in.Accept = lmos.MediaJSON
	_, t, err := rt.Check(in)
	if err == nil {
		err = s.allowThing(r, op, t)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	if r.Method == http.MethodHead {
		s.startSSE(w, r)
		return
	}
	ctx, cancel := s.proxyContext(r, 0)
	defer cancel()
	d := deliver(ctx, rt, in)
	// The stream answers 200 only once it is in place (its first, pending
	// result), so every value published after the response began reaches
	// the client; a failure before that is an ordinary error response.
	select {
	case <-d.c:
	case err := <-d.done:
		if err == nil {
			err = hub.Errorf(hub.EUNAVAILABLE, "the stream ended before it began")
		}
		s.writeError(w, r, err)
		return
	}
	e := s.startSSE(w, r)
	if !e.send() {
		cancel()
		<-d.done
		return
	}
	refused := false // pump calls both functions on this goroutine
	s.pump(r, e, d, cancel, func(res hub.Result) {
		if res.Status == hub.StatusPending || refused {
			return
		}
		cur := t
		if now, err := s.reg.Get(in.ThingID); err == nil {
			cur = now
		}
		if err := s.stillAllowed(r, op, &cur); err != nil {
			refused = true
			s.countRefusal("http", err)
			streamError(r, e, err)
			cancel() // the delivery ends, and with it the stream
			return
		}
		e.event(in.Name, res.Data)
	}, func(err error) {
		p := hub.ProblemOf(err)
		p.Instance = instanceOf(r)
		data, _ := json.Marshal(p)
		e.event("error", data)
	})
}

// pump forwards a delivery's results to an event stream with keep-alives
// until the delivery ends (onErr reports a failure) or the client goes; it
// always waits for the delivery's goroutine.
func (s *Server) pump(r *http.Request, e *sse, d *delivery, cancel context.CancelFunc,
	onResult func(hub.Result), onErr func(error)) {
	defer func() { cancel(); <-d.done }()
	beat := time.NewTicker(s.cfg.SSEHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-beat.C:
			e.buf.WriteString(sseKeepAlive)
		case res := <-d.c:
			onResult(res)
		case err := <-d.done:
			d.done <- err // for the deferred wait
			if err != nil && r.Context().Err() == nil {
				onErr(err)
				e.send()
			}
			return
		}
		if !e.send() {
			return
		}
	}
}

func (s *Server) proxyEvents(w http.ResponseWriter, r *http.Request) {
	s.proxyStream(w, r, hub.OpSubscribeEvent)
}
