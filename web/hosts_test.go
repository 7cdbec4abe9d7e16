package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/web"
)

func TestHostCheckAllowsTheHubsNamesOnly(t *testing.T) {
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) {
		c.AllowedHosts = []string{"gateway.lan", "*.example.com"}
		c.HostNames = func() []string { return []string{"myhub.local", "raspberrypi"} }
	})
	for _, host := range []string{
		"127.0.0.1", "127.0.0.1:8080", "[::1]:80", "[fe80::1%25eth0]:80", "192.168.1.20",
		"localhost", "LOCALHOST:80", "hub.localhost", "a.b.localhost:1",
		"gateway.lan", "Gateway.LAN.:8080", "a.example.com", "deep.a.example.com",
		"myhub.local", "MyHub.Local.", "raspberrypi:8080",
	} {
		d.do("GET", "/things", "", "", "Host", host).want(t, "Host "+host, http.StatusOK)
	}
	for _, host := range []string{"evil.example", "example.com", "localhost.evil.example", "myhub.local.evil", "gateway.lan.example"} {
		r := d.do("GET", "/things", "", "", "Host", host)
		p := r.problem(t, "Host "+host, http.StatusForbidden, hub.EFORBIDDEN)
		if !strings.Contains(p.Detail, "http.allowedHosts") {
			t.Fatalf("Host %s: detail %q does not name the setting", host, p.Detail)
		}
	}
	// A refused host reaches no handler: nothing is stored.
	d.do("PUT", "/things/urn:example:a", tdType, thingTD("urn:example:a", "A"), "Host", "evil.example").
		problem(t, "PUT for a foreign host", http.StatusForbidden, hub.EFORBIDDEN)
	d.do("GET", "/things/urn:example:a", "", "").problem(t, "GET after the refused PUT", http.StatusNotFound, hub.ENOTFOUND)
}

func TestHostCheckOff(t *testing.T) {
	d := newDirectory(t, func(c *web.Config, _ *hub.Registry) { c.AllowedHosts = []string{"*"} })
	d.do("GET", "/things", "", "", "Host", "evil.example").want(t, "any host", http.StatusOK)
}
