package mqtt

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/fxamacker/cbor/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

func TestParseReply(t *testing.T) {
	cb, _ := cbor.Marshal(map[string]any{"type": "urn:x#jam", "title": "Jammed", "detail": "d", "status": 418})
	for _, c := range []struct {
		name                 string
		payload              []byte
		ct, fallback, status string
		has                  bool
		wantStatus, wantCT   string
		wantType, wantDetail string
	}{
		{"no status is completed", []byte(`1`), "", "application/json", "", false, "completed", lmos.MediaJSON, "", ""},
		{"running, cbor by fallback", []byte{0x01}, "", "application/cbor", "running", true, "running", lmos.MediaCBOR, "", ""},
		{"pending", nil, "application/json", "", "pending", true, "pending", lmos.MediaJSON, "", ""},
		{"failed json problem", []byte(`{"type":"urn:x#jam","title":"Jammed","detail":"stuck"}`), "application/json", "", "failed", true,
			"failed", "", "urn:x#jam", "stuck"},
		{"failed cbor problem", cb, "application/cbor", "", "failed", true, "failed", "", "urn:x#jam", "d"},
		{"failed without body", nil, "", "", "failed", true, "failed", "", lmos.ErrorTypeBase + hub.EFAILED, "reported a failure"},
		{"failed with garbage", []byte(`{"type":`), "", "", "failed", true, "failed", "", lmos.ErrorTypeBase + hub.EFAILED, "without a problem"},
		{"failed with a non-object", []byte(`[1]`), "", "", "failed", true, "failed", "", lmos.ErrorTypeBase + hub.EFAILED, "without a problem"},
		{"failed with wrong member types", []byte(`{"type":7,"detail":["x"]}`), "", "", "failed", true, "failed", "", lmos.ErrorTypeBase + hub.EFAILED, "reported a failure"},
		{"unknown status", []byte(`1`), "", "", "done", true, "failed", "", lmos.ErrorTypeBase + hub.EFAILED, `unknown lmos-status "done"`},
	} {
		r := parseReply(hub.Decoder{}, c.payload, c.ct, c.fallback, c.status, c.has)
		if r.Status != c.wantStatus {
			t.Errorf("%s: status %q", c.name, r.Status)
			continue
		}
		if c.wantStatus != "failed" {
			if r.ContentType != c.wantCT || string(r.Data) != string(c.payload) || r.Problem != nil {
				t.Errorf("%s: %+v", c.name, r)
			}
			continue
		}
		if r.Problem == nil || r.Problem.Type != c.wantType || !strings.Contains(r.Problem.Detail, c.wantDetail) ||
			r.Problem.Status != http.StatusBadGateway || r.Problem.Title == "" {
			t.Errorf("%s: problem %+v", c.name, r.Problem)
		}
	}
	long := `{"detail":"` + strings.Repeat("é", 5000) + `"}`
	if p := parseReply(hub.Decoder{}, []byte(long), "", "", "failed", true).Problem; len(p.Detail) > 4096 || !utf8.ValidString(p.Detail) {
		t.Errorf("long detail: %d bytes, valid %v", len(p.Detail), utf8.ValidString(p.Detail))
	}
	if p := parseReply(hub.Decoder{}, cborBomb(100), "application/cbor", "", "failed", true).Problem; !strings.Contains(p.Detail, "without a problem") {
		t.Errorf("nested CBOR: %+v", p)
	}
}

// FuzzParseReply: whatever an agent sends, a reply becomes a well-formed
// result; a failed one always carries a problem with status 502 and short,
// valid texts.
func FuzzParseReply(f *testing.F) {
	cb, _ := cbor.Marshal(map[string]any{"type": "urn:x", "detail": "d"})
	f.Add([]byte(`{"type":"urn:x#a","title":"A","detail":"b","instance":"/x"}`), "application/json", "failed")
	f.Add(cb, "application/cbor", "failed")
	f.Add(cborBomb(64), "application/cbor", "failed")
	f.Add(cborHugeMap(1<<30), "application/cbor", "failed")
	f.Add([]byte(`{"n":1}`), "", "running")
	f.Add([]byte{}, "", "")
	f.Add([]byte("\xff"), "text/plain", "weird\x00")
	f.Fuzz(func(t *testing.T, payload []byte, ct, status string) {
		r := parseReply(hub.Decoder{}, payload, ct, lmos.MediaJSON, status, status != "")
		switch r.Status {
		case hub.StatusPending, hub.StatusRunning, hub.StatusCompleted:
			if r.Problem != nil || (r.ContentType != lmos.MediaJSON && r.ContentType != lmos.MediaCBOR) {
				t.Fatalf("result %+v", r)
			}
		case hub.StatusFailed:
			p := r.Problem
			if p == nil || p.Status != http.StatusBadGateway || p.Type == "" || p.Title == "" ||
				len(p.Type) > 512 || len(p.Title) > 512 || len(p.Detail) > 4096 || len(p.Instance) > 512 ||
				!utf8.ValidString(p.Type+p.Title+p.Detail+p.Instance) || r.Data != nil {
				t.Fatalf("failed result %+v %+v", r, p)
			}
		default:
			t.Fatalf("status %q", r.Status)
		}
	})
}
