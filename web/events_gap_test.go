package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// resyncFrame reads the first frame of s, which must be lmos_resync, and
// returns its data.
func resyncFrame(t *testing.T, s *sseStream) (last, oldest uint64, id string) {
	t.Helper()
	f := s.next()
	var data struct {
		Type         string
		Last, Oldest uint64
	}
	if err := json.Unmarshal([]byte(f.data), &data); err != nil || f.event != "lmos_resync" || data.Type != "resync" {
		t.Fatalf("first frame %q, want event lmos_resync with {type: resync, last, oldest}: %v", f.raw, err)
	}
	return data.Last, data.Oldest, f.id
}

// A client resuming from before the oldest logged event, or from a
// sequence the hub never reached (a store restored from a backup), learns
// that it must read the directory again: the stream begins with
// lmos_resync and continues live, with no partial replay.
func TestEventsSignalAGap(t *testing.T) {
	d := newDirectory(t)
	// More events than the log keeps (registry.eventLogSize, 1,000),
	// written concurrently so they share commits.
	const n = 1010
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("urn:gap:%04d", i)
			if _, err := d.reg.Put(context.Background(), id, []byte(thingTD(id, "G")), hub.Origin{Source: hub.SourceHTTP}); err != nil {
				t.Errorf("put %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	cur := d.reg.Revision()
	if cur != n {
		t.Fatalf("revision %d, want %d", cur, n)
	}
	for _, path := range []string{"/events", "/events?diff=true", "/api/events"} {
		for _, from := range []uint64{3, cur + 50} {
			s := d.stream(path, "Last-Event-ID", strconv.FormatUint(from, 10))
			last, oldest, id := resyncFrame(t, s)
			if last != cur || oldest != cur-999 || id != strconv.FormatUint(cur, 10) {
				t.Fatalf("%s from %d: last %d oldest %d id %q, want %d %d %d", path, from, last, oldest, id, cur, cur-999, cur)
			}
			// Then live: the next frame is the next change, not a replay.
			tid := fmt.Sprintf("urn:gap:live:%d:%d", len(path), from)
			d.do("PUT", "/things/"+tid, tdType, thingTD(tid, "L")).want(t, "PUT live", http.StatusCreated)
			f := s.next()
			cur++
			if f.event != "thing_created" || f.id != strconv.FormatUint(cur, 10) {
				t.Fatalf("%s from %d: after the resync %q, want the live creation %d", path, from, f.raw, cur)
			}
			s.close()
		}
	}
	// Within the log: replayed as before, no resync.
	s := d.stream("/events", "Last-Event-ID", strconv.FormatUint(cur-1, 10))
	if f := s.next(); f.event != "thing_created" || f.id != strconv.FormatUint(cur, 10) {
		t.Fatalf("replay within the log: %q", f.raw)
	}
}
