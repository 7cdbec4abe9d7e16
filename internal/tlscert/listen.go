package tlscert

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"sort"
	"sync"
)

// Listener serves TLS on ln for door (a name in the metrics, e.g.
// "mqtts"): each accepted connection's handshake runs on its first read,
// under the deadline the server sets for its first packet, so a client
// that never finishes it holds nothing but its own goroutine; a failed
// handshake is counted, not logged (any client on the LAN can fail one).
func (c *Cert) Listener(ln net.Listener, door string) net.Listener {
	return &listener{Listener: ln, cfg: c.ServerConfig(), cert: c, door: door}
}

type listener struct {
	net.Listener
	cfg  *tls.Config
	cert *Cert
	door string
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: tls.Server(c, l.cfg), cert: l.cert, door: l.door}, nil
}

// conn is a server TLS connection whose failed handshake is counted once.
type conn struct {
	*tls.Conn
	cert *Cert
	door string
	once sync.Once
}

func (c *conn) handshake() error {
	err := c.Conn.HandshakeContext(context.Background())
	if err != nil {
		c.once.Do(func() { c.cert.countFailure(c.door) })
	}
	return err
}

func (c *conn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *conn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// HTTPErrorLog is the http.Server error log for door: net/http reports a
// failed handshake only as a "TLS handshake error" line, which any client
// that does not trust the certificate causes; those are counted and logged
// at debug, the rest go to log at warn.
func (c *Cert) HTTPErrorLog(door string, l *slog.Logger) *log.Logger {
	return log.New(&errorLog{cert: c, door: door, log: l}, "", 0)
}

type errorLog struct {
	cert *Cert
	door string
	log  *slog.Logger
}

func (e *errorLog) Write(p []byte) (int, error) {
	msg := string(bytes.TrimSpace(p))
	if bytes.HasPrefix(p, []byte("http: TLS handshake error")) {
		e.cert.countFailure(e.door)
		e.log.Debug(msg)
		return len(p), nil
	}
	e.log.Warn(msg)
	return len(p), nil
}

// WritePrometheus writes the certificate's metrics: handshakes failed per
// door, reloads, and the expiry time.
func (c *Cert) WritePrometheus(w io.Writer) {
	var doors []string
	c.failures.Range(func(k, _ any) bool { doors = append(doors, k.(string)); return true })
	sort.Strings(doors)
	fmt.Fprintf(w, "# HELP lmos_tls_handshake_failures_total TLS handshakes that failed, by door (https, mqtts).\n# TYPE lmos_tls_handshake_failures_total counter\n")
	for _, d := range doors {
		fmt.Fprintf(w, "lmos_tls_handshake_failures_total{door=%q} %d\n", d, c.HandshakeFailures(d))
	}
	fmt.Fprintf(w, "# HELP lmos_tls_cert_reloads_total Times the TLS certificate was loaded again after its files changed.\n# TYPE lmos_tls_cert_reloads_total counter\nlmos_tls_cert_reloads_total %d\n", c.Reloads())
	fmt.Fprintf(w, "# HELP lmos_tls_cert_not_after_seconds Expiry time of the TLS certificate, in seconds since the Unix epoch.\n# TYPE lmos_tls_cert_not_after_seconds gauge\nlmos_tls_cert_not_after_seconds %d\n", c.NotAfter().Unix())
}
