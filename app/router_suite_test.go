package app_test

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/transporttest"
)

// The Router, as Main wires it, is the Transport consumers use: it passes
// the same behaviour suite as the transports behind it, whichever of them
// reaches the agent; Idle counts what both transports hold.
func TestRouterIsATransport(t *testing.T) {
	for _, c := range []struct {
		name  string
		agent func(t *testing.T, h *hubtest.Hub, id string) transporttest.Agent
	}{
		{"MQTTAgent", func(t *testing.T, h *hubtest.Hub, id string) transporttest.Agent {
			// A clean DISCONNECT leaves presence as the agent last set
			// it: the agent is gone once its subscriptions are.
			actions := lmos.ThingsPrefix + lmos.TopicKey(id) + "/actions/" + transporttest.ActionCount
			return transporttest.StartMQTTAgent(t, h.Main.MQTTAddr.String(), id, func() bool {
				return h.Main.Broker.Subscribers(actions) == 0
			})
		}},
		{"WebSocketAgent", func(t *testing.T, h *hubtest.Hub, id string) transporttest.Agent {
			return transporttest.StartWSAgent(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws", id, transporttest.Offline(h.Main.Registry, id))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
				h := hubtest.Start(t, nil)
				id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000c1"
				return transporttest.Env{Transport: h.Main.Router, Registry: h.Main.Registry, ThingID: id,
					Agent: c.agent(t, h, id), Idle: transporttest.IdleOf(h.Main.Web.WSTransport().Interactions, h.Main.Broker.Interactions)}
			})
		})
	}
}
