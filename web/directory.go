package web

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
)

// directoryTD serves the hub's own Thing Description: a W3C WoT Thing
// Directory whose base is the URL the request came to, so the same TD works
// from every interface and name the hub is reached by.
func (s *Server) directoryTD(w http.ResponseWriter, r *http.Request) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host + "/"
	td := s.directoryDoc(base)
	// The broker is reached at the host the request came to, like base.
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	var links []any
	if t := s.cfg.TLS; t != nil {
		// TLS first: a client that can use it should (PROTOCOL §10 "TLS").
		fp := t.Fingerprint()
		links = append(links, map[string]any{"rel": "lmos:broker", "href": "mqtts://" + net.JoinHostPort(host, strconv.Itoa(t.MQTTSPort)),
			lmos.MemberCertFingerprint: fp})
		if r.TLS == nil {
			links = append(links,
				map[string]any{"rel": "alternate", "href": "https://" + net.JoinHostPort(host, strconv.Itoa(t.HTTPSPort)) + lmos.DirectoryPath,
					"type": mtTD, lmos.MemberCertFingerprint: fp},
				map[string]any{"rel": "lmos:websocket", "href": "wss://" + net.JoinHostPort(host, strconv.Itoa(t.HTTPSPort)) + "/ws",
					"type": lmos.MediaJSON, "subprotocol": lmos.WSSubprotocol, lmos.MemberCertFingerprint: fp})
		}
	}
	if port := s.brokerPort(); port > 0 {
		links = append(links, map[string]any{"rel": "lmos:broker", "href": "mqtt://" + net.JoinHostPort(host, strconv.Itoa(port))})
	}
	own := td["links"].([]any)
	if r.TLS != nil && s.cfg.TLS != nil {
		for _, l := range own {
			if m := l.(map[string]any); m["rel"] == "lmos:websocket" {
				m[lmos.MemberCertFingerprint] = s.cfg.TLS.Fingerprint()
			}
		}
	}
	td["links"] = append(links, own...)
	if s.reg.CredentialIssuer() != nil {
		// Where verifiers read the status list of membership credentials.
		td["links"] = append(td["links"].([]any), map[string]any{"rel": "lmos:statusList",
			"href": strings.TrimPrefix(statusListPath(s.reg.StatusListGeneration()), "/"), "type": vc.MediaType})
	}
	if peers := s.peerLinks(); peers != nil {
		td["lmos:peers"] = peers
	}
	if s.cfg.Key == nil {
		writeJSON(w, http.StatusOK, mtTD, td)
		return
	}
	s.writeSignedTD(w, td)
}

// writeSignedTD answers with td signed by the hub's key (PROTOCOL §6). The
// proof's created is the hub's start: the document only changes with a
// restart or the name it is asked by, and Ed25519 signatures are
// deterministic, so the same request gets the same bytes.
func (s *Server) writeSignedTD(w http.ResponseWriter, td map[string]any) {
	b, err := json.Marshal(td)
	if err == nil {
		b, err = proof.Sign(b, s.cfg.Key, s.started)
	}
	if err != nil {
		s.log.Error("cannot sign the directory TD", "err", err)
		http.Error(w, "cannot sign the directory TD", http.StatusInternalServerError)
		return
	}
	writeBytes(w, http.StatusOK, mtTD, append(b, '\n'))
}

// TLSInfo describes the hub's TLS doors (web.Config.TLS).
type TLSInfo struct {
	HTTPSPort, MQTTSPort int
	// Only: the plain listeners are closed.
	Only bool
	// Fingerprint is the served certificate's (lmos.Fingerprint); it
	// changes when the certificate is reloaded.
	Fingerprint func() string
	// NotAfter is when the served certificate expires.
	NotAfter func() time.Time
}

func (s *Server) brokerPort() int { return s.cfg.BrokerPort }

// directoryDoc is the directory's own TD for base. Each affordance group
// is built by its own function below, in the order the TD lists them.
func (s *Server) directoryDoc(base string) map[string]any {
	td := obj(
		"@context", []any{hub.ContextTD11, hub.ContextDiscovery, obj("lmos", hub.ContextLMOS)},
		"@type", []any{"ThingDirectory"},
		"id", "urn:uuid:"+s.cfg.HubID,
		"title", s.cfg.HubName,
		"description", "lmos-hub: a W3C WoT Thing Description Directory for LMOS agents and tools",
		"version", obj("instance", s.cfg.Version),
		"base", base,
		"securityDefinitions", obj(
			"nosec_sc", obj("scheme", "nosec"),
			"bearer_sc", obj("scheme", "bearer", "in", "header", "name", "Authorization", "format", "opaque"),
		),
		"security", "nosec_sc",
		"properties", obj("things", directoryThings()),
		"actions", directoryActions(),
		"events", obj(
			// Named as in the W3C directory Thing Model; on the wire the SSE
			// event types stay thing_created/… (PROTOCOL §10).
			"thingCreated", sseEvent("A Thing Description was created", hub.EventCreated),
			"thingUpdated", sseEvent("A Thing Description was updated", hub.EventUpdated),
			"thingDeleted", sseEvent("A Thing Description was deleted", hub.EventDeleted),
		),
		"links", []any{
			obj("rel", "lmos:status", "href", "api/status", "type", lmos.MediaJSON),
			// Absolute: a ws:// URL cannot be relative to the http:// base.
			obj("rel", "lmos:websocket", "href", "ws"+strings.TrimPrefix(strings.TrimSuffix(base, "/"), "http")+"/ws",
				"type", lmos.MediaJSON, "subprotocol", lmos.WSSubprotocol),
		},
	)
	if s.access().Anonymous() == hub.AnonymousNone {
		td["security"] = "bearer_sc"
	}
	return td
}

