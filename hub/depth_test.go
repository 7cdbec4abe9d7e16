package hub_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// nested returns a TD whose "x" member holds n nested objects, each with
// one member "a/~b" (so the pointer shows escaping), plus one array level.
func nested(n int) string {
	return `{"id":"urn:t:deep","title":"T","x":[` + strings.Repeat(`{"a/~b":`, n) + `1` + strings.Repeat(`}`, n) + `]}`
}

func TestDepthLimitAtValidation(t *testing.T) {
	// The root object is level 1, the array level 2: 30 objects inside
	// reach exactly 32.
	if _, err := hub.ParseDocument([]byte(nested(30))); err != nil {
		t.Fatalf("32 levels refused: %v", err)
	}
	_, err := hub.ParseDocument([]byte(nested(31)))
	var e *hub.Error
	if !errors.As(err, &e) || e.Code != hub.EINVALID || e.Limit != "registry.maxDepth" || len(e.Fields) != 1 {
		t.Fatalf("33 levels: %v", err)
	}
	want := "/x/0" + strings.Repeat("/a~1~0b", 30)
	if e.Fields[0].Field != want {
		t.Errorf("pointer %q, want %q", e.Fields[0].Field, want)
	}
	// Brackets in strings do not count; escaped quotes do not end them.
	s := `{"id":"urn:t:s","title":"` + strings.Repeat(`[{\"`, 100) + `"}`
	if _, err := hub.ParseDocument([]byte(s)); err != nil {
		t.Errorf("brackets in a string counted: %v", err)
	}
	// The attack's shape: ~10k levels are refused before decoding.
	if _, err := hub.ParseDocument([]byte(nested(10000))); hub.RefusalReason(err) != "registry.maxDepth" {
		t.Errorf("10k levels: %v", err)
	}
	// A merge patch is parsed the same way.
	if _, err := hub.ParseDocument([]byte(`{"p":` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `}`)); hub.RefusalReason(err) != "registry.maxDepth" {
		t.Errorf("deep arrays: %v", err)
	}
	// The setting moves the limit.
	dec := hub.Decoder{MaxDepth: 4}
	if _, err := dec.ParseDocument([]byte(nested(3))); hub.RefusalReason(err) != "registry.maxDepth" {
		t.Errorf("maxDepth 4: 5 levels accepted: %v", err)
	}
	if _, err := dec.ParseDocument([]byte(nested(2))); err != nil {
		t.Errorf("maxDepth 4: 4 levels refused: %v", err)
	}
}

// FuzzDepth: the byte scan agrees with the decoder about the depth of
// every document the decoder accepts, and never panics on the rest.
func FuzzDepth(f *testing.F) {
	for _, s := range []string{nested(30), nested(31), `{"a":"[[[["}`, `{"a\"[":[[]]}`, `{}`, `{"a":[1,{"b":[]}]}`, `{"x":"\\"}`, `[`, `{"a":{`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := hub.ParseDocument([]byte(s))
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		deep := depthOf(v) > hub.DefaultMaxDepth
		if got := hub.RefusalReason(err) == "registry.maxDepth"; got != deep {
			t.Fatalf("depth %d: refused for depth %v, want %v (%v)", depthOf(v), got, deep, err)
		}
	})
}

func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, c := range v {
			d = max(d, depthOf(c))
		}
		return d + 1
	case []any:
		for _, c := range v {
			d = max(d, depthOf(c))
		}
		return d + 1
	}
	return 0
}

// TestPayloadDepth: decoded JSON payloads (WebSocket frames, interaction
// values) are bounded near the TD limit before any map is built, as CBOR
// is by its decoder.
func TestPayloadDepth(t *testing.T) {
	if _, err := (hub.Decoder{}).DecodeValue([]byte(`{"td":`+nested(30)+`}`), "application/json"); err != nil {
		t.Errorf("an envelope around a 32-level TD: %v", err)
	}
	if _, err := (hub.Decoder{}).DecodeValue([]byte(strings.Repeat(`[`, 5000)+strings.Repeat(`]`, 5000)), "application/json"); hub.RefusalReason(err) != "registry.maxDepth" {
		t.Errorf("5000 levels: %v", err)
	}
}

// TestRegistryMaxDepth: each registry carries its own nesting limit
// (RegistryOptions.MaxDepth), for its writes and for the Decoder its doors
// decode with; two registries with different limits live in one process.
func TestRegistryMaxDepth(t *testing.T) {
	ctx := context.Background()
	// deepTD is a valid TD whose extension member "x" nests n objects in
	// an array: n+2 levels.
	deepTD := func(id string, n int) []byte {
		td := testTD(id, "t")
		return append([]byte(`{"x":[`+strings.Repeat(`{"a":`, n)+`1`+strings.Repeat(`}`, n)+`],`), td[1:]...)
	}
	shallow := newRegistry(t, openStore(t), hub.RegistryOptions{MaxDepth: 6})
	deep := newRegistry(t, openStore(t), hub.RegistryOptions{MaxDepth: 40})

	if _, err := shallow.Put(ctx, "urn:t:d7", deepTD("urn:t:d7", 5), hub.Origin{}); hub.RefusalReason(err) != "registry.maxDepth" {
		t.Errorf("maxDepth 6, 7 levels: %v", err)
	}
	if _, err := shallow.Raw("urn:t:d7"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("a refused TD was stored: %v", err)
	}
	if _, err := shallow.Put(ctx, "urn:t:d6", deepTD("urn:t:d6", 4), hub.Origin{}); err != nil {
		t.Errorf("maxDepth 6, 6 levels: %v", err)
	}
	// Beyond the default of 32, and within this registry's 40.
	if _, err := deep.Put(ctx, "urn:t:d38", deepTD("urn:t:d38", 36), hub.Origin{}); err != nil {
		t.Errorf("maxDepth 40, 38 levels: %v", err)
	}
	if _, err := deep.Document("urn:t:d38"); err != nil {
		t.Errorf("maxDepth 40, reading a 38-level TD back: %v", err)
	}

	// Payloads may nest payloadDepthSlack (8) deeper than a TD.
	payload := func(n int) []byte { return []byte(strings.Repeat(`[`, n) + strings.Repeat(`]`, n)) }
	if _, err := shallow.Decoder().DecodeValue(payload(15), "application/json"); hub.RefusalReason(err) != "registry.maxDepth" {
		t.Errorf("maxDepth 6, a 15-level payload: %v", err)
	}
	if _, err := shallow.Decoder().DecodeValue(payload(14), "application/json"); err != nil {
		t.Errorf("maxDepth 6, a 14-level payload: %v", err)
	}
	if _, err := deep.Decoder().Transcode(payload(48), "application/json", "application/cbor"); err != nil {
		t.Errorf("maxDepth 40, a 48-level payload: %v", err)
	}
	if _, err := deep.Decoder().ParseDocument(deepTD("urn:t:d43", 41)); hub.RefusalReason(err) != "registry.maxDepth" {
		t.Errorf("maxDepth 40, 43 levels: %v", err)
	}
}
