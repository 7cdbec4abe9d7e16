package mqtt

import (
	"encoding/json"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// hubEvent is one message on lmos/v1/hub/events: the /api/events object
// without the document diffs.
type hubEvent struct {
	Type     hub.EventType `json:"type"`
	ID       string        `json:"id"`
	Seq      uint64        `json:"seq"`
	Time     time.Time     `json:"time"`
	Presence *hub.Presence `json:"presence,omitempty"`
}

// forwardEvents publishes the registry's change feed on lmos/v1/hub/events
// (QoS 0) until the broker stops. A subscription dropped for falling behind
// is renewed at once: the topic is best effort, like QoS 0 itself.
func (b *Broker) forwardEvents() {
	for {
		sub, _, err := b.reg.Subscribe(0, false)
		if err != nil {
			b.log.Debug("stopping hub events", "err", err)
			return
		}
		if !b.forwardFrom(sub) {
			sub.Cancel()
			return
		}
		if !sub.Dropped() {
			return // the registry closed
		}
		b.log.Warn("hub events fell behind; resubscribing")
	}
}

// forwardFrom forwards sub's events until it ends (true) or the broker
// stops (false).
func (b *Broker) forwardFrom(sub *hub.Subscription) bool {
	for {
		select {
		case <-b.stop:
			return false
		case e, ok := <-sub.C:
			if !ok {
				return true
			}
			payload, err := json.Marshal(hubEvent{Type: e.Type, ID: e.ID, Seq: e.Seq, Time: e.Time, Presence: e.Presence})
			if err != nil {
				b.log.Error("cannot encode hub event", "err", err)
				continue
			}
			if err := b.publish(TopicHubEvents, payload, false, 0, "application/json"); err != nil {
				b.log.Warn("cannot publish hub event", "err", err)
			}
			if e.Type == hub.EventDeleted {
				b.forgetDeleted(e.ID)
			}
		}
	}
}

// forgetDeleted clears the retained description of a Thing deleted by any
// means (HTTP, expiry), on its worker so it orders after a join in progress,
// and only if the Thing has not been registered again meanwhile.
func (b *Broker) forgetDeleted(id string) {
	tid := hub.TopicKey(id)
	b.enqueue(tid, func() {
		if _, err := b.reg.Get(id); hub.ErrorCode(err) == hub.ENOTFOUND {
			b.forget(tid)
		}
	})
}
