package lmos

import "strings"

// WSSubprotocol is the WebSocket subprotocol of the LMOS envelope
// (PROTOCOL §5).
const WSSubprotocol = "lmosprotocol"

// Message types of the LMOS WebSocket envelope (PROTOCOL §5), spelt as
// they are sent. A receiver compares them case-insensitively (kotlin-wot
// sends "subscribeevent"): WSMessageType gives the constant of any
// spelling.
const (
	WSReadProperty         = "readProperty"
	WSWriteProperty        = "writeProperty"
	WSObserveProperty      = "observeProperty"
	WSUnobserveProperty    = "unobserveProperty"
	WSInvokeAction         = "invokeAction"
	WSQueryAction          = "queryAction"
	WSCancelAction         = "cancelAction"
	WSSubscribeEvent       = "subscribeEvent"
	WSUnsubscribeEvent     = "unsubscribeEvent"
	WSSubscribeAllEvents   = "subscribeAllEvents"
	WSUnsubscribeAllEvents = "unsubscribeAllEvents"
	WSRegisterThing        = "registerThing"
	WSPropertyReading      = "propertyReading"
	WSActionStatus         = "actionStatus"
	WSEvent                = "event"
	WSAcknowledgement      = "acknowledgement"
	WSError                = "error"
)

var wsTypes = func() map[string]string {
	m := map[string]string{}
	for _, t := range []string{WSReadProperty, WSWriteProperty, WSObserveProperty, WSUnobserveProperty,
		WSInvokeAction, WSQueryAction, WSCancelAction, WSSubscribeEvent, WSUnsubscribeEvent,
		WSSubscribeAllEvents, WSUnsubscribeAllEvents, WSRegisterThing, WSPropertyReading,
		WSActionStatus, WSEvent, WSAcknowledgement, WSError,
		// groups (group.go)
		WSSubscribeGroup, WSUnsubscribeGroup, WSPublishGroup, WSGroupMessage, WSGroupCredential,
		WSInvokeGroupAction, WSGroupActionResult} {
		m[strings.ToLower(t)] = t
	}
	return m
}()

// WSMessageType returns the constant above of a messageType in any case;
// a type the envelope does not define comes back lower-cased.
func WSMessageType(s string) string {
	l := strings.ToLower(s)
	if t, ok := wsTypes[l]; ok {
		return t
	}
	return l
}

// Members of envelope messages (PROTOCOL §5). Receivers also accept the
// "…ID" spellings of the id members (the Alt constants).
const (
	MemberMessageType      = "messageType"
	MemberMessageID        = "messageId"
	MemberThingID          = "thingId"
	MemberCorrelationID    = "correlationId"
	MemberMessageIDAlt     = "messageID"
	MemberThingIDAlt       = "thingID"
	MemberCorrelationIDAlt = "correlationID"
	MemberTraceparent      = "traceparent"
	MemberTracestate       = "tracestate"
	MemberName             = "name"
	MemberProperty         = "property"
	MemberAction           = "action"
	MemberEvent            = "event"
	MemberValue            = "value"
	MemberData             = "data"
	MemberInput            = "input"
	MemberOutput           = "output"
	MemberStatus           = "status"
	MemberError            = "error"
	MemberMessage          = "message"
	MemberTimestamp        = "timestamp"
	MemberTD               = "td"
)
