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
// is errUnparseable; members of the wrong type are EINVALID.
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
	// On the stack: reading the members costs no allocation beyond m and
	// the errors it reports.
	e := envelope{obj: obj, m: m}
	m.ThingID = e.str(lmos.MemberThingID, lmos.MemberThingIDAlt)
	m.MessageID = e.str(lmos.MemberMessageID, lmos.MemberMessageIDAlt)
	m.MessageType = lmos.WSMessageType(e.str(lmos.MemberMessageType))
	m.CorrelationID = e.str(lmos.MemberCorrelationID, lmos.MemberCorrelationIDAlt)
	m.Traceparent = e.str(lmos.MemberTraceparent)
	m.Tracestate = e.str(lmos.MemberTracestate)
	_, m.Kotlin = obj[lmos.MemberProperty]
	e.typed()
	if m.MessageType == "" && len(e.bad) == 0 {
		e.bad = append(e.bad, hub.FieldError{Field: "/messageType", Description: "is required"})
	}
	if len(e.bad) > 0 {
		return m, &hub.Error{Code: hub.EINVALID, Message: "the message has invalid members", Fields: e.bad}
	}
	return m, nil
}

// envelope reads the members of one decoded frame into m, whatever
// spelling the peer used, and collects the members of a wrong type.
type envelope struct {
	obj map[string]any
	m   *wsMessage
	bad []hub.FieldError
}

// str is the first of keys present and not null, which must be a string.
func (e *envelope) str(keys ...string) string {
	for _, k := range keys {
		x, ok := e.obj[k]
		if !ok || x == nil {
			continue
		}
		s, ok := x.(string)
		if !ok {
			e.bad = append(e.bad, hub.FieldError{Field: "/" + k, Description: "must be a string"})
			return ""
		}
		return s
	}
	return ""
}

// value sets m's value from the first of keys present; kotlin-wot's
// "data" for a property value marks the message Kotlin.
func (e *envelope) value(keys ...string) {
	m := e.m
	for _, k := range keys {
		if x, ok := e.obj[k]; ok {
			m.Value, m.HasValue = x, true
			m.Kotlin = m.Kotlin || k == lmos.MemberData && m.MessageType != mtEvent
			return
		}
	}
}

// typed reads the members that m's message type has.
func (e *envelope) typed() {
	m, obj := e.m, e.obj
	switch m.MessageType {
	case mtReadProperty, mtObserveProperty, mtUnobserveProperty:
		m.Name = e.str(lmos.MemberName, lmos.MemberProperty)
	case mtWriteProperty:
		m.Name = e.str(lmos.MemberName, lmos.MemberProperty)
		e.value(lmos.MemberValue, lmos.MemberData)
	case mtPropertyReading:
		m.Name = e.str(lmos.MemberName, lmos.MemberProperty)
		e.value(lmos.MemberValue, lmos.MemberData)
	case mtInvokeAction, mtQueryAction, mtCancelAction:
		m.Name = e.str(lmos.MemberAction, lmos.MemberName)
		e.value(lmos.MemberInput)
	case mtActionStatus:
		m.Name = e.str(lmos.MemberAction, lmos.MemberName)
		m.Status = e.str(lmos.MemberStatus)
		e.value(lmos.MemberOutput)
		if p, ok := obj[lmos.MemberError].(map[string]any); ok {
			m.Problem = p
		}
	case mtSubscribeEvent, mtUnsubscribeEvent, mtEvent:
		m.Name = e.str(lmos.MemberEvent, lmos.MemberName)
		e.value(lmos.MemberData)
	case lmos.WSInvokeGroupAction:
		m.Group = e.str(lmos.MemberGroup)
		m.Name = e.str(lmos.MemberAction)
		e.value(lmos.MemberInput)
	case mtRegisterThing:
		m.TD = obj[lmos.MemberTD]
	case mtError:
		m.Problem = obj
	case lmos.WSSubscribeGroup, lmos.WSUnsubscribeGroup, lmos.WSPublishGroup:
		m.Group, m.Topic = e.str(lmos.MemberGroup), e.str(lmos.MemberTopic)
		m.Value, m.HasValue = obj[lmos.MemberData]
	}
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
