package web_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/web"
)

type logRecord struct {
	Seq     uint64
	Level   string
	Msg     string
	Attrs   map[string]string
	Skipped uint64
}

func (s *sseStream) logRecord() logRecord {
	s.t.Helper()
	f := s.next()
	var rec logRecord
	if f.event != "log" || json.Unmarshal([]byte(f.data), &rec) != nil {
		s.t.Fatalf("not a log event: %q", f.raw)
	}
	return rec
}

// TestLogTail: GET /api/log gives an admin the kept records at the level
// asked for, oldest first, then each new one as it is logged; records and
// the ring are bounded.
func TestLogTail(t *testing.T) {
	tail := web.NewLogTail(4)
	log := slog.New(tail.Wrap(slog.NewTextHandler(io.Discard, nil))).With("component", "mqtt")
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) { c.LogTail = tail })

	log.Debug("not kept: the hub logs at info")
	log.Info("one")
	log.Warn("refused", "reason", "bad token", "remote", "10.0.0.9")
	log.Info("three")
	log.WithGroup("join").Warn("takeover", "id", "urn:x", "msg", strings.Repeat("é", 1000))
	log.Error("five")
	log.Info("six") // the ring holds 4: "one" and "refused" are gone

	all := d.stream("/api/log")
	var got []string
	for range 4 {
		got = append(got, all.logRecord().Msg)
	}
	if strings.Join(got, ",") != "three,takeover,five,six" {
		t.Fatalf("kept records %v, want the last four oldest first", got)
	}

	warn := d.stream("/api/log?level=warn")
	rec := warn.logRecord()
	if rec.Msg != "takeover" || rec.Level != "WARN" || rec.Attrs["component"] != "mqtt" || rec.Attrs["join.id"] != "urn:x" {
		t.Fatalf("first warn record %+v", rec)
	}
	if v := rec.Attrs["join.msg"]; len(v) > 260 || !strings.HasSuffix(v, "…") {
		t.Fatalf("a long value is kept whole (%d bytes)", len(v))
	}
	if rec = warn.logRecord(); rec.Msg != "five" || rec.Level != "ERROR" {
		t.Fatalf("second warn record %+v", rec)
	}
	// Live: an info record is not for this reader, the warn after it is.
	log.Info("live info")
	log.Warn("live warn", "n", 1)
	if rec = warn.logRecord(); rec.Msg != "live warn" || rec.Attrs["n"] != "1" || rec.Skipped != 0 {
		t.Fatalf("live record %+v", rec)
	}
	if rec = all.logRecord(); rec.Msg != "live info" {
		t.Fatalf("the info reader got %+v", rec)
	}
}

// TestLogTailRefusals: only an admin reads the log; a bad level and a hub
// without a tail are refused with a problem; a refusal leaves no reader
// behind (the next admin read sees the same records).
func TestLogTailRefusals(t *testing.T) {
	tail := web.NewLogTail(8)
	log := slog.New(tail.Wrap(slog.NewTextHandler(io.Discard, nil)))
	log.Warn("kept")
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) { c.LogTail = tail })

	var tok struct{ Token string }
	d.do("POST", "/api/tokens", "application/json", `{"name":"r","scope":"read"}`).want(t, "read token", http.StatusCreated).json(t, &tok)
	d.do("GET", "/api/log", "", "", "Authorization", "", "Accept", "text/event-stream").problem(t, "anonymous", http.StatusUnauthorized, "unauthorized")
	d.do("GET", "/api/log", "", "", "Authorization", "Bearer "+tok.Token, "Accept", "text/event-stream").problem(t, "read token", http.StatusForbidden, "forbidden")
	d.do("GET", "/api/log", "", "", "Authorization", "Bearer wrong", "Accept", "text/event-stream").problem(t, "wrong token", http.StatusUnauthorized, "unauthorized")
	p := d.do("GET", "/api/log?level=verbose", "", "").problem(t, "bad level", http.StatusBadRequest, "invalid")
	if len(p.ValidationErrors) != 1 || p.ValidationErrors[0].Field != "level" {
		t.Fatalf("bad level problem %+v", p)
	}
	if rec := d.stream("/api/log").logRecord(); rec.Msg != "kept" || rec.Seq != 1 {
		t.Fatalf("after the refusals the tail holds %+v", rec)
	}

	none := newDirectory(t)
	none.do("GET", "/api/log", "", "").problem(t, "no tail", http.StatusServiceUnavailable, "unavailable")
}
