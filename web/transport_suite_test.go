package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/hubtest"
	"github.com/eclipse-lmos/lmos-hub/internal/transporttest"
)

// The WebSocket gateway passes the behaviour suite every hub.Transport
// passes, with an agent speaking the LMOS envelope over a coder/websocket
// connection on the other side. The gateway carries its agents' streams
// through the broker, so the hub runs whole, as main runs it.
func TestWebSocketGatewayIsATransport(t *testing.T) {
	transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
		h := hubtest.Start(t, nil)
		id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000b1"
		a := transporttest.StartWSAgent(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws", id, func() bool {
			th, err := h.Main.Registry.Get(id)
			return err == nil && th.Meta.Presence.Status == hub.PresenceOffline
		})
		return transporttest.Env{
			Transport: h.Main.Web.WSTransport(),
			Registry:  h.Main.Registry,
			ThingID:   id,
			Agent:     a,
			// The gateway's own requests are not visible from outside;
			// its streams are the broker's.
			Idle: func() (bool, string) {
				inv, streams := h.Main.Broker.Interactions()
				return inv == 0 && streams == 0, fmt.Sprintf("broker: %d invocations, %d streams", inv, streams)
			},
		}
	})
}
