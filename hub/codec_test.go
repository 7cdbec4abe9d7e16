package hub

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

func TestTranscode(t *testing.T) {
	cb, err := Transcode([]byte(`{"a":[1,2.5,"x",true,null],"big":12345678901234}`), MediaJSON, MediaCBOR)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := cbor.Unmarshal(cb, &v); err != nil || v["big"] != uint64(12345678901234) {
		t.Fatalf("CBOR %x: %v %v", cb, v, err)
	}
	back, err := Transcode(cb, "application/cbor; x=y", "application/json")
	if err != nil || string(back) != `{"a":[1,2.5,"x",true,null],"big":12345678901234}` {
		t.Fatalf("back: %s %v", back, err)
	}
	if out, err := Transcode([]byte("not json"), MediaJSON, ""); err != nil || string(out) != "not json" {
		t.Fatalf("same encoding must pass through: %q %v", out, err)
	}
	for _, bad := range [][]byte{{0xbf}, {0xc1, 0x00}, {0xa2, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02}, {0xa1, 0x01, 0x01}, {0xf9, 0x7e, 0x00}} {
		if _, err := Transcode(bad, MediaCBOR, MediaJSON); ErrorCode(err) != EINVALID {
			t.Errorf("%x: %v", bad, err)
		}
	}
	if _, err := Transcode([]byte(`{"a":1} 2`), MediaJSON, MediaCBOR); ErrorCode(err) != EINVALID {
		t.Errorf("trailing data: %v", err)
	}
	if _, err := Transcode(append(bytes.Repeat([]byte{0x81}, 40), 0), MediaCBOR, MediaJSON); ErrorCode(err) != EINVALID {
		t.Errorf("deep nesting: %v", err)
	}
}

// FuzzTranscode: CBOR from anyone either fails with EINVALID or becomes
// valid JSON that survives a round trip through CBOR.
func FuzzTranscode(f *testing.F) {
	for _, s := range [][]byte{{0x01}, {0xa1, 0x61, 0x61, 0x01}, {0xbf, 0xff}, {0xf9, 0x7e, 0x00}, {0x5f, 0x41, 0x00, 0xff},
		append(bytes.Repeat([]byte{0x81}, 40), 0), {0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := Transcode(data, MediaCBOR, MediaJSON)
		if err != nil {
			if ErrorCode(err) != EINVALID {
				t.Fatalf("error code %v", err)
			}
			return
		}
		if len(data) > 0 && !json.Valid(j) {
			t.Fatalf("invalid JSON %q from %x", j, data)
		}
		c, err := Transcode(j, MediaJSON, MediaCBOR)
		if err != nil {
			t.Fatalf("JSON %q does not go back to CBOR: %v", j, err)
		}
		j2, err := Transcode(c, MediaCBOR, MediaJSON)
		if err != nil || !bytes.Equal(j, j2) {
			t.Fatalf("round trip %q → %q (%v)", j, j2, err)
		}
	})
}
