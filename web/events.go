package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// events serves the W3C WoT Discovery change feed as server-sent events.
// Last-Event-ID replays what the client missed from the store's bounded log.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	var only hub.EventType
	if t := r.PathValue("type"); t != "" {
		only = hub.EventType(t)
		if only != hub.EventCreated && only != hub.EventUpdated && only != hub.EventDeleted {
			s.writeError(w, r, hub.Errorf(hub.ENOTFOUND, "no event type %q; use thing_created, thing_updated or thing_deleted", t))
			return
		}
	}
	q := r.URL.Query()
	diff := q.Get("diff") == "true"
	last := r.Header.Get("Last-Event-ID")
	var after uint64
	if last != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
		if err != nil {
			s.writeError(w, r, hub.Errorf(hub.EINVALID, "Last-Event-ID must be an event sequence number, not %q", last))
			return
		}
		after = n
	}
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	sub, past, err := s.reg.Subscribe(after, last != "")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer sub.Cancel()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	var buf bytes.Buffer
	send := func() bool { return s.sendSSE(r, w, rc, &buf, "directory") }
	// The reconnection time rides in the block of the first event: a block
	// of its own reaches some clients (r3labs/sse) as an empty event.
	retry := true
	emit := func(e hub.Event) {
		if retry {
			buf.WriteString(sseRetry)
			retry = false
		}
		s.frame(&buf, e, diff)
	}
	// The directory stream carries only the W3C WoT Discovery events.
	wanted := func(e hub.Event) bool { return e.Type.IsDirectoryEvent() && (only == "" || e.Type == only) }
	for _, e := range past {
		if wanted(e) {
			emit(e)
		}
		// A long replay goes out in pieces, not as one buffer.
		if buf.Len() > 64<<10 && !send() {
			return
		}
	}
	if !send() {
		return
	}
	beat := time.NewTicker(s.cfg.SSEHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-beat.C:
			buf.WriteString(sseKeepAlive)
		case e, ok := <-sub.C:
			if !ok {
				if sub.Dropped() {
					s.dropSSE(r, "directory", "fell behind the change feed")
				}
				return
			}
			if !wanted(e) {
				continue
			}
			emit(e)
		}
		if !send() {
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
