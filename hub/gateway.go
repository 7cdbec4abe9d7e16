package hub

// Publisher makes what a Thing reached over one transport emits visible to
// the consumers of another: the WebSocket gateway publishes its agents'
// events, property values and presence through the MQTT broker, where MQTT
// subscribers and the hub's own streams (Router, OpSubscribeEvent and
// OpObserveProperty) see them as if an MQTT agent had published them.
type Publisher interface {
	// PublishEvent emits one event of a Thing.
	PublishEvent(thingID, name string, data []byte, contentType string) error
	// PublishProperty publishes a property's current value (kept for later
	// readers and observers).
	PublishProperty(thingID, name string, value []byte, contentType string) error
	// PublishPresence publishes a Thing's presence status (online, offline)
	// where consumers of the other transport read it.
	PublishPresence(thingID, status string) error
}
