package web

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The log tail (PROTOCOL §3.4, §10 "Log tail"): the hub's recent log
// records, kept in a ring, and GET /api/log streaming them to an admin —
// the last ones first, then each as it is logged. Everything is bounded:
// the ring's records, each record's size, each reader's queue.

// Log tail limits.
const (
	// DefaultLogTailSize is how many records the ring keeps.
	DefaultLogTailSize = 256
	// logTailQueue is how many records a reader may be behind before the
	// ones it has no room for are skipped (and counted in the next one).
	logTailQueue = 256
	logMsgMax    = 1024 // bytes of a record's message kept
	logAttrsMax  = 16   // attributes kept per record
	logValueMax  = 256  // bytes of one attribute's value kept
)

// LogRecord is one record of the tail, as GET /api/log sends it.
type LogRecord struct {
	Seq   uint64            `json:"seq"`
	Time  time.Time         `json:"time"`
	Level string            `json:"level"`
	Msg   string            `json:"msg"`
	Attrs map[string]string `json:"attrs,omitempty"`
	// Skipped counts the records this reader missed just before this one
	// (it fell logTailQueue behind).
	Skipped uint64 `json:"skipped,omitempty"`
	level   slog.Level
}

// LogTail keeps the last records the hub logged at Info or above (Debug
// too when the hub logs at Debug) and hands them to readers.
type LogTail struct {
	mu   sync.Mutex
	ring []LogRecord
	next int
	seq  uint64
	subs map[*logReader]struct{}
}

type logReader struct {
	c       chan LogRecord
	skipped uint64 // under LogTail.mu
}

// NewLogTail returns a tail keeping size records (DefaultLogTailSize when
// size ≤ 0).
func NewLogTail(size int) *LogTail {
	if size <= 0 {
		size = DefaultLogTailSize
	}
	return &LogTail{ring: make([]LogRecord, 0, size), subs: map[*logReader]struct{}{}}
}

// Wrap returns a handler that passes every record to next and keeps a
// copy in the tail.
func (t *LogTail) Wrap(next slog.Handler) slog.Handler { return &tailHandler{t: t, next: next} }

func (t *LogTail) add(rec LogRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	rec.Seq = t.seq
	if len(t.ring) < cap(t.ring) {
		t.ring = append(t.ring, rec)
	} else {
		t.ring[t.next] = rec
		t.next = (t.next + 1) % cap(t.ring)
	}
	for r := range t.subs {
		out := rec
		out.Skipped = r.skipped
		select {
		case r.c <- out:
			r.skipped = 0
		default: // the reader is behind: never block the logger
			r.skipped++
		}
	}
}

// subscribe returns the kept records at level or above, oldest first, and
// a reader of those that follow.
func (t *LogTail) subscribe(level slog.Level) ([]LogRecord, *logReader) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var past []LogRecord
	for i := range t.ring {
		rec := t.ring[(t.next+i)%len(t.ring)]
		if rec.level >= level {
			past = append(past, rec)
		}
	}
	r := &logReader{c: make(chan LogRecord, logTailQueue)}
	t.subs[r] = struct{}{}
	return past, r
}

func (t *LogTail) unsubscribe(r *logReader) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs, r)
}

// tailHandler is the slog.Handler of Wrap. attrs are those of With, each
// key qualified by its groups.
type tailHandler struct {
	t      *LogTail
	next   slog.Handler
	attrs  []slog.Attr
	prefix string
}

func (h *tailHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *tailHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo || h.next.Enabled(ctx, r.Level) {
		rec := LogRecord{Time: r.Time, Level: r.Level.String(), Msg: clip(r.Message, logMsgMax), level: r.Level}
		put := func(key string, v slog.Value) {
			if rec.Attrs == nil {
				rec.Attrs = map[string]string{}
			}
			if len(rec.Attrs) < logAttrsMax {
				rec.Attrs[key] = clip(v.Resolve().String(), logValueMax)
			}
		}
		for _, a := range h.attrs {
			put(a.Key, a.Value)
		}
		r.Attrs(func(a slog.Attr) bool {
			put(h.prefix+a.Key, a.Value)
			return true
		})
		h.t.add(rec)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	if err := h.next.Handle(ctx, r); err != nil {
		return fmt.Errorf("cannot log: %w", err)
	}
	return nil
}

func (h *tailHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		c.attrs = append(c.attrs, slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
	}
	return &c
}

func (h *tailHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.next = h.next.WithGroup(name)
	c.prefix = h.prefix + name + "."
	return &c
}

// clip cuts s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utfStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func utfStart(b byte) bool { return b&0xC0 != 0x80 }

// parseLevel reads ?level= (debug, info, warn, error; default info).
func parseLevel(s string) (slog.Level, error) {
	if s == "" {
		return slog.LevelInfo, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil || !strings.Contains("debug info warn error", strings.ToLower(s)) {
		return 0, &hub.Error{Code: hub.EINVALID, Message: "level must be debug, info, warn or error",
			Fields: []hub.FieldError{{Field: "level", Description: "must be debug, info, warn or error"}}}
	}
	return l, nil
}

// logTail is GET /api/log: an admin's event stream of the hub's log, the
// kept records at ?level= or above first, then each new one ("log"
// events), with keep-alives, until the client goes or the hub stops.
func (s *Server) logTail(w http.ResponseWriter, r *http.Request) {
	t := s.cfg.LogTail
	if t == nil {
		s.writeError(w, r, hub.Errorf(hub.EUNAVAILABLE, "this hub keeps no log tail"))
		return
	}
	level, err := parseLevel(r.URL.Query().Get("level"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	past, sub := t.subscribe(level)
	defer t.unsubscribe(sub)
	e := s.startSSE(w, r)
	if r.Method == http.MethodHead {
		return
	}
	var skipped uint64
	write := func(rec LogRecord) {
		rec.Skipped += skipped
		skipped = 0
		b, _ := json.Marshal(rec)
		e.event("log", b)
	}
	for _, rec := range past {
		write(rec)
	}
	if !e.send() {
		return
	}
	beat := time.NewTicker(s.cfg.SSEHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-beat.C:
			e.buf.WriteString(sseKeepAlive)
		case rec := <-sub.c:
			if rec.level < level {
				skipped += rec.Skipped // not this reader's level: carry the count on
				continue
			}
			write(rec)
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		}
		if !e.send() {
			return
		}
	}
}
