package ws_test

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/transporttest"
)

// The WebSocket gateway passes the behaviour suite every hub.Transport
// passes, with an agent speaking the LMOS envelope over a coder/websocket
// connection on the other side. The gateway carries its agents' streams
// through the broker, so the hub runs whole, as main runs it, and Idle
// counts both the gateway's own pending requests and the broker's streams.
func TestWebSocketGatewayIsATransport(t *testing.T) {
	transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
		h := hubtest.Start(t, nil)
		id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000b1"
		wsURL := "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"
		a := transporttest.StartWSAgent(t, wsURL, id, transporttest.Offline(h.Main.Registry, id))
		gw := h.Main.Web.WSTransport()
		return transporttest.Env{Transport: gw, Registry: h.Main.Registry, ThingID: id, Agent: a,
			Idle: transporttest.IdleOf(gw.Interactions, h.Main.Broker.Interactions)}
	})
}
