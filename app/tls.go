package app

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/internal/tlscert"
	"github.com/eclipse-lmos/lmos-hub/mdns"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// openTLS loads the hub's certificate when tls.enabled: the user's files,
// or the self-signed pair in the data directory, generated on first start.
// It logs the fingerprint (what agents and people pin) and watches the
// files for a new certificate.
func (m *Main) openTLS(context.Context) error {
	cfg := m.Config
	if !cfg.TLS.Enabled {
		return nil
	}
	certFile, keyFile := cfg.TLS.Cert, cfg.TLS.Key
	if certFile == "" {
		var generated bool
		var err error
		certFile, keyFile, generated, err = tlscert.Ensure(cfg.DataDir, m.certNames(), time.Now())
		if err != nil {
			return fmt.Errorf("cannot make the self-signed tls certificate: %w", err)
		}
		if generated {
			m.Logger.Info("generated a self-signed tls certificate", "cert", certFile, "key", keyFile)
		}
	}
	c, err := tlscert.Load(certFile, keyFile, m.Logger.With("component", "tls"))
	if err != nil {
		return err
	}
	m.TLS = c
	leaf := c.Leaf()
	m.Logger.Info("tls certificate", "fingerprint", c.Fingerprint(), "cert", certFile,
		"dns_names", leaf.DNSNames, "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	if time.Now().After(leaf.NotAfter) {
		m.Logger.Warn("the tls certificate has expired; clients that check dates refuse it (pinned agents do not)",
			"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Watch(ctx, time.Duration(cfg.TLS.ReloadInterval))
	}()
	m.onClose("tls", func(context.Context) error {
		cancel()
		<-done
		return nil
	})
	return nil
}

// certNames are the names a generated certificate is made for: the host's
// (tlscert.HostNames) and the .local name the hub advertises over mDNS.
func (m *Main) certNames() tlscert.Names {
	extra := []string{dnssd.HostLabel(m.mdnsHost()) + ".local"}
	if name := m.Config.Hub.Name; dnssd.HostLabel(name) == name {
		extra = append(extra, name+".local") // a hub name that is a host name
	}
	return tlscert.HostNames(extra...)
}

// metrics are the writers /metrics adds to the HTTP adapter's own.
func (m *Main) metrics() []func(io.Writer) {
	out := []func(io.Writer){m.Broker.WritePrometheus}
	if m.Groups != nil {
		out = append(out, m.Groups.WritePrometheus)
	}
	if m.TLS != nil {
		out = append(out, m.TLS.WritePrometheus)
	}
	if m.MCP != nil {
		out = append(out, m.MCP.WritePrometheus)
	}
	// mDNS opens after the HTTP adapter, or not at all.
	out = append(out, func(w io.Writer) { mdns.WritePrometheus(w, m.names.mdns.Load()) })
	return out
}

// tlsInfo is what the directory TD and /api/status say of TLS.
func (m *Main) tlsInfo() *web.TLSInfo {
	if m.TLS == nil {
		return nil
	}
	return &web.TLSInfo{HTTPSPort: portOf(m.HTTPSAddr), MQTTSPort: portOf(m.MQTTSAddr), Only: m.Config.TLS.Only,
		Fingerprint: m.TLS.Fingerprint, NotAfter: m.TLS.NotAfter}
}
