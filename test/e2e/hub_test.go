// Package e2e holds the end-to-end tests: the hub started exactly as main
// starts it (test/kit/hubtest), driven over its real doors by real clients,
// including the npm, Python and mosquitto ones of test/interop. The CLI and
// the tests that must run main's own code (crash, mDNS namespaces) stay in
// cmd/lmos-hub.
package e2e

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// The hub under test is app's Main run by test/kit/hubtest, as
// main runs it; these names keep the package's tests short.
type (
	Config   = app.Config
	Main     = app.Main
	Duration = app.Duration
)

// testToken is the admin token test hubs are provisioned with.
const testToken = hubtest.Token

// testHub is a hub started in-process exactly as main starts it, on
// 127.0.0.1:0 with its data in a temp dir.
type testHub struct {
	*hubtest.Hub
	t *testing.T
}

// startHub starts a hub; edit changes the configuration first.
func startHub(t *testing.T, edit func(*Config)) *testHub {
	t.Helper()
	return &testHub{hubtest.Start(t, edit), t}
}

func startHubIn(t *testing.T, dir string, edit func(*Config)) *testHub {
	t.Helper()
	return &testHub{hubtest.StartIn(t, dir, edit), t}
}

// runHub runs m (from hubtest.NewMain, changed by the test) as main does.
func runHub(t *testing.T, m *Main) *testHub {
	t.Helper()
	return &testHub{hubtest.Run(t, m), t}
}

func (h *testHub) do(method, path, contentType string, body []byte, token string) (*http.Response, []byte) {
	h.t.Helper()
	return h.Do(method, path, contentType, body, token)
}

func (h *testHub) request(method, path, contentType, accept string, body []byte, token string) (*http.Response, []byte) {
	h.t.Helper()
	return h.Request(method, path, contentType, accept, body, token)
}

func (h *testHub) send(method, path string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	h.t.Helper()
	return h.Send(method, path, body, hdr)
}

func (h *testHub) put(id string, td []byte) {
	h.t.Helper()
	h.Put(id, td)
}

func (h *testHub) getJSON(path string, want int, v any) *http.Response {
	h.t.Helper()
	return h.GetJSON(path, want, v)
}

// sample reads a TD from the shared test data.
func sample(t *testing.T, name string) []byte {
	t.Helper()
	return hubtest.Sample(t, name)
}

// makeTD returns a small valid TD with the given id and title.
func makeTD(id, title string) []byte { return tdgen.MakeTD(id, title) }

func pathEscape(id string) string { return url.PathEscape(id) }

func hubOrigin() hub.Origin { return hub.Origin{Source: hub.SourceHTTP} }
