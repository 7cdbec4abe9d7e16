package mqtt

import (
	"encoding/json"
	"sync"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// forwardEvents publishes the registry's change feed on lmos/v1/hub/events
// (QoS 0) until the broker stops, starting with sub. A subscription dropped
// for falling behind is renewed at once: the topic is best effort, like QoS
// 0 itself.
func (b *Broker) forwardEvents(sub *hub.Subscription) {
	for {
		if !b.forwardFrom(sub) {
			sub.Cancel()
			return
		}
		if !sub.Dropped() {
			return // the registry closed
		}
		b.log.Warn("hub events fell behind; resubscribing")
		var err error
		if sub, _, err = b.reg.Subscribe(0, false); err != nil {
			b.log.Debug("stopping hub events", "err", err)
			return
		}
	}
}

// resetPresence sets Things whose presence is online via MQTT offline: it
// runs before the broker accepts clients, so none of them is connected.
// The writes run concurrently so that the registry commits them together.
// It returns the ids it reset.
func (b *Broker) resetPresence() []string {
	var reset []string
	var mu sync.Mutex
	things, _ := b.reg.List(0, 0)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, t := range things {
		p := t.Meta.Presence
		if p.Status != hub.PresenceOnline || p.Via != hub.SourceMQTT {
			continue
		}
		id := t.ID
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := b.reg.SetPresence(b.ctx, id, hub.PresenceOffline, hub.SourceMQTT)
			if err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
				b.log.Warn("cannot reset presence", "id", id, "err", err)
				return
			}
			mu.Lock()
			reset = append(reset, id)
			mu.Unlock()
		})
	}
	wg.Wait()
	return reset
}

// retainOffline replaces the retained status of Things whose presence was
// reset: their last "online" survived the restart in the retained store,
// and MQTT consumers read presence there.
func (b *Broker) retainOffline(ids []string) {
	for _, id := range ids {
		topic := lmos.ThingTopic(id, "status")
		if err := b.publish(topic, []byte(hub.PresenceOffline), true, 1, ""); err != nil {
			b.log.Warn("cannot publish offline status", "id", id, "err", err)
		}
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
			payload, err := json.Marshal(e.Feed())
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

// forgetDeleted tells live subscribers of …/td that a Thing was deleted by
// any means (HTTP, expiry), on its worker so it orders after a join in
// progress, and only if the Thing has not been registered again meanwhile.
func (b *Broker) forgetDeleted(id string) {
	tid := lmos.TopicKey(id)
	b.enqueue(tid, func() {
		if _, err := b.reg.Get(id); hub.ErrorCode(err) == hub.ENOTFOUND {
			b.forget(tid)
		}
	})
}
