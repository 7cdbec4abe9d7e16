package mqtt

import (
	"errors"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// A refused publish is answered 0x87 only where MQTT can say so (an MQTT 5
// PUBACK); anything else is dropped (Ignore). mochi answers
// ErrNotAuthorized only over MQTT 5: over 3.1.1 it would go on to retain
// and deliver the publish it was told to refuse.
func TestRefuseAnswersOnlyWhereMQTTCan(t *testing.T) {
	for _, c := range []struct {
		version, qos byte
		want         error
	}{
		{5, 1, packets.ErrNotAuthorized},
		{5, 0, packets.CodeSuccessIgnore},
		{5, 2, packets.CodeSuccessIgnore},
		{4, 1, packets.CodeSuccessIgnore},
		{3, 1, packets.CodeSuccessIgnore},
		{4, 0, packets.CodeSuccessIgnore},
	} {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: c.qos}, ProtocolVersion: c.version}
		if _, err := refuse(pk); !errors.Is(err, c.want) {
			t.Errorf("MQTT version %d, QoS %d: %v, want %v", c.version, c.qos, err, c.want)
		}
	}
}
