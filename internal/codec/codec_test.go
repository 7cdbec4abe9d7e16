package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/fxamacker/cbor/v2"
)

func TestTranscode(t *testing.T) {
	cb, err := Transcode([]byte(`{"a":[1,2.5,"x",true,null],"big":12345678901234}`), lmos.MediaJSON, lmos.MediaCBOR, testDepth)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := cbor.Unmarshal(cb, &v); err != nil || v["big"] != uint64(12345678901234) {
		t.Fatalf("CBOR %x: %v %v", cb, v, err)
	}
	back, err := Transcode(cb, "application/cbor; x=y", "application/json", testDepth)
	if err != nil || string(back) != `{"a":[1,2.5,"x",true,null],"big":12345678901234}` {
		t.Fatalf("back: %s %v", back, err)
	}
	if out, err := Transcode([]byte(` {"a" : 1} `), lmos.MediaJSON, "", testDepth); err != nil || string(out) != ` {"a" : 1} ` {
		t.Fatalf("same encoding must pass through: %q %v", out, err)
	}
	if out, err := Transcode([]byte{0xa1, 0x61, 0x61, 0x01}, lmos.MediaCBOR, lmos.MediaCBOR, testDepth); err != nil || !bytes.Equal(out, []byte{0xa1, 0x61, 0x61, 0x01}) {
		t.Fatalf("same encoding must pass through: %x %v", out, err)
	}
	for _, bad := range [][]byte{{0xbf}, {0xc1, 0x00}, {0xa2, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02}, {0xa1, 0x01, 0x01}, {0xf9, 0x7e, 0x00}} {
		if _, err := Transcode(bad, lmos.MediaCBOR, lmos.MediaJSON, testDepth); !refused(err) {
			t.Errorf("%x: %v", bad, err)
		}
	}
	if _, err := Transcode([]byte(`{"a":1} 2`), lmos.MediaJSON, lmos.MediaCBOR, testDepth); !refused(err) {
		t.Errorf("trailing data: %v", err)
	}
	if _, err := Transcode(append(bytes.Repeat([]byte{0x81}, 40), 0), lmos.MediaCBOR, lmos.MediaJSON, testDepth); !refused(err) {
		t.Errorf("deep nesting: %v", err)
	}
}

// A payload of the same encoding is still checked: a broken agent payload
// must not pass through as if it were valid.
func TestTranscodeSameEncodingValidates(t *testing.T) {
	for _, bad := range []string{"not json", `{"a":`, `{"a":1} x`} {
		if _, err := Transcode([]byte(bad), lmos.MediaJSON, lmos.MediaJSON, testDepth); !refused(err) {
			t.Errorf("JSON %q: %v", bad, err)
		}
	}
	for _, bad := range [][]byte{{0xff, 0x00}, {0xbf}, {0xa1, 0x61}, {0x01, 0x02}, append(bytes.Repeat([]byte{0x81}, 40), 0)} {
		if _, err := Transcode(bad, lmos.MediaCBOR, lmos.MediaCBOR, testDepth); !refused(err) {
			t.Errorf("CBOR %x: %v", bad, err)
		}
	}
}

// Integers beyond int64 stay exact numbers both ways; JSON numbers out of
// the float range are refused rather than sent as CBOR text.
func TestTranscodeBigNumbers(t *testing.T) {
	for _, c := range []struct {
		cbor []byte
		json string
	}{
		{[]byte{0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, `-18446744073709551616`},
		{[]byte{0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0}, `-9223372036854775809`},
		{[]byte{0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, `18446744073709551615`},
	} {
		j, err := Transcode(c.cbor, lmos.MediaCBOR, lmos.MediaJSON, testDepth)
		if err != nil || string(j) != c.json {
			t.Errorf("%x → %s %v, want %s", c.cbor, j, err, c.json)
		}
		back, err := Transcode([]byte(c.json), lmos.MediaJSON, lmos.MediaCBOR, testDepth)
		if err != nil || !bytes.Equal(back, c.cbor) {
			t.Errorf("%s → %x %v, want %x", c.json, back, err, c.cbor)
		}
	}
	j, err := Transcode([]byte(`{"n":[-18446744073709551616]}`), lmos.MediaJSON, lmos.MediaCBOR, testDepth)
	if err == nil {
		j, err = Transcode(j, lmos.MediaCBOR, lmos.MediaJSON, testDepth)
	}
	if err != nil || string(j) != `{"n":[-18446744073709551616]}` {
		t.Errorf("nested big integer: %s %v", j, err)
	}
	for _, in := range []string{`1e400`, `-1e400`, `[1, {"x": 1e999}]`, "1" + strings.Repeat("0", 400)} {
		if out, err := Transcode([]byte(in), lmos.MediaJSON, lmos.MediaCBOR, testDepth); !refused(err) {
			t.Errorf("%.20s → %x %v, want EINVALID", in, out, err)
		}
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
		j, err := Transcode(data, lmos.MediaCBOR, lmos.MediaJSON, testDepth)
		if err != nil {
			if !refused(err) {
				t.Fatalf("error code %v", err)
			}
			return
		}
		if len(data) > 0 && !json.Valid(j) {
			t.Fatalf("invalid JSON %q from %x", j, data)
		}
		c, err := Transcode(j, lmos.MediaJSON, lmos.MediaCBOR, testDepth)
		if err != nil {
			t.Fatalf("JSON %q does not go back to CBOR: %v", j, err)
		}
		j2, err := Transcode(c, lmos.MediaCBOR, lmos.MediaJSON, testDepth)
		if err != nil || !bytes.Equal(j, j2) {
			t.Fatalf("round trip %q → %q (%v)", j, j2, err)
		}
	})
}

// testDepth is the JSON nesting bound of these tests (the hub passes its
// TD limit plus slack).
const testDepth = 40

// refused reports whether err is one of the codec's refusals.
func refused(err error) bool {
	var e *Error
	var d *DepthError
	return errors.As(err, &e) || errors.As(err, &d)
}
