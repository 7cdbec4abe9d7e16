package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// events serves the W3C WoT Discovery change feed as server-sent events.
// Last-Event-ID replays what the client missed from the store's bounded log.
func (s *Server) events(w http.ResponseWriter, r *http.Request) { s.serveEvents(w, r, false) }

// serveEvents serves a change feed: the directory's (/events) or, with
// all, every hub event (/api/events).
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request, all bool) {
	req, ok := s.parseEventsRequest(w, r)
	if !ok {
		return
	}
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	sub, past, err := s.reg.Subscribe(req.after, req.resume)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer sub.Cancel()
	st := &eventStream{s: s, w: w, r: r, rc: http.NewResponseController(w), req: req, retry: true, all: all}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if sub.Gap != nil {
		st.resync(sub.Gap)
	}
	if !st.replay(past) {
		return
	}
	st.live(sub)
}

// resync buffers the lmos_resync event that opens a stream resumed from a
// sequence the event log no longer covers (PROTOCOL §3.1): the client
// must read the directory again, since no partial replay follows. Its id
// is the newest sequence, from which the live events follow.
func (st *eventStream) resync(g *hub.FeedGap) {
	if st.retry {
		st.buf.WriteString(sseRetry)
		st.retry = false
	}
	fmt.Fprintf(&st.buf, "event: lmos_resync\nid: %d\ndata: {\"type\":\"resync\",\"last\":%d,\"oldest\":%d}\n\n", g.Last, g.Last, g.Oldest)
}

// eventsRequest is what a request for the change feed asks for.
type eventsRequest struct {
	only   hub.EventType // one event type, or "" for all
	diff   bool          // TDs and merge patches, not only ids
	after  uint64        // replay what followed this sequence number
	resume bool          // Last-Event-ID was sent: replay
}

// parseEventsRequest reads the event type, ?diff and Last-Event-ID of r;
// on an invalid one it has written the error and reports false.
func (s *Server) parseEventsRequest(w http.ResponseWriter, r *http.Request) (req eventsRequest, ok bool) {
	if t := r.PathValue("type"); t != "" {
		req.only = hub.EventType(t)
		if req.only != hub.EventCreated && req.only != hub.EventUpdated && req.only != hub.EventDeleted {
			s.writeError(w, r, hub.Errorf(hub.ENOTFOUND, "no event type %q; use thing_created, thing_updated or thing_deleted", t))
			return req, false
		}
	}
	req.diff = r.URL.Query().Get("diff") == "true"
	last := r.Header.Get("Last-Event-ID")
	if last != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
		if err != nil {
			s.writeError(w, r, hub.Errorf(hub.EINVALID, "Last-Event-ID must be an event sequence number, not %q", last))
			return req, false
		}
		req.after, req.resume = n, true
	}
	return req, true
}

// eventStream is one client's open change feed: what it asked for and the
// buffer of frames not yet sent.
type eventStream struct {
	s   *Server
	w   http.ResponseWriter
	r   *http.Request
	rc  *http.ResponseController
	req eventsRequest
	buf bytes.Buffer
	// retry is true until the reconnection time went out.
	retry bool
	// all: every hub event (/api/events), not only the directory's.
	all bool
}

// wanted reports whether e goes on this stream: the directory stream
// carries only the W3C WoT Discovery events.
func (st *eventStream) wanted(e hub.Event) bool {
	if st.all {
		return true
	}
	return e.Type.IsDirectoryEvent() && (st.req.only == "" || e.Type == st.req.only)
}

// emit buffers the frame of e.
func (st *eventStream) emit(e hub.Event) {
	// The reconnection time rides in the block of the first event: a block
	// of its own reaches some clients (r3labs/sse) as an empty event.
	if st.retry {
		st.buf.WriteString(sseRetry)
		st.retry = false
	}
	if st.all {
		st.s.hubFrame(&st.buf, e, st.req.diff)
		return
	}
	st.s.frame(&st.buf, e, st.req.diff)
}

// send writes and flushes what is buffered; false ends the stream.
func (st *eventStream) send() bool { return st.s.sendSSE(st.r, st.w, st.rc, &st.buf, st.name()) }

// name names the stream in logs.
func (st *eventStream) name() string {
	if st.all {
		return "hub"
	}
	return "directory"
}

// replay sends the events the client missed; false ends the stream.
func (st *eventStream) replay(past []hub.Event) bool {
	for _, e := range past {
		if st.wanted(e) {
			st.emit(e)
		}
		// A long replay goes out in pieces, not as one buffer.
		if st.buf.Len() > 64<<10 && !st.send() {
			return false
		}
	}
	return st.send()
}

