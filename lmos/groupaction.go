package lmos

import (
	"encoding/json"
)

// Group actions on the wire (PROTOCOL §7, §10 "Group actions"): one call
// invokes an action on every member of a group that has it and answers
// with one result per member.

// Member statuses of a group action: completed and failed are the member's
// own final result; timedOut, offline and skipped are the hub's verdict
// (no final result in time, no route to the member, no such action).
const (
	GroupResultCompleted = StatusCompleted
	GroupResultFailed    = StatusFailed
	GroupResultTimedOut  = "timedOut"
	GroupResultOffline   = "offline"
	GroupResultSkipped   = "skipped"
)

// MQTT 5 user properties of a group action's per-member result (its
// lmos-status is running: a partial result of the call, §4.3).
const (
	GroupMemberProperty       = "lmos-member"
	GroupMemberStatusProperty = "lmos-member-status"
)

// GroupActionResult is one member's result: an HTTP answer's element, an
// SSE "result" event, an MQTT per-member message (JSON).
type GroupActionResult struct {
	Member string          `json:"member"`
	Status string          `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  *Problem        `json:"error,omitempty"`
}

// GroupActionSummary closes a group action: how many members ended in
// each status (the SSE "done" event, the final MQTT message).
type GroupActionSummary struct {
	Group     string `json:"group"`
	Action    string `json:"action"`
	Members   int    `json:"members"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	TimedOut  int    `json:"timedOut"`
	Offline   int    `json:"offline"`
	Skipped   int    `json:"skipped"`
}

// Count adds one member's status to s.
func (s *GroupActionSummary) Count(status string) {
	s.Members++
	switch status {
	case GroupResultCompleted:
		s.Completed++
	case GroupResultFailed:
		s.Failed++
	case GroupResultTimedOut:
		s.TimedOut++
	case GroupResultOffline:
		s.Offline++
	case GroupResultSkipped:
		s.Skipped++
	}
}

// GroupActionAnswer is the JSON answer of POST /api/groups/{gid}/actions/{name}
// without event streaming: every member's result, by member id.
type GroupActionAnswer struct {
	Group   string              `json:"group"`
	Action  string              `json:"action"`
	Results []GroupActionResult `json:"results"`
}
