package web

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// GET /api/groups/{gid}/channel?topic=<filter> (PROTOCOL §7): an SSE read
// of a group channel for a member holding a token bound to it (hub.Token
// .Thing). Each message is `event: message` with data {topic, data,
// contentType?}: topic below lmos/v1/groups/{gid}/, data the JSON value
// (CBOR transcoded; other payloads as a base64 string, hub.GroupMessage
// .Value). The stream ends at once with `event: error` (403) when the
// membership ends; messages still buffered then are not sent.

// groupStreamBuffer is how many messages may wait for a slow SSE reader;
// beyond it messages are dropped and counted (lmos_sse_group_dropped_total).
const groupStreamBuffer = 64

func (s *Server) groupChannel(w http.ResponseWriter, r *http.Request) {
	gid := r.PathValue("gid")
	filter := r.URL.Query().Get("topic")
	if filter == "" {
		filter = "#"
	}
	bus := s.cfg.Groups
	err := hub.ValidateGroupID(gid)
	if err == nil {
		err = hub.ValidGroupFilter(filter)
	}
	if err == nil && bus == nil {
		err = hub.Errorf(hub.EUNAVAILABLE, "group channels need the mqtt broker, which is not running")
	}
	var p hub.Principal
	var member string
	if err == nil {
		if p, err = s.principalOf(r); err == nil {
			member, err = s.access().ChannelMember(p, gid, s.reg.IsMember)
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	msgs := make(chan hub.GroupMessage, groupStreamBuffer)
	var ended atomic.Bool
	done := make(chan struct{})
	var once sync.Once
	dropped := s.metrics.GetOrCreateCounter("lmos_sse_group_dropped_total")
	cancel, err := bus.SubscribeGroup(hub.GroupSubscription{
		Group: gid, Filter: filter, Member: member,
		Deliver: func(m hub.GroupMessage) {
			select {
			case msgs <- m:
			default:
				dropped.Inc()
			}
		},
		Ended: func() { // in the registry's write loop: no waiting
			ended.Store(true)
			once.Do(func() { close(done) })
		},
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer cancel()
	e := s.startSSE(w, r)
	if !e.send() {
		return
	}
	beat := time.NewTicker(s.cfg.SSEHeartbeat)
	defer beat.Stop()
	prefix := len(lmos.GroupsPrefix) + len(gid) + 1
	// end writes why the stream ends; a refused delivery (a token no
	// longer valid) is counted, a membership that ended is no refusal.
	end := func(err error, refused bool) {
		if refused {
			s.countRefusal("http", err)
		}
		streamError(r, e, err)
		e.send()
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-beat.C:
			e.buf.WriteString(sseKeepAlive)
		case <-done:
			end(hub.Errorf(hub.EFORBIDDEN, "%q is no longer a member of group %q", member, gid), false)
			return
		case m := <-msgs:
			if ended.Load() {
				end(hub.Errorf(hub.EFORBIDDEN, "%q is no longer a member of group %q", member, gid), false)
				return
			}
			// A token revoked or expired since ends the stream too.
			if _, err := s.access().ChannelMember(p, gid, s.reg.IsMember); err != nil {
				end(err, true)
				return
			}
			data, ct := m.Value(s.reg.Decoder(), lmos.MediaJSON)
			out := struct {
				Topic       string          `json:"topic"`
				Data        json.RawMessage `json:"data,omitempty"`
				ContentType string          `json:"contentType,omitempty"`
			}{m.Topic[prefix:], data, ct}
			b, _ := json.Marshal(out)
			e.event("message", b)
		}
		if !e.send() {
			return
		}
	}
}
