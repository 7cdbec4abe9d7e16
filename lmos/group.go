package lmos

import (
	"net/url"
	"strings"
)

// Agent groups on the wire (PROTOCOL §7). A group id is one topic level
// and one URL path segment (letters, digits, '.', '_', '-'), so it needs
// no escaping.
const (
	GroupsLevel  = "groups"
	GroupsPrefix = TopicRoot + GroupsLevel + "/"
)

// GroupTopic is a group channel: lmos/v1/groups/{gid}/{rest}.
func GroupTopic(gid, rest string) string { return GroupsPrefix + gid + "/" + rest }

// GroupOfTopic returns the group id of a topic or filter under
// GroupsPrefix (the level after it, which may be a wildcard) and whether
// the topic is under GroupsPrefix at all.
func GroupOfTopic(topic string) (gid string, ok bool) {
	rest, ok := strings.CutPrefix(topic, GroupsPrefix)
	if !ok {
		return "", false
	}
	gid, _, _ = strings.Cut(rest, "/")
	return gid, true
}

// MatchGroupFilter reports whether topic rest (below a group's prefix
// lmos/v1/groups/{gid}/) matches filter, by MQTT's rules (§4.7): '+' one
// whole level, '#' the last level and everything below it, its parent
// level too. The hub's group bus and the agent library both match with
// it.
func MatchGroupFilter(filter, rest string) bool {
	for {
		fl, frest, fok := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tok := strings.Cut(rest, "/")
		if fl != "+" && fl != tl {
			return false
		}
		switch {
		case !fok && !tok:
			return true
		case !fok:
			return false
		case !tok:
			return frest == "#"
		}
		filter, rest = frest, trest
	}
}

// CredentialTopic is a Thing's membership-credential inbox for group gid:
// lmos/v1/things/{tid}/credentials/{gid} (hub → that Thing only).
func CredentialTopic(thingID, gid string) string { return ThingTopic(thingID, "credentials/"+gid) }

// GroupActionTopic is where an MQTT 5 client asks the hub to invoke an
// action on every member of a group (request/response, §4.3):
// lmos/v1/hub/groups/{gid}/actions/{name}.
func GroupActionTopic(gid, action string) string {
	return TopicRoot + HubLevel + "/" + GroupsLevel + "/" + gid + "/actions/" + action
}

// WebSocket envelope messages of groups (a hub extension, PROTOCOL §5/§7).
const (
	// Consumer/agent → hub: a group channel (member only). Members:
	// "group", "topic" (the channel below lmos/v1/groups/{gid}/; MQTT
	// wildcards allowed when subscribing), "data" when publishing.
	WSSubscribeGroup   = "subscribeGroup"
	WSUnsubscribeGroup = "unsubscribeGroup"
	WSPublishGroup     = "publishGroup"
	// Hub → member: one message on a group channel ("group", "topic", "data").
	WSGroupMessage = "groupMessage"
	// Hub → agent: its membership credential ("group", "credential").
	WSGroupCredential = "groupCredential"
	// Consumer → hub: invoke an action on every member ("group", "action",
	// "input"); hub → consumer: one result per member ("group", "action",
	// "member", "status", "output" or "error"), then an acknowledgement.
	WSInvokeGroupAction = "invokeGroupAction"
	WSGroupActionResult = "groupActionResult"

	MemberGroup      = "group"
	MemberTopic      = "topic"
	MemberMember     = "member"
	MemberCredential = "credential"
)

// HTTP paths of membership credentials (PROTOCOL §7): the signed status
// list every credential names, and a member's credential.
const StatusListPath = "/credentials/status/memberships"

// CredentialPath is GET /api/groups/{gid}/members/{thing}/credential (the
// Thing id escaped as one path segment).
func CredentialPath(gid, thingID string) string {
	return "/api/groups/" + gid + "/members/" + url.PathEscape(thingID) + "/credential"
}

// Member of a groupMessage and of the SSE read of a group channel: the
// message's content type as published (PROTOCOL §7).
const MemberContentType = "contentType"
