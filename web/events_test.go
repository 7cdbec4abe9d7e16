package web_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// changes registers a and b, patches a and deletes b: four events.
func (d *directory) changes(t *testing.T) {
	t.Helper()
	d.do("PUT", "/things/urn:example:a", tdType, thingTD("urn:example:a", "A")).want(t, "PUT a", http.StatusCreated)
	d.do("PUT", "/things/urn:example:b", tdType, thingTD("urn:example:b", "B")).want(t, "PUT b", http.StatusCreated)
	d.do("PATCH", "/things/urn:example:a", patchType, `{"title":"A2"}`).want(t, "PATCH a", http.StatusNoContent)
	d.do("DELETE", "/things/urn:example:b", "", "").want(t, "DELETE b", http.StatusNoContent)
}

type change struct{ event, id string }

// frames reads n frames and returns their event types and Thing ids; the
// frame ids must increase.
func (s *sseStream) frames(t *testing.T, n int) ([]change, []sseFrame) {
	t.Helper()
	var out []change
	var raw []sseFrame
	last := uint64(0)
	for range n {
		f := s.next()
		seq, err := strconv.ParseUint(f.id, 10, 64)
		if err != nil || seq <= last {
			t.Fatalf("frame id %q after %d: %q", f.id, last, f.raw)
		}
		last = seq
		var data struct{ ID string }
		if err := json.Unmarshal([]byte(f.data), &data); err != nil {
			t.Fatalf("frame data %q: %v", f.data, err)
		}
		out = append(out, change{f.event, data.ID})
		raw = append(raw, f)
	}
	return out, raw
}

func sameChanges(t *testing.T, what string, got, want []change) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

func TestEventsReplayFromLastEventID(t *testing.T) {
	d := newDirectory(t)
	d.changes(t)
	all := []change{{"thing_created", "urn:example:a"}, {"thing_created", "urn:example:b"},
		{"thing_updated", "urn:example:a"}, {"thing_deleted", "urn:example:b"}}

	s := d.stream("/events", "Last-Event-ID", "0")
	got, frames := s.frames(t, 4)
	sameChanges(t, "replay from 0", got, all)
	// The frame format: the reconnection time rides with the first event,
	// then event, id and one line of data.
	want := "retry: 2000\nevent: thing_created\nid: " + frames[0].id + "\ndata: {\"id\":\"urn:example:a\"}\n\n"
	if frames[0].raw != want || frames[1].retry != "" {
		t.Fatalf("first frame %q, want %q; second %q", frames[0].raw, want, frames[1].raw)
	}
	// A client that saw the second event gets the rest, then live ones.
	s = d.stream("/events", "Last-Event-ID", frames[1].id)
	got, _ = s.frames(t, 2)
	sameChanges(t, "replay after the second", got, all[2:])
	d.do("PUT", "/things/urn:example:c", tdType, thingTD("urn:example:c", "C")).want(t, "PUT c", http.StatusCreated)
	got, _ = s.frames(t, 1)
	sameChanges(t, "live after the replay", got, []change{{"thing_created", "urn:example:c"}})

	// One event type only.
	s = d.stream("/events/thing_deleted", "Last-Event-ID", "0")
	got, _ = s.frames(t, 1)
	sameChanges(t, "thing_deleted only", got, all[3:])
	d.do("DELETE", "/things/urn:example:c", "", "").want(t, "DELETE c", http.StatusNoContent)
	got, _ = s.frames(t, 1)
	sameChanges(t, "live thing_deleted", got, []change{{"thing_deleted", "urn:example:c"}})
}

func TestEventsLiveWithoutReplayAndWithDiff(t *testing.T) {
	d := newDirectory(t)
	d.changes(t)
	// Without Last-Event-ID nothing of the past: the first frame is the
	// next change. 200 comes once subscribed.
	s := d.stream("/events?diff=true")
	d.do("PUT", "/things/urn:example:c", tdType, thingTD("urn:example:c", "C")).want(t, "PUT c", http.StatusCreated)
	f := s.next()
	var td map[string]any
	if err := json.Unmarshal([]byte(f.data), &td); err != nil || f.event != "thing_created" || td["title"] != "C" || td["security"] != "nosec_sc" {
		t.Fatalf("diff creation frame %q: %v", f.raw, err)
	}
	d.do("PATCH", "/things/urn:example:c", patchType, `{"description":"new"}`).want(t, "PATCH c", http.StatusNoContent)
	f = s.next()
	var patch map[string]any
	if err := json.Unmarshal([]byte(f.data), &patch); err != nil || f.event != "thing_updated" || patch["description"] != "new" || patch["title"] != nil {
		t.Fatalf("diff update frame %q: %v", f.raw, err)
	}
}

func TestEventsRefusals(t *testing.T) {
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) { c.MaxStreams = 1 })
	d.do("GET", "/events", "", "", "Last-Event-ID", "seven").problem(t, "Last-Event-ID not a number", http.StatusBadRequest, hub.EINVALID)
	d.do("GET", "/events/thing_exploded", "", "").problem(t, "unknown event type", http.StatusNotFound, hub.ENOTFOUND)

	// One stream per client address here: the second is refused with a
	// time to retry.
	d.stream("/events")
	r := d.do("GET", "/events", "", "")
	r.problem(t, "second stream", http.StatusTooManyRequests, hub.ERATELIMIT)
	if v := r.header.Get("Retry-After"); v != "5" {
		t.Fatalf("429: Retry-After %q", v)
	}
}
