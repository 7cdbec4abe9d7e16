package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// W3C WoT Discovery tdd-http-unsupported-feature: a TD in a content coding
// the hub does not decode is 415 naming the coding, with
// Accept-Encoding: identity (RFC 9110 §15.5.16), and nothing is stored.
func TestTDD_http_unsupported_feature_ContentEncoding(t *testing.T) {
	h := startHub(t, nil)
	existing := "urn:ex:enc-existing"
	td := makeTD(existing, "plain")
	h.put(existing, td)

	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return buf.Bytes()
	}
	newID := "urn:ex:enc-new"
	for _, tc := range []struct {
		name, method, path, ct, coding string
		body                           []byte
	}{
		{"PUT new gzip", "PUT", "/things/" + pathEscape(newID), "application/td+json", "gzip", gz(makeTD(newID, "zipped"))},
		{"PUT existing gzip", "PUT", "/things/" + pathEscape(existing), "application/td+json", "gzip", gz(makeTD(existing, "zipped"))},
		{"POST gzip", "POST", "/things", "application/td+json", "gzip", gz([]byte(`{"@context":"https://www.w3.org/2022/wot/td/v1.1","title":"x","securityDefinitions":{"n":{"scheme":"nosec"}},"security":"n"}`))},
		{"PATCH br", "PATCH", "/things/" + pathEscape(existing), "application/merge-patch+json", "br", []byte(`{"title":"x"}`)},
		{"PUT identity, gzip", "PUT", "/things/" + pathEscape(existing), "application/td+json", "identity, gzip", gz(makeTD(existing, "zipped"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.condDo(tc.method, tc.path, tc.ct, tc.body, map[string]string{"Content-Encoding": tc.coding})
			if resp.StatusCode != http.StatusUnsupportedMediaType {
				t.Fatalf("status %d, want 415: %s", resp.StatusCode, body)
			}
			if got := resp.Header.Get("Accept-Encoding"); got != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", got)
			}
			var p struct {
				Type, Detail string
				Status       int
			}
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("problem %s: %v", body, err)
			}
			coding := strings.TrimSpace(tc.coding[strings.LastIndexByte(tc.coding, ',')+1:])
			if p.Type != "https://eclipse.dev/lmos/protocol/v1/errors#unsupported" || p.Status != 415 || !strings.Contains(p.Detail, `"`+coding+`"`) {
				t.Errorf("problem %+v, want …#unsupported, 415, a detail naming %q", p, coding)
			}
			if raw, _, ok := h.stored(existing); !ok || !bytes.Equal(raw, td) {
				t.Errorf("existing Thing changed: %s", raw)
			}
			if _, _, ok := h.stored(newID); ok {
				t.Error("a Thing was stored from the refused body")
			}
			var list []any
			h.getJSON("/things", http.StatusOK, &list)
			if len(list) != 1 {
				t.Errorf("%d Things listed, want 1", len(list))
			}
		})
	}
	// identity is no coding at all.
	resp, body := h.condDo("PUT", "/things/"+pathEscape(newID), "application/td+json", makeTD(newID, "plain"), map[string]string{"Content-Encoding": "identity"})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("Content-Encoding identity: %d %s", resp.StatusCode, body)
	}
}
