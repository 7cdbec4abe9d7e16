package agent

import (
	"bytes"
	"errors"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/fxamacker/cbor/v2"
)

// The agent decodes CBOR with the hub's limits (lmos): what the hub would
// refuse on any door is a 400 problem here too, not a value.
func TestValueDecodeUsesTheHubsCBORLimits(t *testing.T) {
	long, _ := cbor.Marshal(make([]int, lmos.MaxCBORItems+1))
	atLimit, _ := cbor.Marshal(make([]int, lmos.MaxCBORItems))
	refused := map[string][]byte{
		"a tag (epoch time)":   {0xc1, 0x1a, 0x5f, 0x00, 0x00, 0x00},
		"an array over 4,096":  long,
		"a duplicate map key":  {0xa2, 0x61, 'a', 0x01, 0x61, 'a', 0x02},
		"nesting over 32 deep": append(bytes.Repeat([]byte{0x81}, lmos.MaxCBORDepth+1), 0),
	}
	for name, data := range refused {
		var v any
		err := Value{Payload: data, ContentType: CBOR}.Decode(&v)
		var p *Problem
		if !errors.As(err, &p) || p.Status != 400 || p.Type != lmos.ErrorTypeBase+"invalid" {
			t.Errorf("%s: Decode = %v (%T), want a 400 invalid problem", name, err, v)
		}
	}
	var v []int
	if err := (Value{Payload: atLimit, ContentType: CBOR}).Decode(&v); err != nil || len(v) != lmos.MaxCBORItems {
		t.Errorf("an array of 4,096: %d elements, %v", len(v), err)
	}
}
