package ws

import (
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/eclipse-lmos/lmos-hub/lmos"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Message types of the LMOS WebSocket envelope (PROTOCOL §5). An incoming
// messageType is read with lmos.WSMessageType, so the spec's camelCase and
// kotlin-wot's "subscribeevent" are the same message.
const (
	mtReadProperty        = lmos.WSReadProperty
	mtWriteProperty       = lmos.WSWriteProperty
	mtObserveProperty     = lmos.WSObserveProperty
	mtUnobserveProperty   = lmos.WSUnobserveProperty
	mtInvokeAction        = lmos.WSInvokeAction
	mtQueryAction         = lmos.WSQueryAction
	mtCancelAction        = lmos.WSCancelAction
	mtSubscribeEvent      = lmos.WSSubscribeEvent
	mtUnsubscribeEvent    = lmos.WSUnsubscribeEvent
	mtSubscribeAllEvents  = lmos.WSSubscribeAllEvents
	mtUnsubscribeAllEvent = lmos.WSUnsubscribeAllEvents
	mtRegisterThing       = lmos.WSRegisterThing
	mtPropertyReading     = lmos.WSPropertyReading
	mtActionStatus        = lmos.WSActionStatus
	mtEvent               = lmos.WSEvent
	mtAcknowledgement     = lmos.WSAcknowledgement
	mtError               = lmos.WSError
)

// Message types the hub sends.
const (
	outPropertyReading = lmos.WSPropertyReading
	outActionStatus    = lmos.WSActionStatus
	outEvent           = lmos.WSEvent
	outAcknowledgement = lmos.WSAcknowledgement
	outError           = lmos.WSError
)

// errUnparseable marks a frame that is not an envelope at all (close 1003),
// as opposed to an envelope with a wrong member (an error message).
var errUnparseable = errors.New("unparseable frame")

// wsMessage is one decoded envelope, whatever spelling it used.
type wsMessage struct {
	ThingID       string
	MessageID     string
	MessageType   string // lower-cased
	CorrelationID string
	Traceparent   string
	Tracestate    string
	// Name is the property, action or event (name, property, action or
	// event member, by message type).
	Name string
	// Value is input, data, value or output (by message type); HasValue
	// tells an absent member from null.
	Value    any
	HasValue bool
	// Status is an actionStatus's status.
	Status string
	TD     any
	// Problem is an error message's problem object (or a failed
	// actionStatus's "error" member), read by hub.ThingFailed; nil when
	// there is none.
	Problem map[string]any
	// Kotlin is set when the message used kotlin-wot's spelling
	// ("property" for the name, "data" for a property value): replies
	// then carry those members too, so kotlin-wot clients read them.
	Kotlin bool
	// Media is the payload encoding of the frame: MediaJSON for text,
	// MediaCBOR for binary frames.
	Media string
	// Group is the group of invokeGroupAction and of a group channel's
	// messages; Topic the channel (groups.go).
	Group, Topic string
}

// frameMedia is the payload encoding of a frame type.
func frameMedia(t websocket.MessageType) string {
	if t == websocket.MessageBinary {
		return lmos.MediaCBOR
	}
	return lmos.MediaJSON
}

// frameType is the frame type that carries media.
func frameType(media string) websocket.MessageType {
	if media == lmos.MediaCBOR {
		return websocket.MessageBinary
	}
	return websocket.MessageText
}

// decodeMessage decodes one frame: JSON text or CBOR binary (with the hub's
// CBOR limits) holding an object. A frame that does not decode to an object
// is errUnparseable; members of the wrong type are EINVALID. It is long
// because it checks each member of the envelope in turn.
func decodeMessage(dec hub.Decoder, frame []byte, media string) (*wsMessage, error) {
	// encoding/json would replace invalid UTF-8 silently (RFC 6455 requires
	// UTF-8 in text frames, coder/websocket does not check it).
	if media == lmos.MediaJSON && !utf8.Valid(frame) {
		return nil, errUnparseable
	}
	v, err := dec.DecodeValue(frame, media)
	if err != nil {
		return nil, errUnparseable
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errUnparseable
	}
	m := &wsMessage{Media: media}
	var bad []hub.FieldError
	str := func(keys ...string) string {
		for _, k := range keys {
			x, ok := obj[k]
			if !ok || x == nil {
				continue
			}
			s, ok := x.(string)
			if !ok {
				bad = append(bad, hub.FieldError{Field: "/" + k, Description: "must be a string"})
				return ""
			}
			return s
		}
		return ""
	}
	m.ThingID = str(lmos.MemberThingID, lmos.MemberThingIDAlt)
	m.MessageID = str(lmos.MemberMessageID, lmos.MemberMessageIDAlt)
	m.MessageType = lmos.WSMessageType(str(lmos.MemberMessageType))
	m.CorrelationID = str(lmos.MemberCorrelationID, lmos.MemberCorrelationIDAlt)
	m.Traceparent = str(lmos.MemberTraceparent)
	m.Tracestate = str(lmos.MemberTracestate)
	value := func(keys ...string) {
		for _, k := range keys {
			if x, ok := obj[k]; ok {
				m.Value, m.HasValue = x, true
				m.Kotlin = m.Kotlin || k == lmos.MemberData && m.MessageType != mtEvent
				return
			}
		}
	}
	_, m.Kotlin = obj[lmos.MemberProperty]
	switch m.MessageType {
	case mtReadProperty, mtObserveProperty, mtUnobserveProperty:
		m.Name = str(lmos.MemberName, lmos.MemberProperty)
	case mtWriteProperty:
		m.Name = str(lmos.MemberName, lmos.MemberProperty)
		value(lmos.MemberValue, lmos.MemberData)
	case mtPropertyReading:
		m.Name = str(lmos.MemberName, lmos.MemberProperty)
		value(lmos.MemberValue, lmos.MemberData)
	case mtInvokeAction, mtQueryAction, mtCancelAction:
		m.Name = str(lmos.MemberAction, lmos.MemberName)
		value(lmos.MemberInput)
	case mtActionStatus:
		m.Name = str(lmos.MemberAction, lmos.MemberName)
		m.Status = str(lmos.MemberStatus)
		value(lmos.MemberOutput)
		if p, ok := obj[lmos.MemberError].(map[string]any); ok {
			m.Problem = p
		}
	case mtSubscribeEvent, mtUnsubscribeEvent, mtEvent:
		m.Name = str(lmos.MemberEvent, lmos.MemberName)
		value(lmos.MemberData)
	case lmos.WSInvokeGroupAction:
		m.Group = str(lmos.MemberGroup)
		m.Name = str(lmos.MemberAction)
		value(lmos.MemberInput)
	case mtRegisterThing:
		m.TD = obj[lmos.MemberTD]
	case mtError:
		m.Problem = obj
	case lmos.WSSubscribeGroup, lmos.WSUnsubscribeGroup, lmos.WSPublishGroup:
		m.Group, m.Topic = str(lmos.MemberGroup), str(lmos.MemberTopic)
		m.Value, m.HasValue = obj[lmos.MemberData]
	}
	if m.MessageType == "" && len(bad) == 0 {
		bad = append(bad, hub.FieldError{Field: "/messageType", Description: "is required"})
	}
	if len(bad) > 0 {
		return m, &hub.Error{Code: hub.EINVALID, Message: "the message has invalid members", Fields: bad}
	}
	return m, nil
}

// problemMember reads a peer's problem object (see hub.PeerProblem).
func problemMember(obj map[string]any) *lmos.Problem {
	p := lmos.PeerProblem(obj)
	return &p
}

// rawValue is a payload already encoded in the frame's encoding; it is
// embedded as is in JSON and in CBOR.
type rawValue []byte

func (r rawValue) MarshalJSON() ([]byte, error) { return r, nil }

// IsZero makes omitzero drop an empty payload (no value), in JSON and CBOR.
func (r rawValue) IsZero() bool                 { return len(r) == 0 }
func (r rawValue) MarshalCBOR() ([]byte, error) { return r, nil }

// wsOut is a message the hub sends, in camelCase (PROTOCOL §5); members
// are omitted when empty. The json tags spell lmos's Member constants (a
// tag cannot name a constant). Status is a string in actionStatus and a number
// in error.
type wsOut struct {
	ThingID       string `json:"thingId,omitempty"`
	MessageID     string `json:"messageId"`
	MessageType   string `json:"messageType"`
	CorrelationID string `json:"correlationId,omitempty"`
	Traceparent   string `json:"traceparent,omitempty"`
	Tracestate    string `json:"tracestate,omitempty"`

	Name     string `json:"name,omitempty"`
	Property string `json:"property,omitempty"`
	Action   string `json:"action,omitempty"`
	Event    string `json:"event,omitempty"`
	Member   string `json:"member,omitempty"` // groupActionResult

	Value  rawValue `json:"value,omitzero"`
	Data   rawValue `json:"data,omitzero"`
	Input  rawValue `json:"input,omitzero"`
	Output rawValue `json:"output,omitzero"`

	// Group: groupCredential (credentials.go), groupActionResult, groupMessage;
	// Credential: groupCredential; Topic and ContentType: groupMessage (groups.go).
	Group       string   `json:"group,omitempty"`
	Credential  rawValue `json:"credential,omitzero"`
	Topic       string   `json:"topic,omitempty"`
	ContentType string   `json:"contentType,omitempty"`

	Status    any           `json:"status,omitempty"`
	Error     *lmos.Problem `json:"error,omitempty"`
	Message   string        `json:"message,omitempty"`
	Timestamp string        `json:"timestamp,omitempty"`

	Type             string           `json:"type,omitempty"`
	Title            string           `json:"title,omitempty"`
	Detail           string           `json:"detail,omitempty"`
	Instance         string           `json:"instance,omitempty"`
	ValidationErrors []hub.FieldError `json:"validationErrors,omitempty"`
}

// encode serialises m in media; payloads in m must be in media already.
func (m *wsOut) encode(media string) ([]byte, error) {
	if media == lmos.MediaCBOR {
		return lmos.EncodeCBOR(m)
	}
	return json.Marshal(m)
}

// setProblem makes m an error message carrying p.
func (m *wsOut) setProblem(p lmos.Problem) {
	m.MessageType = outError
	m.Type, m.Title, m.Status, m.Detail, m.Instance = p.Type, p.Title, p.Status, p.Detail, p.Instance
	m.ValidationErrors = p.ValidationErrors
}
