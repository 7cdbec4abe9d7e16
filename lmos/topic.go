package lmos

import (
	"net/url"
	"strings"
)

// The MQTT topic layout (PROTOCOL §4.1): every topic starts with
// TopicRoot; a Thing's topics with ThingsPrefix and its topic key; reply
// inboxes with ClientsPrefix and the client id; the hub's own topics are
// HubStatusTopic and HubEventsTopic.
const (
	TopicRoot      = "lmos/v1/"
	ThingsPrefix   = TopicRoot + ThingsLevel + "/"
	ClientsPrefix  = TopicRoot + ClientsLevel + "/"
	HubStatusTopic = TopicRoot + HubLevel + "/status"
	HubEventsTopic = TopicRoot + HubLevel + "/events"

	// The topic levels under TopicRoot.
	ThingsLevel  = "things"
	ClientsLevel = "clients"
	HubLevel     = "hub"
)

// TopicKey returns the topic key {tid} of a Thing id (PROTOCOL §1): the id
// with '%', '/', '+' and '#' percent-encoded in upper-case hex, everything
// else unchanged.
func TopicKey(id string) string {
	if !strings.ContainsAny(id, "%/+#") {
		return id
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(id) + 8)
	for i := 0; i < len(id); i++ {
		switch c := id[i]; c {
		case '%', '/', '+', '#':
			// '%' is encoded too, or keys of different ids could collide.
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// IDOfTopicKey is the inverse of TopicKey. Only a canonical key (the one
// TopicKey gives) is accepted, so one Thing has exactly one set of topics;
// whether the id is a valid Thing id is the caller's question.
func IDOfTopicKey(tid string) (string, bool) {
	id, err := url.PathUnescape(tid)
	if err != nil || TopicKey(id) != tid {
		return "", false
	}
	return id, true
}

// ThingTopic is lmos/v1/things/{tid}/{rest}.
func ThingTopic(id, rest string) string { return ThingsPrefix + TopicKey(id) + "/" + rest }

// ThingPath is the path of a Thing in the directory API, the id escaped as
// one path segment (PROTOCOL §1).
func ThingPath(id string) string { return "/things/" + url.PathEscape(id) }
