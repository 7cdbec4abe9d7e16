package mcpcli

import (
	"context"
	"net"
	"time"
)

// netDialer bounds connecting to the hub (--timeout), not the requests: a
// tool call or a notification stream lasts as long as it lasts.
type netDialer struct{ timeout time.Duration }

func (d *netDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return (&net.Dialer{Timeout: d.timeout}).DialContext(ctx, network, addr)
}
