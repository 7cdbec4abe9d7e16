package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

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

// hubFrame writes one event of /api/events.
func (s *Server) hubFrame(buf *bytes.Buffer, e hub.Event, diff bool) {
	v := e.Feed() // the object of lmos/v1/hub/events
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
