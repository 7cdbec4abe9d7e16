package web

import (
	"io"
	"log/slog"
	"testing"
)

// TestLogTailSlowReader: a reader that does not keep up never blocks the
// logger; the records it had no room for are skipped and counted in the
// next one it gets.
func TestLogTailSlowReader(t *testing.T) {
	tail := NewLogTail(8)
	log := slog.New(tail.Wrap(slog.NewTextHandler(io.Discard, nil)))
	_, r := tail.subscribe(slog.LevelInfo)
	defer tail.unsubscribe(r)
	for range logTailQueue + 10 {
		log.Info("x") // would block here if a reader could hold the logger
	}
	for range logTailQueue {
		<-r.c
	}
	log.Info("after")
	rec := <-r.c
	if rec.Msg != "after" || rec.Skipped != 10 {
		t.Fatalf("after falling behind: %+v, want 10 skipped", rec)
	}
	if len(tail.ring) != 8 {
		t.Fatalf("the ring holds %d records", len(tail.ring))
	}
}
