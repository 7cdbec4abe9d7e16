package mqtt

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/tdgen"
)

// cborBomb is n nested one-element arrays.
func cborBomb(n int) []byte {
	return append(bytes.Repeat([]byte{0x81}, n), 0x00)
}

// cborHugeMap declares a map of n pairs but carries none: the decoder must
// refuse it from the header, not allocate for it.
func cborHugeMap(n uint32) []byte {
	return []byte{0xba, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

func TestDecodeTD(t *testing.T) {
	td := tdgen.MakeTD("urn:a", "A")
	var doc map[string]any
	json.Unmarshal(td, &doc)
	cb, err := cbor.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeTD(hub.Decoder{}, cb, "application/cbor")
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(got, &back); err != nil || back["id"] != "urn:a" || back["title"] != "A" {
		t.Fatalf("CBOR TD decoded to %s (%v)", got, err)
	}
	if got, err := decodeTD(hub.Decoder{}, td, ""); err != nil || !bytes.Equal(got, td) {
		t.Fatalf("JSON TD: %s %v", got, err)
	}
	bad := map[string][]byte{
		"nesting bomb":  cborBomb(10000),
		"huge map":      cborHugeMap(1 << 30),
		"array":         {0x80},
		"int keys":      {0xa1, 0x01, 0x02},
		"tag":           {0xc1, 0x1a, 0, 0, 0, 1},
		"NaN":           {0xa1, 0x61, 'x', 0xf9, 0x7e, 0x00},
		"duplicate key": {0xa2, 0x61, 'x', 0x01, 0x61, 'x', 0x02},
		"truncated":     {0xa1, 0x61},
		"bad utf8":      {0xa1, 0x61, 0xff, 0x01},
	}
	for name, p := range bad {
		_, err := decodeTD(hub.Decoder{}, p, "application/cbor")
		if hub.ErrorCode(err) != hub.EINVALID {
			t.Errorf("%s: err = %v, want invalid", name, err)
		}
	}
}

func FuzzDecodeTD(f *testing.F) {
	td := tdgen.MakeTD("urn:a", "A")
	var doc map[string]any
	json.Unmarshal(td, &doc)
	cb, _ := cbor.Marshal(doc)
	f.Add(td, false)
	f.Add(cb, true)
	f.Add(cborBomb(100), true)
	f.Add(cborHugeMap(5000), true)
	f.Add([]byte(`{"id":`), false)
	f.Fuzz(func(t *testing.T, payload []byte, isCBOR bool) {
		ct := ""
		if isCBOR {
			ct = "application/cbor"
		}
		out, err := decodeTD(hub.Decoder{}, payload, ct)
		if err != nil {
			if hub.ErrorCode(err) != hub.EINVALID {
				t.Fatalf("error code %q: %v", hub.ErrorCode(err), err)
			}
			return
		}
		if isCBOR {
			var m map[string]any
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("CBOR decoded to invalid JSON object %q: %v", out, err)
			}
		}
		// Whatever decodes must not crash the registry's parser either.
		_, _ = hub.ParseDocument(out)
	})
}
