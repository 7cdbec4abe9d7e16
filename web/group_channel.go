package web

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
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
	p, member, err := s.groupChannelMember(r, bus, gid, filter)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	f := &groupFeed{
		msgs:    make(chan hub.GroupMessage, groupStreamBuffer),
		done:    make(chan struct{}),
		dropped: s.metrics.GetOrCreateCounter("lmos_sse_group_dropped_total"),
	}
	cancel, err := bus.SubscribeGroup(hub.GroupSubscription{
		Group: gid, Filter: filter, Member: member, Deliver: f.deliver, Ended: f.end,
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
	s.streamGroup(r, e, f, p, gid, member)
}

// groupChannelMember checks a channel request before anything is held:
// the group and filter well formed, the bus running, and the caller a
// member (its principal is kept to recheck a token on each message).
func (s *Server) groupChannelMember(r *http.Request, bus hub.GroupChannels, gid, filter string) (hub.Principal, string, error) {
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
	return p, member, err
}

// groupFeed carries a subscription's messages from the publisher to the
// SSE loop, and the end of the membership from the registry's write loop;
// neither of them waits on the reader.
type groupFeed struct {
	msgs    chan hub.GroupMessage
	ended   atomic.Bool
	done    chan struct{}
	once    sync.Once
	dropped *metrics.Counter
}

// deliver queues m, or drops and counts it when the reader is behind by
// groupStreamBuffer messages.
func (f *groupFeed) deliver(m hub.GroupMessage) {
	select {
	case f.msgs <- m:
	default:
		f.dropped.Inc()
	}
}

// end is called in the registry's write loop: no waiting.
func (f *groupFeed) end() {
	f.ended.Store(true)
	f.once.Do(func() { close(f.done) })
}

// streamGroup writes f's messages as SSE events until the client leaves,
// the hub closes, the membership ends, or p's token no longer holds.
func (s *Server) streamGroup(r *http.Request, e *sse, f *groupFeed, p hub.Principal, gid, member string) {
	beat := time.NewTicker(s.cfg.SSEHeartbeat)
	defer beat.Stop()
	prefix := len(lmos.GroupsPrefix) + len(gid) + 1
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-beat.C:
			e.buf.WriteString(sseKeepAlive)
		case <-f.done:
			s.endGroupStream(r, e, hub.Errorf(hub.EFORBIDDEN, "%q is no longer a member of group %q", member, gid), false)
			return
		case m := <-f.msgs:
			if f.ended.Load() {
				s.endGroupStream(r, e, hub.Errorf(hub.EFORBIDDEN, "%q is no longer a member of group %q", member, gid), false)
				return
			}
			// A token revoked or expired since ends the stream too.
			if _, err := s.access().ChannelMember(p, gid, s.reg.IsMember); err != nil {
				s.endGroupStream(r, e, err, true)
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

// endGroupStream writes why the stream ends; a refused delivery (a token
// no longer valid) is counted, a membership that ended is no refusal.
func (s *Server) endGroupStream(r *http.Request, e *sse, err error, refused bool) {
	if refused {
		s.countRefusal("http", err)
	}
	streamError(r, e, err)
	e.send()
}
