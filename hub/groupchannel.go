package hub

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Group channels (PROTOCOL §7): lmos/v1/groups/{gid}/{rest…}, open to the
// group's members only, on every door. The MQTT broker carries them; the
// WebSocket gateway and HTTP SSE reach its members through GroupChannels,
// so a member on any door shares one channel with the others.

// MaxGroupTopic bounds the part of a group channel's topic (or filter)
// below lmos/v1/groups/{gid}/ that the WebSocket and HTTP doors accept.
const MaxGroupTopic = 1024

// GroupMessage is one message on a group channel.
type GroupMessage struct {
	Group string
	// Topic is the whole topic, lmos/v1/groups/{gid}/{rest…}.
	Topic   string
	Payload []byte
	// ContentType is the message's MQTT 5 Content Type ("" when the
	// publisher set none: an MQTT 3.1.1 client, say).
	ContentType string
}

// GroupSubscription is a member's subscription to group channels, held by
// a door for one of its clients (a WebSocket connection, an SSE stream).
type GroupSubscription struct {
	Group string
	// Filter is below lmos/v1/groups/{gid}/ and may hold MQTT wildcards
	// (ValidGroupFilter).
	Filter string
	// Member is the Thing the client speaks for (MemberOf).
	Member string
	// Deliver is called with each message the member may receive, on the
	// publisher's goroutine: it must not block (queue or drop).
	Deliver func(GroupMessage)
	// Ended is called once when the membership ends (removal, dissolution,
	// the Thing deleted), in the registry's write loop before the change's
	// writer is answered: it must not block. The subscription is gone by
	// then; nothing is delivered after it.
	Ended func()
}

// GroupChannels carries group channels between the doors: the broker
// implements it, so WebSocket and SSE members reach MQTT members and one
// another.
type GroupChannels interface {
	// PublishGroup publishes payload on lmos/v1/groups/{gid}/{rest} for
	// the member from speaks for: EUNAUTHORIZED without an identity,
	// EFORBIDDEN when it is not a member, EINVALID for a bad topic.
	PublishGroup(gid, rest string, payload []byte, contentType string, from Principal) error
	// SubscribeGroup subscribes s until cancel or the end of s.Member's
	// membership (s.Ended); EFORBIDDEN when s.Member is not a member now.
	SubscribeGroup(s GroupSubscription) (cancel func(), err error)
}

// ChannelMember decides whether p may use group gid's channels and returns
// the member Thing it speaks for. isMember is the registry's IsMember.
// Only members may, whatever else p may do: EUNAUTHORIZED for a principal
// that speaks for no Thing and holds no token (or a token no longer
// valid), EFORBIDDEN for any other non-member (admin tokens included).
func (a *Access) ChannelMember(p Principal, gid string, isMember func(gid, thing string) bool) (string, error) {
	if a != nil && a.tokens != nil && p.Kind == ByToken {
		t, err := a.tokens.Recheck(p.Token)
		if err != nil {
			return "", err
		}
		p.Token = t
	}
	member := MemberOf(p)
	switch {
	case member == "" && p.Kind == Anonymous:
		return "", Errorf(EUNAUTHORIZED, "group %q's channels are for its members: authenticate as a member Thing (its MQTT credentials, its WebSocket registration, or a token bound to it)", gid)
	case member == "":
		return "", Errorf(EFORBIDDEN, "group %q's channels are for its members; %s speaks for no Thing (create a token bound to a member with --thing)", gid, p)
	case !isMember(gid, member):
		return "", Errorf(EFORBIDDEN, "%q is not a member of group %q", member, gid)
	}
	return member, nil
}

// ValidGroupTopic checks rest, a topic below lmos/v1/groups/{gid}/ that a
// member publishes on: 1–MaxGroupTopic bytes of UTF-8 without wildcards
// or NUL (MQTT topic names, §4.7).
func ValidGroupTopic(rest string) error {
	if err := groupTopicChars(rest, "/topic"); err != nil {
		return err
	}
	if strings.ContainsAny(rest, "+#") {
		return &Error{Code: EINVALID, Message: "a group channel to publish on has no wildcards",
			Fields: []FieldError{{Field: "/topic", Description: "must not contain + or #"}}}
	}
	return nil
}

// ValidGroupFilter checks rest, a filter below lmos/v1/groups/{gid}/ that a
// member subscribes to: as ValidGroupTopic, but '+' may stand for one
// whole level and '#' for the last level and everything below it.
func ValidGroupFilter(rest string) error {
	if err := groupTopicChars(rest, "/topic"); err != nil {
		return err
	}
	levels := strings.Split(rest, "/")
	for i, l := range levels {
		if (strings.Contains(l, "+") && l != "+") || (strings.Contains(l, "#") && (l != "#" || i != len(levels)-1)) {
			return &Error{Code: EINVALID, Message: "invalid group channel filter",
				Fields: []FieldError{{Field: "/topic", Description: "+ stands for a whole level, # only for the last one"}}}
		}
	}
	return nil
}

func groupTopicChars(rest, field string) error {
	if rest == "" || len(rest) > MaxGroupTopic || !utf8.ValidString(rest) || strings.ContainsRune(rest, 0) {
		return &Error{Code: EINVALID, Message: "invalid group channel topic",
			Fields: []FieldError{{Field: field, Description: "1–1024 bytes of UTF-8 without NUL, below " + lmos.GroupsPrefix + "{group}/"}}}
	}
	return nil
}

// MatchGroupFilter reports whether topic rest (below the group's prefix)
// matches filter (a valid ValidGroupFilter), by MQTT's rules (§4.7): '#'
// also matches its parent level. The rule is the wire's (lmos), shared
// with the agent library.
func MatchGroupFilter(filter, rest string) bool { return lmos.MatchGroupFilter(filter, rest) }

// Value is the message's payload for a client that reads media (JSON or
// CBOR), and the content type to tell it: the JSON or CBOR value the
// payload holds, transcoded with dec as the gateway does elsewhere, with the
// content type it was published with. A payload that is neither (another
// content type, or one that does not parse as the type it claims) is
// carried as bytes — a base64 string in JSON, a byte string in CBOR — with
// its content type, application/octet-stream when it had none (PROTOCOL
// §7). An empty payload has no value (nil).
func (m GroupMessage) Value(dec Decoder, media string) ([]byte, string) {
	mt := lmos.MediaType(m.ContentType)
	from := ""
	switch {
	case mt == "" || mt == lmos.MediaJSON || strings.HasSuffix(mt, "+json"):
		from = lmos.MediaJSON
	case lmos.MediaOf(mt) == lmos.MediaCBOR:
		from = lmos.MediaCBOR
	}
	if from != "" {
		if b, err := dec.Transcode(m.Payload, from, media); err == nil {
			return b, m.ContentType
		}
	}
	ct := m.ContentType
	if ct == "" || from != "" {
		ct = "application/octet-stream"
	}
	var b []byte
	if lmos.MediaOf(media) == lmos.MediaCBOR {
		b, _ = lmos.EncodeCBOR(m.Payload)
	} else {
		b, _ = json.Marshal(m.Payload)
	}
	return b, ct
}
