package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/hubtest"
	"github.com/eclipse-lmos/lmos-hub/internal/transporttest"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The Router, as Main wires it, is the Transport consumers use: it passes
// the same behaviour suite as the transports behind it, whichever of them
// reaches the agent.
func TestRouterIsATransport(t *testing.T) {
	offline := func(h *hubtest.Hub, id string) func() bool {
		return func() bool {
			th, err := h.Main.Registry.Get(id)
			return err == nil && th.Meta.Presence.Status == hub.PresenceOffline
		}
	}
	env := func(h *hubtest.Hub, id string, a transporttest.Agent) transporttest.Env {
		return transporttest.Env{
			Transport: h.Main.Router,
			Registry:  h.Main.Registry,
			ThingID:   id,
			Agent:     a,
			Idle: func() (bool, string) {
				inv, streams := h.Main.Broker.Interactions()
				return inv == 0 && streams == 0, fmt.Sprintf("broker: %d invocations, %d streams", inv, streams)
			},
		}
	}
	t.Run("MQTTAgent", func(t *testing.T) {
		transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
			h := hubtest.Start(t, nil)
			id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000c1"
			// A clean DISCONNECT leaves presence as the agent last set it:
			// the agent is gone once its subscriptions are.
			actions := lmos.ThingsPrefix + lmos.TopicKey(id) + "/actions/" + transporttest.ActionCount
			return env(h, id, transporttest.StartMQTTAgent(t, h.Main.MQTTAddr.String(), id, func() bool {
				return h.Main.Broker.Subscribers(actions) == 0
			}))
		})
	})
	t.Run("WebSocketAgent", func(t *testing.T) {
		transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
			h := hubtest.Start(t, nil)
			id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000c2"
			return env(h, id, transporttest.StartWSAgent(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws", id, offline(h, id)))
		})
	})
}
