package web_test

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/internal/hubtest"
	"github.com/eclipse-lmos/lmos-hub/internal/transporttest"
)

// The WebSocket gateway passes the behaviour suite every hub.Transport
// passes, with an agent speaking the LMOS envelope over a coder/websocket
// connection on the other side. The gateway carries its agents' streams
// through the broker, so the hub runs whole, as main runs it; the
// gateway's own pending requests are not visible from outside, so Idle
// sees the broker's streams only.
func TestWebSocketGatewayIsATransport(t *testing.T) {
	transporttest.RunTransportTests(t, func(t *testing.T) transporttest.Env {
		h := hubtest.Start(t, nil)
		id := "urn:uuid:7d1c0e52-0000-4000-8000-0000000000b1"
		wsURL := "ws" + strings.TrimPrefix(h.URL, "http") + "/ws"
		a := transporttest.StartWSAgent(t, wsURL, id, transporttest.Offline(h.Main.Registry, id))
		return transporttest.Env{Transport: h.Main.Web.WSTransport(), Registry: h.Main.Registry, ThingID: id, Agent: a,
			Idle: transporttest.IdleOf(h.Main.Broker.Interactions)}
	})
}
