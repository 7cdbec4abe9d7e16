package web_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// The hub's links (sync, pull, bridge, peers) show in /api/status, each
// with its state, outbox, lag and last error, and as /metrics series
// labelled by kind and name; with none, links is an empty list.
func TestStatusAndMetricsShowLinks(t *testing.T) {
	ok := time.Date(2026, 11, 29, 1, 2, 3, 0, time.UTC)
	var links []hub.LinkState
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) {
		c.Links = func() []hub.LinkState { return links }
	})
	var st struct {
		Links []map[string]any
	}
	d.do("GET", "/api/status", "", "").want(t, "status without links", http.StatusOK).json(t, &st)
	if st.Links == nil || len(st.Links) != 0 {
		t.Fatalf("links without any: %#v, want []", st.Links)
	}
	links = []hub.LinkState{
		{Kind: hub.LinkSync, Name: "http://dir.example:8081", URL: "http://dir.example:8081", State: hub.LinkDown, Outbox: 12,
			Lag: 90 * time.Second, Sent: 5, Errors: 3, LastError: `PUT /things/x: 503 "busy"`, LastSuccess: ok},
		{Kind: hub.LinkBridge, Name: "upstream", URL: "mqtt://broker:1883", State: hub.LinkConnected, Sent: 7, Received: 9},
	}
	d.do("GET", "/api/status", "", "").want(t, "status with links", http.StatusOK).json(t, &st)
	if len(st.Links) != 2 {
		t.Fatalf("links %#v", st.Links)
	}
	sync := st.Links[0]
	if sync["kind"] != "sync" || sync["state"] != "down" || sync["outbox"] != 12.0 || sync["lagSeconds"] != 90.0 ||
		sync["lastError"] != `PUT /things/x: 503 "busy"` || sync["lastSuccess"] != "2026-11-29T01:02:03Z" || sync["errors"] != 3.0 {
		t.Errorf("sync link %#v", sync)
	}
	if _, ok := st.Links[1]["lastError"]; ok || st.Links[1]["received"] != 9.0 {
		t.Errorf("bridge link %#v", st.Links[1])
	}
	body := string(d.do("GET", "/metrics", "", "").want(t, "metrics", http.StatusOK).body)
	for _, want := range []string{
		`lmos_link_up{kind="sync",name="http://dir.example:8081"} 0`,
		`lmos_link_up{kind="bridge",name="upstream"} 1`,
		`lmos_link_outbox{kind="sync",name="http://dir.example:8081"} 12`,
		`lmos_link_lag_seconds{kind="sync",name="http://dir.example:8081"} 90`,
		`lmos_link_errors_total{kind="sync",name="http://dir.example:8081"} 3`,
		`lmos_link_received_total{kind="bridge",name="upstream"} 9`,
		`lmos_link_last_success_timestamp_seconds{kind="sync",name="http://dir.example:8081"} 1.795914123e+09`,
		"# TYPE lmos_link_sent_total counter",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("no %s in /metrics", want)
		}
	}
}