// obj builds a TD object from key, value pairs, so that the documents
// below read in the order they are served.
func obj(kv ...any) map[string]any {
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// tdForm is an HTTP form of the directory TD; extra are more key, value
// pairs.
func tdForm(href, method, op string, extra ...any) map[string]any {
	return obj(append([]any{"href", href, "htv:methodName", method, "op", op}, extra...)...)
}

// tdProblem is the additionalResponses of every form: a problem document.
func tdProblem() []any {
	return []any{obj("success", false, "contentType", lmos.MediaProblem)}
}

// directoryThings is the things property: every TD, as an array or a
// ThingCollection.
func directoryThings() map[string]any {
	return obj(
		"description", "Retrieve all Thing Descriptions, in id order: format=array (the default) "+
			"answers an array of TDs, format=collection a ThingCollection object",
		"uriVariables", obj(
			"offset", obj("title", "Number of TDs to skip", "type", "integer", "minimum", 0),
			"limit", obj("title", "Number of TDs in a page", "type", "integer", "minimum", 1),
			"format", obj("title", "Payload format", "type", "string", "enum", []any{"array", "collection"}),
		),
		"readOnly", true,
		// One property, two shapes chosen by the format variable: the
		// schema says both rather than claim an array for a collection.
		"oneOf", []any{
			obj("title", "format=array", "type", "array", "items", obj("type", "object")),
			obj("title", "format=collection", "type", "object",
				"properties", obj(
					"@context", obj("type", "string"),
					"@type", obj("type", "string", "const", "ThingCollection"),
					"@id", obj("type", "string"),
					"total", obj("type", "integer", "minimum", 0),
					"members", obj("type", "array", "items", obj("type", "object")),
					"next", obj("type", "string"),
				),
				"required", []any{"@type", "total", "members"}),
		},
		"forms", []any{tdForm("things{?offset,limit,format}", "GET", "readproperty",
			"contentType", mtLDJSON, "additionalResponses", tdProblem())},
	)
}

// directoryActions are the directory's actions: the TD writes and reads by
// id, and the two searches.
func directoryActions() map[string]any {
	idVar := obj("id", obj("title", "Thing id", "type", "string", "format", "iri-reference"))
	writeSec := []any{"bearer_sc"}
	problem := tdProblem()
	return obj(
		"createThing", obj("description", "Create a Thing Description under its id",
			"uriVariables", idVar, "input", obj("type", "object"), "idempotent", true,
			"forms", []any{tdForm("things/{id}", "PUT", "invokeaction", "contentType", mtTD, "security", writeSec,
				"additionalResponses", problem)}),
		"createAnonymousThing", obj("description", "Create a Thing Description without id; the hub assigns one",
			"input", obj("type", "object"), "output", obj("description", "Location header: the id given", "type", "string"),
			"forms", []any{tdForm("things", "POST", "invokeaction", "contentType", mtTD, "security", writeSec,
				"additionalResponses", problem)}),
		"retrieveThing", obj("description", "Retrieve a Thing Description", "uriVariables", idVar,
			"output", obj("type", "object"), "safe", true, "idempotent", true,
			"forms", []any{tdForm("things/{id}", "GET", "invokeaction", "contentType", mtTD, "additionalResponses", problem)}),
		"updateThing", obj("description", "Replace a Thing Description", "uriVariables", idVar,
			"input", obj("type", "object"), "idempotent", true,
			"forms", []any{tdForm("things/{id}", "PUT", "invokeaction", "contentType", mtTD, "security", writeSec,
				"additionalResponses", problem)}),
		"partiallyUpdateThing", obj("description", "Update a Thing Description with a JSON merge patch", "uriVariables", idVar,
			"input", obj("type", "object"),
			"forms", []any{tdForm("things/{id}", "PATCH", "invokeaction", "contentType", mtMergePatch, "security", writeSec,
				"additionalResponses", problem)}),
		"deleteThing", obj("description", "Delete a Thing Description", "uriVariables", idVar, "idempotent", true,
			"forms", []any{tdForm("things/{id}", "DELETE", "invokeaction", "security", writeSec, "additionalResponses", problem)}),
		"searchJSONPath", obj("description", "Search Thing Descriptions with an RFC 9535 JSONPath query",
			"uriVariables", obj("query", obj("type", "string")), "output", obj("type", "array"), "safe", true, "idempotent", true,
			"forms", []any{tdForm("search/jsonpath{?query}", "GET", "invokeaction", "contentType", lmos.MediaJSON, "additionalResponses", problem)}),
		"lmos:searchText", obj("description", "Ranked capability search over titles, descriptions, affordances and lmos:capabilities (LMOS extension)",
			"uriVariables", obj("q", obj("type", "string"), "type", obj("type", "string"), "limit", obj("type", "integer", "minimum", 1)),
			"output", obj("type", "array"), "safe", true, "idempotent", true,
			"forms", []any{tdForm("search/text{?q,type,limit}", "GET", "invokeaction", "contentType", lmos.MediaJSON, "additionalResponses", problem)}),
	)
}

func sseEvent(desc string, t hub.EventType) map[string]any {
	name := string(t)
	return map[string]any{
		"description":  desc,
		"uriVariables": map[string]any{"diff": map[string]any{"type": "boolean"}},
		"data":         map[string]any{"type": "object"},
		"forms": []any{map[string]any{
			"href": "events/" + name + "{?diff}", "subprotocol": "sse",
			"contentType": "text/event-stream", "op": []any{"subscribeevent", "unsubscribeevent"},
			"htv:methodName": "GET",
		}},
	}
}
