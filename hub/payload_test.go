package hub

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// TestCodecRefusalsAreInvalid: every payload the codec refuses reaches the
// doors as EINVALID with the codec's message (internal/codec tests what is
// refused).
func TestCodecRefusalsAreInvalid(t *testing.T) {
	for _, c := range []struct {
		from, to string
		in       []byte
		msg      string
	}{
		{lmos.MediaCBOR, lmos.MediaJSON, []byte{0xbf}, "invalid CBOR payload"},
		{lmos.MediaJSON, lmos.MediaCBOR, []byte(`{"a":1} 2`), "invalid JSON payload: data after the value"},
		{lmos.MediaJSON, lmos.MediaJSON, []byte(`{"a":`), "invalid JSON payload"},
		{lmos.MediaJSON, lmos.MediaCBOR, []byte(`1e400`), "cannot encode the payload as CBOR: the number 1e400 is out of range"},
	} {
		_, err := Decoder{}.Transcode(c.in, c.from, c.to)
		if ErrorCode(err) != EINVALID || !strings.HasPrefix(err.Error(), c.msg) {
			t.Errorf("%q %s→%s: %v, want EINVALID %q", c.in, c.from, c.to, err, c.msg)
		}
	}
	if _, err := EncodeValue(map[string]any{"f": func() {}}, lmos.MediaJSON); ErrorCode(err) != EINVALID {
		t.Errorf("unencodable value: %v", err)
	}
}
