package mqtt

import "fmt"

// Who writes deliveries (Config.DeliveryPath, the setting
// mqtt.deliveryPath).
const (
	// DeliveryHub is the broker's own path (the default): QoS 0 fan-out
	// (fanout.go), QoS 1/2 through the session under the client's flow
	// control (qos.go), retained messages on SUBSCRIBE (retained.go) and
	// the acknowledgements of QoS 1 publishes (ackbatch.go).
	DeliveryHub = "hub"
	// DeliveryMochi leaves all of that to mochi, as before issue 10: kept
	// to compare the two (the differential test, benchmarks). It has
	// mochi's known losses (PROTOCOL §10, "MQTT delivery"): a delivery
	// dropped when a client's 128-packet queue is full, and a stall once
	// a client's Receive Maximum is used up.
	DeliveryMochi = "mochi"
)

// checkDeliveryPath refuses a Config.DeliveryPath that is neither.
func checkDeliveryPath(p string) error {
	if p != DeliveryHub && p != DeliveryMochi {
		return fmt.Errorf("mqtt: delivery path %q is not %q or %q", p, DeliveryHub, DeliveryMochi)
	}
	return nil
}

// mochiPath reports whether mochi delivers (DeliveryMochi).
func (b *Broker) mochiPath() bool { return b.cfg.DeliveryPath == DeliveryMochi }
