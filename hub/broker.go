package hub

// BrokerRecord is one piece of the MQTT broker's durable state: a retained
// message, a persistent session, a subscription or an in-flight message.
// hub does not look inside Value; the mqtt adapter encodes it.
type BrokerRecord struct {
	Kind  string // "retained", "client", "subscription", "inflight"
	Key   string
	Value []byte // nil deletes the record
}

// BrokerStore keeps the broker's retained messages and persistent sessions
// across restarts. The adapter batches changes: one durable commit per
// batch, as mosquitto's periodic autosave does, rather than one per packet.
type BrokerStore interface {
	// ApplyBroker stores or deletes the records in one transaction.
	ApplyBroker(recs []BrokerRecord) error
	// LoadBroker calls fn for every record of kind, in key order.
	LoadBroker(kind string, fn func(key string, value []byte) error) error
}
