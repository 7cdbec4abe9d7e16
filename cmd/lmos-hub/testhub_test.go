package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/app"
	"github.com/eclipse-lmos/lmos-hub/internal/hubtest"
)

// The hub under test is internal/app's Main run by internal/hubtest, as
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

// testConfig is the configuration of every test hub.
func testConfig(dir string) Config { return hubtest.Config(dir) }

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
	b, err := os.ReadFile(filepath.Join(sharedTestdata(t), "tds", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sharedTestdata finds ../shared/testdata from the repository, or a copy in
// testdata/ inside the repository.
func sharedTestdata(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"../../testdata", "../../../shared/testdata"} {
		if _, err := os.Stat(filepath.Join(p, "tds")); err == nil {
			return p
		}
	}
	t.Fatal("test data not found in testdata/ or ../shared/testdata")
	return ""
}

// makeTD returns a small valid TD with the given id and title.
func makeTD(id, title string) []byte {
	b, _ := json.Marshal(map[string]any{
		"@context":            []any{"https://www.w3.org/2022/wot/td/v1.1", map[string]any{"lmos": "https://eclipse.dev/lmos/protocol/v1"}},
		"@type":               "lmos:Tool",
		"id":                  id,
		"title":               title,
		"securityDefinitions": map[string]any{"nosec_sc": map[string]any{"scheme": "nosec"}},
		"security":            "nosec_sc",
		"actions": map[string]any{"run": map[string]any{
			"forms": []any{map[string]any{"href": "https://tools.example/run", "op": "invokeaction"}},
		}},
	})
	return b
}

func pathEscape(id string) string { return url.PathEscape(id) }

func hubOrigin() hub.Origin { return hub.Origin{Source: hub.SourceHTTP} }
