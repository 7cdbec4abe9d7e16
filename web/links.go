package web

import (
	"fmt"
	"io"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// links reports the hub's links (Config.Links); empty, not nil, when
// there are none, so that the status always has the member.
func (s *Server) links() []hub.LinkState {
	var links []hub.LinkState
	if s.cfg.Links != nil {
		links = s.cfg.Links()
	}
	if links == nil {
		links = []hub.LinkState{}
	}
	return links
}

// writeLinkMetrics writes one series per link and figure, labelled by the
// link's kind and name (docs/METRICS.md "Links").
func writeLinkMetrics(w io.Writer, links []hub.LinkState) {
	families := []struct {
		name, typ, help string
		value           func(hub.LinkState) float64
	}{
		{"lmos_link_up", "gauge", "1 when the link's last exchange with the other side succeeded (state connected), else 0.",
			func(l hub.LinkState) float64 { return b2f(l.State == hub.LinkConnected) }},
		{"lmos_link_outbox", "gauge", "Changes or messages waiting to be sent over the link.",
			func(l hub.LinkState) float64 { return float64(l.Outbox) }},
		{"lmos_link_lag_seconds", "gauge", "Age of the oldest change not yet applied on the other side of the link.",
			func(l hub.LinkState) float64 { return l.Lag.Seconds() }},
		{"lmos_link_things", "gauge", "Things the link carries: pushed to a remote directory, or mirrored here.",
			func(l hub.LinkState) float64 { return float64(l.Things) }},
		{"lmos_link_sent_total", "counter", "Changes or messages sent over the link.",
			func(l hub.LinkState) float64 { return float64(l.Sent) }},
		{"lmos_link_received_total", "counter", "Changes or messages received over the link.",
			func(l hub.LinkState) float64 { return float64(l.Received) }},
		{"lmos_link_errors_total", "counter", "Failed attempts of the link (the last one's text is in /api/status).",
			func(l hub.LinkState) float64 { return float64(l.Errors) }},
		{"lmos_link_last_success_timestamp_seconds", "gauge", "Unix time of the link's last successful exchange (0: none yet).",
			func(l hub.LinkState) float64 {
				if l.LastSuccess.IsZero() {
					return 0
				}
				return float64(l.LastSuccess.UnixMilli()) / 1000
			}},
	}
	for _, f := range families {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.typ)
		for _, l := range links {
			fmt.Fprintf(w, "%s{kind=\"%s\",name=\"%s\"} %g\n", f.name, labelValue.Replace(l.Kind), labelValue.Replace(l.Name), f.value(l))
		}
	}
}

// labelValue escapes a label value as the Prometheus text format asks.
var labelValue = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
