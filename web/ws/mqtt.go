package ws

import (
	"context"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// ServeMQTT is GET /mqtt: MQTT over WebSocket (subprotocol mqtt) into the
// same broker, with its authentication and ACL, after the Origin check
// (mochi's own WebSocket listener accepts any Origin).
//
// The HTTP adapter answers /mqtt itself while no broker runs (Conns nil).
func (t *Transport) ServeMQTT(w http.ResponseWriter, r *http.Request) {
	c, err := t.accept(w, r, []string{"mqtt"})
	if err != nil {
		t.log.Debug("mqtt websocket refused", "remote", r.RemoteAddr, "err", err)
		return
	}
	if c.Subprotocol() != "mqtt" {
		_ = c.Close(websocket.StatusPolicyViolation, "the subprotocol must be mqtt")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc := websocket.NetConn(ctx, c, websocket.MessageBinary)
	// The MQTT CONNECT must come within the handshake timeout; the broker
	// then sets the deadlines of the client's keep-alive.
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	// The broker closes these connections when it stops (after HTTP).
	if err := t.conns.ServeConn(nc); err != nil {
		t.log.Debug("mqtt websocket connection ended", "remote", r.RemoteAddr, "err", err)
	}
}
