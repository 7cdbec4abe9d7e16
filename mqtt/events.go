package mqtt

import (
	"bytes"
	"encoding/json"
	"sync"
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
// (QoS 0) until the broker stops, starting with sub. A subscription dropped
// for falling behind is renewed at once: the topic is best effort, like QoS
// 0 itself; the retained descriptions are reconciled again, since
// deletions may have been missed.
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
		b.clearOrphanTDs()
	}
}

// clearOrphanTDs clears the retained descriptions of Things that are not
// registered (each checked again on its worker, see forgetDeleted).
func (b *Broker) clearOrphanTDs() {
	for _, m := range b.server.Topics.Messages(thingsPrefix + "+/td") {
		t, ok := parseThingTopic(m.TopicName)
		if !ok || t.kind != kindTD {
			continue
		}
		id, ok := idOf(t.tid)
		if !ok {
			b.forget(t.tid) // the hub retains canonical keys only
			continue
		}
		if _, err := b.reg.Get(id); hub.ErrorCode(err) == hub.ENOTFOUND {
			b.forgetDeleted(id)
		}
	}
}

// rebuildTDs retains again, from the registry, the description of every
// Thing joined over MQTT (it holds a credential: the Things whose accepted
// description a join retains) whose retained copy is missing or differs.
// The registry commits a join before the hub retains its description, and
// the broker's state is written behind (PROTOCOL §10), so a crash can lose
// the retained copy of a Thing that stays registered. Each runs on the
// Thing's worker, ordered with joins; it returns when all have run, so
// the hub announces itself online with every description retained.
func (b *Broker) rebuildTDs() {
	things, _ := b.reg.List(0, 0)
	var wg sync.WaitGroup
	for _, th := range things {
		id := th.ID
		wg.Add(1)
		b.enqueue(hub.TopicKey(id), func() {
			defer wg.Done()
			b.rebuildTD(id)
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-b.stop: // enqueue drops work once the broker stops
	}
}

func (b *Broker) rebuildTD(id string) {
	if ok, err := b.hasCredential(id); !ok {
		if err != nil {
			b.log.Warn("cannot read mqtt credential", "id", id, "err", err)
		}
		return
	}
	raw, err := b.reg.Raw(id)
	if err != nil {
		if hub.ErrorCode(err) != hub.ENOTFOUND {
			b.log.Warn("cannot read description to retain", "id", id, "err", err)
		}
		return
	}
	topic := thingsPrefix + hub.TopicKey(id) + "/td"
	if m, ok := b.server.Topics.Retained.Get(topic); ok && bytes.Equal(m.Payload, raw) {
		return
	}
	if err := b.publish(topic, raw, true, 1, "application/td+json"); err != nil {
		b.log.Warn("cannot retain description", "id", id, "err", err)
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
		topic := thingsPrefix + hub.TopicKey(id) + "/status"
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
