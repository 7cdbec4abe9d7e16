package mqtt

import (
	"encoding/json"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// mochi keeps only the User Properties of an MQTT 5 will: the Content
// Type, Response Topic, Correlation Data and Payload Format Indicator a
// client gave its will are not sent with it, which MQTT 5 §3.1.3.2 asks
// for. The hub carries them in one more user property, willKey, added at
// CONNECT and travelling with the will wherever mochi takes it (delayed,
// retained, stored); the encode hook turns it back into the properties.
// The Message Expiry Interval is not carried: mochi would not count it
// down.
const willKey = "lmos-hub-will-properties"

type willProps struct {
	ContentType   string `json:"ct,omitempty"`
	ResponseTopic string `json:"rt,omitempty"`
	Correlation   []byte `json:"cd,omitempty"`
	PayloadFormat *byte  `json:"pf,omitempty"`
}

// keepWillProperties adds willKey to the will of cl, parsed from pk. A
// willKey the client sent itself is dropped first, so no client sets
// what the hub restores; a Response Topic outside the reply inboxes is
// dropped as a PUBLISH with one would be refused (PROTOCOL §10).
func keepWillProperties(cl *mochi.Client, pk packets.Packet) {
	if !pk.Connect.WillFlag {
		return
	}
	user := withoutWillKey(cl.Properties.Will.User)
	wp := pk.Connect.WillProperties
	p := willProps{ContentType: wp.ContentType, Correlation: wp.CorrelationData}
	if replyTopicOK(wp.ResponseTopic) {
		p.ResponseTopic = wp.ResponseTopic
	}
	if wp.PayloadFormatFlag {
		f := wp.PayloadFormat
		p.PayloadFormat = &f
	}
	if pk.ProtocolVersion == 5 && (p.ContentType != "" || p.ResponseTopic != "" || len(p.Correlation) > 0 || p.PayloadFormat != nil) {
		b, err := json.Marshal(p)
		if err == nil {
			user = append(user, packets.UserProperty{Key: willKey, Val: string(b)})
		}
	}
	cl.Properties.Will.User = user
}

// restoreWillProperties turns willKey on a PUBLISH back into the will's
// properties. mochi writes every live delivery of a will, through the
// encode hook; the hub's own writes of a retained will (retained.go, on
// SUBSCRIBE) call it themselves.
func restoreWillProperties(pk *packets.Packet) {
	u := pk.Properties.User
	n := len(u)
	if n == 0 || u[n-1].Key != willKey {
		return
	}
	pk.Properties.User = u[: n-1 : n-1]
	var p willProps
	if json.Unmarshal([]byte(u[n-1].Val), &p) != nil {
		return
	}
	pk.Properties.ContentType = p.ContentType
	pk.Properties.ResponseTopic = p.ResponseTopic
	pk.Properties.CorrelationData = p.Correlation
	if p.PayloadFormat != nil {
		pk.Properties.PayloadFormat, pk.Properties.PayloadFormatFlag = *p.PayloadFormat, true
	}
}

// withoutWillKey returns user without any willKey property, allocating only
// when there is one to drop.
func withoutWillKey(user []packets.UserProperty) []packets.UserProperty {
	for i, u := range user {
		if u.Key == willKey {
			out := append([]packets.UserProperty(nil), user[:i]...)
			for _, u := range user[i+1:] {
				if u.Key != willKey {
					out = append(out, u)
				}
			}
			return out
		}
	}
	return user
}
