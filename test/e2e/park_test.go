package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/testwait"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// TestMQTTJSParked: mqtt.js 5 as agent and consumer, both parked by the
// hub (mqtt.idlePark 20 ms, gauge lmos_mqtt_parked_clients) before every
// exchange: each invocation gets its partial and final results, each
// event arrives, and neither client reports a protocol error or loses its
// connection.
func TestMQTTJSParked(t *testing.T) {
	h := startHub(t, func(c *Config) { c.MQTT.IdlePark = Duration(20 * time.Millisecond) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "mqtt://" + h.Main.MQTTAddr.String()
	const jsID = "urn:example:js-parked"
	agent := startScript(t, ctx, "mqtt.js agent", "mqttjs-agent.mjs", url, jsID, "5", "1")
	consumer := startScript(t, ctx, "mqtt.js consumer", "mqttjs-consumer.mjs", url)
	bothParked := func(what string) {
		t.Helper()
		testwait.Eventually(t, 5*time.Second, "agent and consumer parked before "+what, func() bool {
			return h.refusals("lmos_mqtt_parked_clients") == 2
		})
	}
	for i := range 5 {
		bothParked(fmt.Sprint("invocation ", i))
		tt := tags(fmt.Sprint("p", i), 1)
		consumer.do(10*time.Second, map[string]any{"cmd": "batch", "thing": jsID, "action": "count", "tags": tt, "n": 2, "inflight": 1, "qos": 1})
		checkResults(t, consumer, tt, 2, jsID, true)
	}
	tick := "lmos/v1/things/" + lmos.TopicKey(jsID) + "/events/tick"
	consumer.do(5*time.Second, map[string]any{"cmd": "sub", "topic": tick, "qos": 1})
	for i := range 5 {
		bothParked(fmt.Sprint("event ", i))
		agent.do(10*time.Second, map[string]any{"cmd": "emit", "from": i, "n": 1})
		checkTicks(t, consumer, tick, i, 1)
	}
	agent.exit()
	consumer.exit()
}