// live sends each new event, and a keep-alive at every heartbeat, until
// the client goes, the server closes or the subscription ends. It takes
// events from the subscription as they come (the change feed never waits
// for this client) and queues their frames — encoded once per event and
// shared by every stream (hub.Event.Encoded) — for a writer of its own; a
// client whose unwritten frames exceed http.maxStreamQueueBytes has
// stopped reading and is cut off at once, and one that leaves a frame
// unread for the write timeout is cut off then (both counted).
func (st *eventStream) live(sub *hub.Subscription) {
	q := st.s.startFrameQueue(st.r, st.w, st.rc, st.name())
	defer q.stop()
	beat := time.NewTicker(st.s.cfg.SSEHeartbeat)
	defer beat.Stop()
	for {
		var frame []byte
		select {
		case <-st.r.Context().Done():
			return
		case <-st.s.closing:
			return
		case <-q.done:
			return // the client went or stopped reading
		case <-beat.C:
			frame = []byte(sseKeepAlive)
		case e, ok := <-sub.C:
			if !ok {
				if sub.Dropped() {
					st.s.dropSSE(st.r, st.name(), "fell behind the change feed")
				}
				return
			}
			if !st.wanted(e) {
				continue
			}
			if err := st.s.stillAllowed(st.r, hub.OpReadDirectory, nil); err != nil {
				// A token revoked or expired since: an error event, then
				// the end (PROTOCOL §3.5).
				st.s.countRefusal("http", err)
				p := hub.ProblemOf(err)
				p.Instance = instanceOf(st.r)
				data, _ := json.Marshal(p)
				q.push([]byte("event: error\ndata: " + string(data) + "\n\n"))
				q.finish()
				return
			}
			if st.retry {
				// The reconnection time rides in the block of the first
				// event (a block of its own reaches some clients as an
				// empty event): written just before it.
				st.retry = false
				if !q.push([]byte(sseRetry)) {
					return
				}
			}
			frame = st.frameOf(e)
		}
		if !q.push(frame) {
			return
		}
	}
}

// frameOf is the frame of e on this stream, shared with every stream of
// the same form.
func (st *eventStream) frameOf(e hub.Event) []byte {
	key := "directory"
	if st.all {
		key = "hub"
	}
	if st.req.diff {
		key += "+diff"
	}
	return e.Encoded(key, func() []byte {
		var b bytes.Buffer
		if st.all {
			st.s.hubFrame(&b, e, st.req.diff)
		} else {
			st.s.frame(&b, e, st.req.diff)
		}
		return b.Bytes()
	})
}

// minFrameCharge is what a queued frame counts against
// http.maxStreamQueueBytes at least. The frames are shared by every
// stream, so what a stream itself holds is a reference per frame: small
// frames (presence changes, ~60 bytes) would let each of a thousand unread
// streams hold tens of thousands of references. Counting each as 512
// bytes keeps a stream at 2,048 frames with the default, as mosquitto
// bounds a client's queue by messages too.
const minFrameCharge = 512

func frameCharge(frame []byte) int { return max(len(frame), minFrameCharge) }

// frameQueue is an event stream's frames not yet written, written by a
// goroutine of its own; it bounds their bytes (http.maxStreamQueueBytes).
type frameQueue struct {
	s      *Server
	r      *http.Request
	w      http.ResponseWriter
	rc     *http.ResponseController
	stream string

	mu     sync.Mutex
	frames [][]byte
	bytes  int  // charge of frames not yet written, the one being written too (frameCharge)
	ending bool // finish: write what is queued, then end
	cut    bool // cut off for leaving too much unread
	// stopped: stop was called; writing: a write is under way (stop
	// aborts it through the write deadline).
	stopped, writing bool
	wake             chan struct{}
	done             chan struct{} // closed when the writer has ended
}

