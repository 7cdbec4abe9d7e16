// Package brokerstate is the contract between the MQTT broker adapter
// (package mqtt), which writes its durable state, and the store that keeps
// it (package store): the record and the interface both sides import.
// It sits outside hub because the broker's sessions and retained messages
// are no part of the domain, and outside both adapters because adapters
// never import each other; app hands the store to the broker.
package brokerstate

// Kinds of Record. Each names its own bucket in the store, so the strings
// are part of the stored format and must not change.
const (
	KindRetained     = "retained"
	KindClient       = "client"
	KindSubscription = "subscription"
	KindInflight     = "inflight"
)

// Record is one piece of the MQTT broker's durable state: a retained
// message, a persistent session, a subscription or an in-flight message.
// The store does not look inside Value; the mqtt adapter encodes it.
type Record struct {
	Kind  string // KindRetained, KindClient, KindSubscription or KindInflight
	Key   string
	Value []byte // nil deletes the record
}

// Store keeps the broker's retained messages and persistent sessions
// across restarts. The adapter batches changes: one durable commit per
// batch, as mosquitto's periodic autosave does, rather than one per packet.
type Store interface {
	// ApplyBroker stores or deletes the records in one transaction.
	ApplyBroker(recs []Record) error
	// LoadBroker calls fn for every record of kind, in key order.
	LoadBroker(kind string, fn func(key string, value []byte) error) error
}
