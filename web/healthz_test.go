package web_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/web"
)

// An optional component (mDNS) shows its state on /healthz; when it
// failed the hub still serves, so the status is "degraded" with 200, not
// "down" — unless a required component is down too.
func TestHealthzOptionalComponent(t *testing.T) {
	var mdnsErr, brokerErr error
	state := "starting"
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) {
		c.Checks = map[string]func() error{"broker": func() error { return brokerErr }}
		c.Optional = map[string]func() (string, error){"mdns": func() (string, error) { return state, mdnsErr }}
	})
	var health struct {
		Status     string
		Components map[string]string
	}
	d.do("GET", "/healthz", "", "").want(t, "healthz starting", http.StatusOK).json(t, &health)
	if health.Status != "up" || health.Components["mdns"] != "starting" || health.Components["broker"] != "up" {
		t.Fatalf("healthz with mdns starting %+v", health)
	}
	mdnsErr = errors.New("cannot listen on udp 5353: address already in use")
	d.do("GET", "/healthz", "", "").want(t, "healthz degraded", http.StatusOK).json(t, &health)
	if health.Status != "degraded" || health.Components["mdns"] != mdnsErr.Error() || health.Components["broker"] != "up" {
		t.Fatalf("healthz with mdns failed %+v", health)
	}
	brokerErr = errors.New("not listening")
	d.do("GET", "/healthz", "", "").want(t, "healthz down", http.StatusServiceUnavailable).json(t, &health)
	if health.Status != "down" || health.Components["mdns"] != mdnsErr.Error() || health.Components["broker"] != "not listening" {
		t.Fatalf("healthz with mdns failed and the broker down %+v", health)
	}
}
