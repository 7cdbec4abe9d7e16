package mqtt

import (
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// topicKind classifies the part of a Thing topic after {tid}.
type topicKind int

const (
	kindOther       topicKind = iota // anything else under the Thing
	kindTD                           // td
	kindTDResult                     // td/result
	kindStatus                       // status
	kindProperty                     // properties/{name}
	kindPropertySet                  // properties/{name}/set
	kindAction                       // actions/{name}
	kindEvent                        // events/{name}
)

// thingTopic is a parsed topic name lmos/v1/things/{tid}/{rest}.
type thingTopic struct {
	tid  string
	rest string // never empty
	kind topicKind
	name string // the affordance name of properties, actions and events
}

// String rebuilds the topic name.
func (t thingTopic) String() string { return lmos.ThingsPrefix + t.tid + "/" + t.rest }

// parseThingTopic parses a topic name (not a filter) under
// lmos/v1/things/. {tid} must be a non-empty level without wildcards; it is
// not decoded (see idOf).
func parseThingTopic(topic string) (thingTopic, bool) {
	tail, ok := strings.CutPrefix(topic, lmos.ThingsPrefix)
	if !ok {
		return thingTopic{}, false
	}
	tid, rest, ok := strings.Cut(tail, "/")
	if !ok || tid == "" || rest == "" || strings.ContainsAny(tid, "+#") {
		return thingTopic{}, false
	}
	t := thingTopic{tid: tid, rest: rest}
	switch rest {
	case "td":
		t.kind = kindTD
		return t, true
	case "td/result":
		t.kind = kindTDResult
		return t, true
	case "status":
		t.kind = kindStatus
		return t, true
	}
	first, after, _ := strings.Cut(rest, "/")
	name, more, nested := strings.Cut(after, "/")
	if name == "" || strings.ContainsAny(name, "+#") {
		return t, true // kindOther
	}
	switch {
	case first == "properties" && !nested:
		t.kind = kindProperty
	case first == "properties" && more == "set":
		t.kind = kindPropertySet
	case first == "actions" && !nested:
		t.kind = kindAction
	case first == "events" && !nested:
		t.kind = kindEvent
	default:
		return t, true
	}
	t.name = name
	return t, true
}

// idOf decodes a topic key back to the Thing id. Only the canonical key of
// a valid id is accepted, so one Thing has exactly one set of topics.
func idOf(tid string) (string, bool) {
	id, ok := lmos.IDOfTopicKey(tid)
	if !ok || hub.ValidateID(id) != nil {
		return "", false
	}
	return id, true
}

// inboxOK reports whether a client id can name a reply inbox level
// lmos/v1/clients/{clientId}: an id with a wildcard or a slash would let
// its owner read other clients' inboxes.
func inboxOK(clientID string) bool {
	return clientID != "" && !strings.ContainsAny(clientID, "/+#")
}

// replyTopicOK reports whether an MQTT 5 Response Topic names a reply inbox
// lmos/v1/clients/{clientId}/…, the only place a responder is asked to
// publish to (PROTOCOL §4.3, §10).
func replyTopicOK(topic string) bool {
	inbox, ok := strings.CutPrefix(topic, lmos.ClientsPrefix)
	id, _, _ := strings.Cut(inbox, "/")
	return ok && id != "" && !strings.ContainsAny(topic, "+#")
}

// mayRetain reports whether a publish on topic keeps its retain flag. Not on
// what anyone may publish (invocations, property writes, replies): a
// retained invocation would run again at every subscribe, and anonymous
// clients could fill the retained store. Nor on td/result, which is never
// retained. A Thing's own properties, status and the rest keep it.
func mayRetain(topic string) bool {
	if strings.HasPrefix(topic, lmos.ClientsPrefix) || strings.HasPrefix(topic, lmos.GroupsPrefix) {
		// Group channels: a retained message would outlive the group and
		// greet a later group of the same id (PROTOCOL §10).
		return false
	}
	if t, ok := parseThingTopic(topic); ok {
		switch t.kind {
		case kindAction, kindPropertySet, kindTDResult:
			return false
		}
	}
	return true
}

// mayPublish is the PUBLISH half of the ACL (PROTOCOL §4.4) for a client
// authenticated as Thing self ("" for anonymous).
func mayPublish(self, topic string) bool {
	if !strings.HasPrefix(topic, lmos.TopicRoot) {
		return false
	}
	if inbox, ok := strings.CutPrefix(topic, lmos.ClientsPrefix); ok {
		id, _, _ := strings.Cut(inbox, "/")
		return id != "" // replies to any client's inbox
	}
	if _, _, ok := groupActionOf(topic); ok {
		return true // a group action: invoking (the policy decides)
	}
	if strings.HasPrefix(topic, lmos.GroupsPrefix) {
		// A Thing's, if it is a member (binding.groupAllowed).
		return self != "" && groupTopicOK(topic)
	}
	t, ok := parseThingTopic(topic)
	if !ok {
		return false
	}
	if strings.HasPrefix(t.rest, "credentials/") {
		return false // the hub's alone (credentials.go)
	}
	if self != "" && t.tid == self {
		return true // a Thing owns everything under its own topics
	}
	switch t.kind {
	case kindAction, kindPropertySet, kindTD:
		return true // invoking, writing, joining
	}
	return false
}

// mayRead is the SUBSCRIBE half of the ACL (PROTOCOL §4.4) for a client with
// id clientID authenticated as Thing self ("" for anonymous). filter is a
// topic filter, possibly shared ($share/{group}/…), or a topic name when
// mochi checks a delivery. A filter is allowed only when every topic it can
// match is readable, so wildcards at the wrong level are refused.
func mayRead(clientID, self, filter string) bool {
	f := filter
	if shared, ok := strings.CutPrefix(f, "$share/"); ok {
		var group string
		if group, f, ok = strings.Cut(shared, "/"); !ok || group == "" {
			return false
		}
	}
	rest, ok := strings.CutPrefix(f, lmos.TopicRoot)
	if !ok {
		return false
	}
	level, tail, _ := strings.Cut(rest, "/")
	switch level {
	case lmos.HubLevel:
		return true
	case lmos.ClientsLevel:
		id, _, _ := strings.Cut(tail, "/")
		return id == clientID && inboxOK(clientID)
	case lmos.GroupsLevel:
		// One group's channel, a Thing's if it is a member
		// (binding.groupAllowed); never a wildcard group level.
		return self != "" && groupTopicOK(filter)
	case lmos.ThingsLevel:
	default:
		return false // $SYS and the rest: nobody
	}
	tid, sub, ok := strings.Cut(tail, "/")
	if !ok || tid == "" || tid == "#" || (tid != "+" && strings.ContainsAny(tid, "+#")) {
		return false
	}
	owner := self != "" && tid == self
	switch sub {
	case "td", "td/result", "status":
		return true
	}
	kind, after, _ := strings.Cut(sub, "/")
	name, more, nested := strings.Cut(after, "/")
	if name == "" || name == "#" || (name != "+" && strings.ContainsAny(name, "+#")) {
		return false
	}
	switch {
	case (kind == "properties" || kind == "events") && !nested:
		return true
	case kind == "properties" && more == "set":
		return owner
	case kind == "actions" && !nested:
		return owner
	case kind == "credentials" && !nested:
		return owner // its membership credentials: the Thing alone
	}
	return false
}