func (s *Server) startFrameQueue(r *http.Request, w http.ResponseWriter, rc *http.ResponseController, stream string) *frameQueue {
	q := &frameQueue{s: s, r: r, w: w, rc: rc, stream: stream, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.write()
	return q
}

// push queues a frame (shared: never changed); false when the stream has
// ended, or ends now because its client leaves more than
// http.maxStreamQueueBytes unwritten.
func (q *frameQueue) push(frame []byte) bool {
	select {
	case <-q.done:
		return false
	default:
	}
	q.mu.Lock()
	over := q.bytes > 0 && q.bytes+frameCharge(frame) > q.s.cfg.MaxStreamQueueBytes
	if over {
		q.cut = true
	} else {
		q.frames = append(q.frames, frame)
		q.bytes += frameCharge(frame)
	}
	n := q.bytes
	q.mu.Unlock()
	if over {
		q.s.dropSSE(q.r, q.stream, fmt.Sprintf("left %d bytes unread, more than http.maxStreamQueueBytes (%d)", n, q.s.cfg.MaxStreamQueueBytes))
		q.stop()
		return false
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// finish writes what is queued (within the write timeout) and ends.
func (q *frameQueue) finish() {
	q.mu.Lock()
	q.ending = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.done
}

// stop ends the writer at once, a write under way too, and waits for it.
func (q *frameQueue) stop() {
	q.mu.Lock()
	q.frames, q.ending, q.stopped = nil, true, true
	if q.writing {
		_ = q.rc.SetWriteDeadline(time.Now()) // the connection is closed after
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.done
}

// write writes the queued frames as they come until stop or finish, or
// until the client fails to take one within the write timeout. Its write
// deadline is set under mu, so stop's cannot be overwritten.
func (q *frameQueue) write() {
	defer close(q.done)
	for {
		<-q.wake
		q.mu.Lock()
		batch, ending := q.frames, q.ending
		q.frames = nil
		q.mu.Unlock()
		for _, f := range batch {
			deadline := time.Now().Add(q.s.cfg.SSEWriteTimeout)
			q.mu.Lock()
			if q.stopped {
				q.mu.Unlock()
				return
			}
			q.writing = true
			_ = q.rc.SetWriteDeadline(deadline)
			q.mu.Unlock()
			_, err := q.w.Write(f)
			if err == nil {
				err = q.rc.Flush()
			}
			q.mu.Lock()
			q.writing = false
			q.bytes -= frameCharge(f)
			cut := q.cut
			q.mu.Unlock()
			if err != nil {
				// A cut-off stream is counted once, by push.
				if !cut && (errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline)) {
					q.s.dropSSE(q.r, q.stream, "did not read for "+q.s.cfg.SSEWriteTimeout.String())
				}
				return
			}
		}
		if ending {
			return
		}
	}
}

// frame writes one SSE event. data is {"id"} unless diff asks for the TD of
// a creation or the merge patch of an update.
func (s *Server) frame(buf *bytes.Buffer, e hub.Event, diff bool) {
	data := []byte(nil)
	switch {
	case diff && e.Type == hub.EventCreated:
		td := e.TD
		if td == nil {
			// A replayed creation: the log keeps no TD, so send the Thing as
			// it is now, or just its id if it is gone.
			td, _ = s.reg.Raw(e.ID)
		}
		var c bytes.Buffer
		if td != nil && json.Compact(&c, td) == nil {
			data = c.Bytes()
		}
	case diff && e.Type == hub.EventUpdated && len(e.Patch) > 0:
		data = e.Patch
	}
	if data == nil {
		data, _ = json.Marshal(map[string]string{"id": e.ID})
	}
	buf.WriteString("event: ")
	buf.WriteString(string(e.Type))
	buf.WriteString("\nid: ")
	buf.WriteString(strconv.FormatUint(e.Seq, 10))
	buf.WriteString("\ndata: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}

// sendSSE writes what buf holds to an event stream and empties buf; false
// when the stream must end. A client that does not take the frame within
// the write timeout has stopped reading: the hub closes its stream, and
// counts it (a client that went away is not counted).
func (s *Server) sendSSE(r *http.Request, w http.ResponseWriter, rc *http.ResponseController, buf *bytes.Buffer, stream string) bool {
	deadline := time.Now().Add(s.cfg.SSEWriteTimeout)
	_ = rc.SetWriteDeadline(deadline)
	_, err := w.Write(buf.Bytes())
	buf.Reset()
	if err == nil {
		err = rc.Flush()
	}
	if err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline)) {
		s.dropSSE(r, stream, "did not read for "+s.cfg.SSEWriteTimeout.String())
	}
	return err == nil
}

// dropSSE counts an event stream the hub closes for a slow reader.
func (s *Server) dropSSE(r *http.Request, stream, why string) {
	s.sse.Inc()
	s.log.Warn("sse client too slow, disconnected", "stream", stream, "why", why, "remote", r.RemoteAddr, "path", r.URL.Path)
}
