package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// The hub's feed (PROTOCOL §3.4, §7): GET /api/events streams every hub
// event — directory changes, presence, joins, bindings, groups — as the
// objects of lmos/v1/hub/events, over the machinery of /events (stream
// slots, heartbeats, write timeouts, the subscription's bounded buffer,
// the access check on every event). Only directory events are numbered
// and logged: they carry an SSE id and Last-Event-ID replays them; the
// others are state, sent live only, and carry no id, so a client's last
// event id stays the last directory event's.

func (s *Server) hubEventRoutes() {
	s.mux.HandleFunc("GET /api/events", s.read(s.hubEvents))
}

func (s *Server) hubEvents(w http.ResponseWriter, r *http.Request) { s.serveEvents(w, r, true) }

// hubEventView is one event of /api/events: the object
// lmos/v1/hub/events carries (mqtt's hubEvent, the same members in the
// same order), plus with ?diff=true the created TD or the update's merge
// patch.
type hubEventView struct {
	Type     hub.EventType   `json:"type"`
	ID       string          `json:"id"`
	Seq      uint64          `json:"seq"`
	Time     time.Time       `json:"time"`
	Presence *hub.Presence   `json:"presence,omitempty"`
	Join     *hub.JoinEvent  `json:"join,omitempty"`
	DID      string          `json:"did,omitempty"`
	Group    *hub.GroupEvent `json:"group,omitempty"`
	TD       json.RawMessage `json:"td,omitempty"`
	Patch    json.RawMessage `json:"patch,omitempty"`
}

// hubFrame writes one event of /api/events.
func (s *Server) hubFrame(buf *bytes.Buffer, e hub.Event, diff bool) {
	v := hubEventView{Type: e.Type, ID: e.ID, Seq: e.Seq, Time: e.Time, Presence: e.Presence, Join: e.Join, DID: e.DID, Group: e.Group}
	if diff {
		switch e.Type {
		case hub.EventCreated:
			td := e.TD
			if td == nil {
				td, _ = s.reg.Raw(e.ID) // a replay: the log keeps no TD
			}
			var c bytes.Buffer
			if td != nil && json.Compact(&c, td) == nil {
				v.TD = c.Bytes()
			}
		case hub.EventUpdated:
			v.Patch = e.Patch
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		s.log.Error("cannot encode hub event", "err", err)
		return
	}
	buf.WriteString("event: ")
	buf.WriteString(string(e.Type))
	if e.Seq != 0 {
		buf.WriteString("\nid: ")
		buf.WriteString(strconv.FormatUint(e.Seq, 10))
	}
	buf.WriteString("\ndata: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}
