package web_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/web"
)

type hubEventJSON struct {
	Type     string
	ID       string
	Seq      uint64
	Presence *hub.Presence
	Group    *hub.GroupEvent
	TD       json.RawMessage
	Patch    json.RawMessage
}

// hubEvents reads n frames of /api/events: the SSE event name must be the
// object's type, and only numbered (logged) events carry an SSE id.
func (s *sseStream) hubEvents(t *testing.T, n int) []hubEventJSON {
	t.Helper()
	var out []hubEventJSON
	for range n {
		f := s.next()
		var e hubEventJSON
		if err := json.Unmarshal([]byte(f.data), &e); err != nil {
			t.Fatalf("frame %q: %v", f.raw, err)
		}
		if f.event != e.Type {
			t.Fatalf("frame event %q, data type %q", f.event, e.Type)
		}
		if (e.Seq == 0) != (f.id == "") {
			t.Fatalf("frame id %q for seq %d: %q", f.id, e.Seq, f.raw)
		}
		out = append(out, e)
	}
	return out
}

func describe(evs []hubEventJSON) []string {
	var out []string
	for _, e := range evs {
		s := e.Type + " " + e.ID
		if e.Group != nil {
			s += " " + e.Group.Action + " " + e.Group.Member
		}
		if e.Presence != nil {
			s += " " + e.Presence.Status
		}
		out = append(out, s)
	}
	return out
}

// TestAPIEventsCarriesEveryHubEvent: /api/events streams directory,
// presence and group events in the order the registry committed them;
// Last-Event-ID replays the logged (directory) events only.
func TestAPIEventsCarriesEveryHubEvent(t *testing.T) {
	d := newDirectory(t)
	s := d.stream("/api/events?diff=true")
	d.things(t, "urn:example:a")
	if err := d.reg.SetPresence(t.Context(), "urn:example:a", hub.PresenceOnline, hub.SourceMQTT); err != nil {
		t.Fatal(err)
	}
	d.do("PUT", "/api/groups/g1", "application/json", `{"title":"One","members":["urn:example:a"]}`).want(t, "PUT g1", http.StatusCreated)
	d.do("PATCH", "/api/groups/g1", patchType, `{"title":"Uno"}`).want(t, "PATCH g1", http.StatusOK)
	d.do("DELETE", "/things/urn:example:a", "", "").want(t, "DELETE a", http.StatusNoContent)
	d.do("DELETE", "/api/groups/g1", "", "").want(t, "dissolve g1", http.StatusNoContent)

	evs := s.hubEvents(t, 7)
	want := []string{
		"thing_created urn:example:a",
		"presence urn:example:a online",
		"group g1 created ",
		"group g1 member_added urn:example:a",
		"group g1 updated ",
		"thing_deleted urn:example:a",
		"group g1 member_removed urn:example:a",
	}
	got := describe(evs)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
	if evs[0].TD == nil || evs[0].Seq == 0 || evs[5].Seq <= evs[0].Seq {
		t.Fatalf("directory events %+v", evs)
	}
	if e := s.hubEvents(t, 1)[0]; e.Group == nil || e.Group.Action != hub.GroupDissolved {
		t.Fatalf("last event %+v, want the dissolution", e)
	}

	// A client that resumes gets the logged events it missed, not the
	// live-only ones.
	r := d.stream("/api/events", "Last-Event-ID", "0")
	replayed := describe(r.hubEvents(t, 2))
	if replayed[0] != "thing_created urn:example:a" || replayed[1] != "thing_deleted urn:example:a" {
		t.Fatalf("replayed %q", replayed)
	}
	d.things(t, "urn:example:b")
	if next := describe(r.hubEvents(t, 1)); next[0] != "thing_created urn:example:b" {
		t.Fatalf("after the replay %q", next)
	}
}

// TestAPIEventsNeedsADirectoryRead: with access.anonymous none, the feed
// is refused without a token, and a read token opens it.
func TestAPIEventsNeedsADirectoryRead(t *testing.T) {
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) {
		a, err := hub.NewAccess(hub.AnonymousNone, "open", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Access = a
	})
	d.do("GET", "/api/events", "", "", "Authorization", "").problem(t, "anonymous feed", http.StatusUnauthorized, "unauthorized")
	read := d.scopedToken(t, "read")
	s := d.stream("/api/events", "Authorization", "Bearer "+read)
	d.do("PUT", "/api/groups/g1", "application/json", `{"title":"One"}`).want(t, "PUT g1", http.StatusCreated)
	if e := s.hubEvents(t, 1)[0]; e.Group == nil || e.Group.Action != hub.GroupCreated {
		t.Fatalf("event %+v", e)
	}
}
