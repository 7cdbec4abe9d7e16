package lmos

// Result statuses: the value of the StatusProperty MQTT 5 user property
// (PROTOCOL §4.3) and of an actionStatus's status over WebSocket.
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// StatusProperty is the MQTT 5 user property that carries a result's
// status.
const StatusProperty = "lmos-status"

// Join statuses of a JoinResult.
const (
	JoinAccepted = "accepted"
	JoinRejected = "rejected"
	JoinDeleted  = "deleted"
	// JoinPending: the join waits for an administrator's approval (join
	// mode approve); the final result follows on the same topic.
	JoinPending = "pending"
)

// JoinResult is the payload of lmos/v1/things/{tid}/td/result (PROTOCOL
// §4.1): the hub's answer to a TD an agent published.
type JoinResult struct {
	Status      string       `json:"status"` // JoinAccepted, JoinRejected, JoinDeleted, JoinPending
	ID          string       `json:"id,omitempty"`
	Problem     *Problem     `json:"problem,omitempty"`
	Credentials *Credentials `json:"credentials,omitempty"`
}

// Credentials are what the hub issues at join: the Thing's topic key as
// MQTT username and a password to reconnect with.
type Credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}
