package mqtt

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// refusals counts requests the broker refused (joins, connections), by
// reason: the limit that refused them or the problem code.
type refusals struct {
	mu sync.Mutex
	n  map[string]uint64
}

// countRefusal counts one refusal for err (hub.RefusalReason).
func (b *Broker) countRefusal(err error) { b.countRefusalReason(hub.RefusalReason(err)) }

// countRefusalReason counts one refusal for reason.
func (b *Broker) countRefusalReason(reason string) {
	b.refused.mu.Lock()
	defer b.refused.mu.Unlock()
	if b.refused.n == nil {
		b.refused.n = make(map[string]uint64)
	}
	b.refused.n[reason]++
}

// logRefusal logs a SUBSCRIBE or PUBLISH the access rules refused, at most
// one line per client and hub.RefusalLogPeriod: the next line says how
// many were held back.
func (b *Broker) logRefusal(client, topic string, write bool, reason string) {
	ok, held := b.refusedLog.Allow(client)
	if !ok {
		return
	}
	op := "subscribe"
	if write {
		op = "publish"
	}
	attrs := []any{"client", client, "op", op, "topic", topic, "reason", reason}
	if held > 0 {
		attrs = append(attrs, "suppressed", held)
	}
	b.log.Info("mqtt access refused", attrs...)
}

// Refused returns how many requests were refused for reason.
func (b *Broker) Refused(reason string) uint64 {
	b.refused.mu.Lock()
	defer b.refused.mu.Unlock()
	return b.refused.n[reason]
}

// Why a message owed to a subscriber was not delivered (PROTOCOL §10, "MQTT
// delivery"). Only QoS 0 messages are dropped for lack of room; a QoS 1/2
// message is lost only with its subscriber's session (an offline session
// that is full, or a client cut off for being too slow whose session ends).
type dropReason int

const (
	dropQueueFull   dropReason = iota // a QoS 0 message did not fit the client's queue
	dropSlowClient                    // the message that found the client too slow; it was disconnected
	dropTooLarge                      // larger than the client's Maximum Packet Size [MQTT-3.1.2-25]
	dropACL                           // the client may not read the topic
	dropSessionFull                   // a QoS 1/2 message for an offline session already holding maxInflight
	dropRevoked                       // a group message to a Thing that left the group before it was written (groups.go)
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{"queue_full", "slow_client", "packet_too_large", "acl", "session_full", "revoked"}

// drops counts dropped deliveries by reason.
type drops [numDropReasons]atomic.Uint64

// Dropped returns how many deliveries were dropped for reason, one of
// queue_full, slow_client, packet_too_large, acl, session_full, revoked.
func (b *Broker) Dropped(reason string) uint64 {
	for i, n := range dropReasonNames {
		if n == reason {
			return b.dropped[i].Load()
		}
	}
	return 0
}

// SlowDisconnects returns how many clients were disconnected for not
// reading or acknowledging for the slow-client timeout.
func (b *Broker) SlowDisconnects() uint64 { return b.slowCuts.Load() }

// WritePrometheus writes the broker's delivery figures in the Prometheus
// text format, for the hub's /metrics.
func (b *Broker) WritePrometheus(w io.Writer) {
	fmt.Fprintf(w, "# HELP lmos_mqtt_messages_total Publishes the broker routed (from MQTT clients, the WebSocket gateway and the hub).\n# TYPE lmos_mqtt_messages_total counter\nlmos_mqtt_messages_total %d\n", b.messages.Load())
	fmt.Fprintf(w, "# HELP lmos_mqtt_deliveries_total Copies of publishes queued or stored for subscribers, before any drop.\n# TYPE lmos_mqtt_deliveries_total counter\nlmos_mqtt_deliveries_total %d\n", b.deliveries.Load())
	fmt.Fprintf(w, "# HELP lmos_mqtt_dropped_total MQTT deliveries not made, by reason.\n# TYPE lmos_mqtt_dropped_total counter\n")
	for i, n := range dropReasonNames {
		fmt.Fprintf(w, "lmos_mqtt_dropped_total{reason=%q} %d\n", n, b.dropped[i].Load())
	}
	fmt.Fprintf(w, "# HELP lmos_mqtt_slow_disconnects_total MQTT clients disconnected for not reading or acknowledging in time.\n# TYPE lmos_mqtt_slow_disconnects_total counter\nlmos_mqtt_slow_disconnects_total %d\n", b.slowCuts.Load())
	fmt.Fprintf(w, "# HELP lmos_mqtt_reuse_timeouts_total MQTT connections that went ahead although an earlier connection with their client id had not ended in time.\n# TYPE lmos_mqtt_reuse_timeouts_total counter\nlmos_mqtt_reuse_timeouts_total %d\n", b.reuseTimeouts.Load())
	b.refused.mu.Lock()
	reasons := make([]string, 0, len(b.refused.n))
	for r := range b.refused.n {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	fmt.Fprintf(w, "# HELP lmos_mqtt_refused_total MQTT requests the hub refused, by reason (the limit's setting or the problem code).\n# TYPE lmos_mqtt_refused_total counter\n")
	for _, r := range reasons {
		fmt.Fprintf(w, "lmos_mqtt_refused_total{reason=%q} %d\n", r, b.refused.n[r])
	}
	b.refused.mu.Unlock()
	b.writeCredentialMetrics(w)
	fmt.Fprintf(w, "# HELP lmos_mqtt_clients Connected MQTT clients.\n# TYPE lmos_mqtt_clients gauge\nlmos_mqtt_clients %d\n", b.Clients())
	fmt.Fprintf(w, "# HELP lmos_mqtt_inflight QoS 1/2 messages stored in sessions, not yet acknowledged.\n# TYPE lmos_mqtt_inflight gauge\nlmos_mqtt_inflight %d\n", b.inflight())
	fmt.Fprintf(w, "# HELP lmos_mqtt_delayed_wills Wills waiting for their Will Delay Interval (at most one per session).\n# TYPE lmos_mqtt_delayed_wills gauge\nlmos_mqtt_delayed_wills %d\n", b.wills.len(time.Now().Unix()))
}

// inflight is the number of QoS 1/2 messages stored in sessions.
func (b *Broker) inflight() int {
	n := 0
	for _, cl := range b.server.Clients.GetAll() {
		n += cl.State.Inflight.Len()
	}
	return n
}
