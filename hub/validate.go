package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
)

// maxIDBytes is the longest Thing id accepted (PROTOCOL §1).
const maxIDBytes = 512

// ParseDocument decodes raw as one JSON object using json.Decoder with UseNumber (numbers stay json.Number,
// so re-marshalling keeps their text). Trailing data after the object is an error. Not an object (array,
// string, null…) is an error. Errors are *Error{Code: EINVALID, Message: "invalid JSON: <short reason>"}
// or "a Thing Description must be a JSON object". A document nested deeper than DefaultMaxDepth is
// refused (registry.maxDepth); a door parses with its Registry's Decoder, which has the configured limit.
func ParseDocument(raw []byte) (map[string]any, error) { return parseDocument(raw, DefaultMaxDepth) }

func parseDocument(raw []byte, maxDepth int) (map[string]any, error) {
	doc, err := parseObject(raw, maxDepth)
	if err != nil {
		return nil, err
	}
	if err := duplicateMember(raw); err != nil {
		return nil, err
	}
	return doc, nil
}

// parseObject is parseDocument without the check for a member name twice
// in one object (duplicateMember).
func parseObject(raw []byte, maxDepth int) (map[string]any, error) {
	// encoding/json silently replaces invalid UTF-8 with U+FFFD, so the parsed
	// document (and its id) could differ from the raw bytes the store keeps.
	// RFC 8259 requires UTF-8 anyway.
	if !utf8.Valid(raw) {
		return nil, invalidJSONError("not valid UTF-8")
	}
	if err := checkDepthLimit(raw, maxDepth); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalidJSONError(jsonErrorReason(err))
	}
	// Anything but whitespace after the value is an error: Token returns
	// io.EOF only when the input is exhausted.
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		rest := bytes.TrimLeft(raw[end:], " \t\r\n")
		return nil, invalidJSONError(fmt.Sprintf("trailing data after the document at offset %d", len(raw)-len(rest)))
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, notObjectError(errNotObject, v)
	}
	return doc, nil
}

// duplicateMember refuses raw when a member name occurs twice in one of
// its objects, naming the second occurrence.
func duplicateMember(raw []byte) error {
	if ptr, dup := jsonx.DuplicateMember(raw); dup {
		return &Error{Code: EINVALID, Message: "invalid JSON: a member name occurs twice in one object",
			Fields: []FieldError{{Field: ptr, Description: "occurs more than once in its object"}}}
	}
	return nil
}

// errNotObject is the message for a document that is valid JSON but not an
// object; callers recognise it to say what kind of object they expected.
const errNotObject = "a Thing Description must be a JSON object"

// notObjectError refuses a document that is valid JSON but not an object,
// with a validationErrors entry at the root (WoT Discovery
// tdd-validation-response: every validation failure names where).
func notObjectError(msg string, v any) *Error {
	kind := "null"
	switch v.(type) {
	case []any:
		kind = "an array"
	case string:
		kind = "a string"
	case json.Number, float64:
		kind = "a number"
	case bool:
		kind = "a boolean"
	}
	return &Error{Code: EINVALID, Message: msg,
		Fields: []FieldError{{Field: "", Description: "must be a JSON object, not " + kind}}}
}

func invalidJSONError(reason string) *Error {
	return Errorf(EINVALID, "invalid JSON: %s", reason)
}

// jsonErrorReason shortens a decoder error to something safe and useful for a
// client: the syntax message with its offset, without Go type names.
func jsonErrorReason(err error) string {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("%s at offset %d", se.Error(), se.Offset)
	case errors.Is(err, io.EOF):
		return "empty document"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of input"
	default:
		return err.Error()
	}
}

// ValidateID checks a Thing id per PROTOCOL §1: non-empty, at most 512 bytes, valid UTF-8, no NUL/control
// characters (U+0000–U+001F, U+007F, and C1 U+0080–U+009F), an absolute URI (has a scheme per RFC 3986:
// ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":" …), no spaces. Returns *Error{Code: EINVALID, Message: "invalid Thing id: <why>"} .
func ValidateID(id string) error {
	if why := idProblem(id); why != "" {
		return Errorf(EINVALID, "invalid Thing id: %s", why)
	}
	return nil
}

// idProblem returns why id is not acceptable, or "". It is shared by
// ValidateID and Validate so both word problems the same way.
func idProblem(id string) string {
	if id == "" {
		return "must not be empty"
	}
	if len(id) > maxIDBytes {
		return fmt.Sprintf("must be at most %d bytes", maxIDBytes)
	}
	if !utf8.ValidString(id) {
		return "must be valid UTF-8"
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return fmt.Sprintf("must not contain control characters (found U+%04X)", r)
		}
		// Any Unicode space, not only U+0020: ids end up in MQTT topics,
		// URL paths and logs, where invisible separators cause confusion.
		if unicode.IsSpace(r) {
			return "must not contain spaces"
		}
	}
	if !hasURIScheme(id) {
		return "must be an absolute URI with a scheme (such as urn:, did: or https:)"
	}
	return ""
}

// hasURIScheme reports whether s starts with an RFC 3986 scheme followed by ':'
// and something after it ("urn:" alone names nothing).
func hasURIScheme(s string) bool {
	colon := strings.IndexByte(s, ':')
	if colon < 1 || colon == len(s)-1 {
		return false
	}
	for i := 0; i < colon; i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// Validate checks a parsed TD against PROTOCOL §2 (the LMOS profile of TD 1.1) and returns nil or an
// *Error{Code: EINVALID, Message: "invalid Thing Description", Fields: [...]} listing EVERY problem found,
// each FieldError.Field a JSON pointer (RFC 6901, with ~0 ~1 escaping) to the offending member (or to where
// a missing member should be, e.g. "/title"), sorted by Field for stable output.
//
// It checks the rules the hub relies on in Go, then the whole document against
// the official W3C TD 1.1 JSON Schema (tdschema.go; WoT Discovery
// tdd-validation-jsonschema). Where both find a problem at one member, the Go
// rule's message is kept. Unknown members and lmos:* terms (except
// lmos:capabilities being an array) pass both: the schema allows additional
// members, which is how registration (WoT Discovery) and LMOS terms travel.
func Validate(doc map[string]any) error {
	var v tdValidator
	v.context(doc)
	v.types(doc)
	if id, ok := doc["id"]; ok {
		if s, isStr := id.(string); !isStr {
			v.add("/id", "must be a string")
		} else if why := idProblem(s); why != "" {
			v.add("/id", why)
		}
	}
	v.requiredString(doc, "", "title")
	v.optionalString(doc, "", "description")
	v.stringMap(doc, "titles")
	v.stringMap(doc, "descriptions")
	v.security(doc)
	for _, kind := range []string{"properties", "actions", "events"} {
		v.affordances(doc, kind)
	}
	v.hrefList(doc, "forms")
	v.hrefList(doc, "links")
	v.registration(doc)
	if c, ok := doc["lmos:capabilities"]; ok {
		if _, isArr := c.([]any); !isArr {
			v.add("/lmos:capabilities", "must be an array")
		}
	}
	v.fields = mergeSchemaErrors(v.fields, schemaErrors(doc))
	if len(v.fields) == 0 {
		return nil
	}
	// Map iteration order is random; sorting makes responses and tests stable.
	slices.SortStableFunc(v.fields, func(a, b FieldError) int { return strings.Compare(a.Field, b.Field) })
	return &Error{Code: EINVALID, Message: "invalid Thing Description", Fields: v.fields}
}

// tdValidator collects every problem instead of stopping at the first, so a
// client can fix a document in one round trip.
type tdValidator struct {
	fields []FieldError
}

func (v *tdValidator) add(field, desc string) {
	v.fields = append(v.fields, FieldError{Field: field, Description: desc})
}

func isTDContextURI(v any) bool {
	s, ok := v.(string)
	return ok && (s == ContextTD11 || s == ContextTD10)
}

func (v *tdValidator) context(doc map[string]any) {
	const want = "must be the TD 1.1 context " + ContextTD11 + " or the TD 1.0 context " + ContextTD10
	c, ok := doc["@context"]
	if !ok {
		v.add("/@context", "is required")
		return
	}
	switch c := c.(type) {
	case string:
		if !isTDContextURI(c) {
			v.add("/@context", want)
		}
	case []any:
		if len(c) == 0 {
			v.add("/@context", "must not be empty")
			return
		}
		if !isTDContextURI(c[0]) {
			v.add("/@context/0", want)
		}
		for i := 1; i < len(c); i++ {
			switch c[i].(type) {
			case string, map[string]any:
			default:
				v.add(jsonx.PointerIndex("/@context", i), "must be a string or an object")
			}
		}
	default:
		v.add("/@context", "must be a string or an array")
	}
}

func (v *tdValidator) types(doc map[string]any) {
	t, ok := doc["@type"]
	if !ok {
		return
	}
	switch t := t.(type) {
	case string:
	case []any:
		for i, e := range t {
			if _, isStr := e.(string); !isStr {
				v.add(jsonx.PointerIndex("/@type", i), "must be a string")
			}
		}
	default:
		v.add("/@type", "must be a string or an array of strings")
	}
}

// requiredString checks obj[key] (obj at pointer base) is a non-empty string.
func (v *tdValidator) requiredString(obj map[string]any, base, key string) {
	p := jsonx.PointerAppend(base, key)
	val, ok := obj[key]
	if !ok {
		v.add(p, "is required")
		return
	}
	s, isStr := val.(string)
	switch {
	case !isStr:
		v.add(p, "must be a string")
	case s == "":
		v.add(p, "must not be empty")
	}
}

func (v *tdValidator) optionalString(obj map[string]any, base, key string) {
	if val, ok := obj[key]; ok {
		if _, isStr := val.(string); !isStr {
			v.add(jsonx.PointerAppend(base, key), "must be a string")
		}
	}
}

// stringMap checks a multi-language map such as titles: {"en": "…"}.
func (v *tdValidator) stringMap(doc map[string]any, key string) {
	val, ok := doc[key]
	if !ok {
		return
	}
	p := jsonx.PointerAppend("", key)
	m, isObj := val.(map[string]any)
	if !isObj {
		v.add(p, "must be an object")
		return
	}
	for lang, s := range m {
		if _, isStr := s.(string); !isStr {
			v.add(jsonx.PointerAppend(p, lang), "must be a string")
		}
	}
}

func (v *tdValidator) security(doc map[string]any) {
	// defs stays nil unless securityDefinitions is an object: without one,
	// every security name would be "undefined", which only adds noise.
	var defs map[string]any
	switch sd, ok := doc["securityDefinitions"]; {
	case !ok:
		v.add("/securityDefinitions", "is required")
	default:
		m, isObj := sd.(map[string]any)
		if !isObj {
			v.add("/securityDefinitions", "must be an object")
			break
		}
		defs = m
		if len(m) == 0 {
			v.add("/securityDefinitions", "must define at least one security scheme")
		}
		for name, def := range m {
			p := jsonx.PointerAppend("/securityDefinitions", name)
			d, isObj := def.(map[string]any)
			if !isObj {
				v.add(p, "must be an object")
				continue
			}
			v.requiredString(d, p, "scheme")
		}
	}

	checkName := func(p string, name any) {
		s, isStr := name.(string)
		if !isStr {
			v.add(p, "must be a string")
			return
		}
		if defs == nil {
			return
		}
		if _, defined := defs[s]; !defined {
			v.add(p, strconv.Quote(s)+" is not defined in securityDefinitions")
		}
	}
	sec, ok := doc["security"]
	if !ok {
		v.add("/security", "is required")
		return
	}
	switch sec := sec.(type) {
	case string:
		checkName("/security", sec)
	case []any:
		if len(sec) == 0 {
			v.add("/security", "must name at least one security definition")
		}
		for i, name := range sec {
			checkName(jsonx.PointerIndex("/security", i), name)
		}
	default:
		v.add("/security", "must be a string or an array of strings")
	}
}

// affordances checks doc[kind] (properties, actions or events): every
// affordance must carry at least one form with an href, or nobody can use it.
func (v *tdValidator) affordances(doc map[string]any, kind string) {
	val, ok := doc[kind]
	if !ok {
		return
	}
	p := jsonx.PointerAppend("", kind)
	m, isObj := val.(map[string]any)
	if !isObj {
		v.add(p, "must be an object")
		return
	}
	for name, aff := range m {
		ap := jsonx.PointerAppend(p, name)
		a, isObj := aff.(map[string]any)
		if !isObj {
			v.add(ap, "must be an object")
			continue
		}
		fp := jsonx.PointerAppend(ap, "forms")
		forms, ok := a["forms"]
		if !ok {
			v.add(fp, "is required")
			continue
		}
		arr, isArr := forms.([]any)
		switch {
		case !isArr:
			v.add(fp, "must be an array")
		case len(arr) == 0:
			v.add(fp, "must not be empty")
		default:
			v.hrefEntries(fp, arr)
		}
	}
}

// hrefList checks the optional top-level forms or links arrays.
func (v *tdValidator) hrefList(doc map[string]any, key string) {
	val, ok := doc[key]
	if !ok {
		return
	}
	p := jsonx.PointerAppend("", key)
	arr, isArr := val.([]any)
	if !isArr {
		v.add(p, "must be an array")
		return
	}
	v.hrefEntries(p, arr)
}

// hrefEntries checks that each entry of a forms or links array is an object
// with a non-empty string href (an empty href points nowhere useful).
func (v *tdValidator) hrefEntries(base string, arr []any) {
	for i, e := range arr {
		ep := jsonx.PointerIndex(base, i)
		obj, isObj := e.(map[string]any)
		if !isObj {
			v.add(ep, "must be an object")
			continue
		}
		v.requiredString(obj, ep, "href")
	}
}

// MaxTTLSeconds bounds registration.ttl so that expiry arithmetic cannot
// overflow; a registration meant to last longer should omit the TTL.
const MaxTTLSeconds = 10 * 365 * 24 * 3600

// registration checks the WoT Discovery registration block the Registry
// reads for TTL and expiry.
func (v *tdValidator) registration(doc map[string]any) {
	val, ok := doc["registration"]
	if !ok {
		return
	}
	reg, isObj := val.(map[string]any)
	if !isObj {
		v.add("/registration", "must be an object")
		return
	}
	if ttl, ok := reg["ttl"]; ok {
		if n, isNum := jsonx.Number(ttl); !isNum {
			v.add("/registration/ttl", "must be a number")
		} else if n <= 0 {
			// A TTL of 0 would expire the Thing before anyone could read it;
			// like an expires that is already over it is refused (PROTOCOL §10).
			v.add("/registration/ttl", "must be greater than 0")
		} else if n > MaxTTLSeconds {
			v.add("/registration/ttl", fmt.Sprintf("must be at most %d seconds (10 years)", MaxTTLSeconds))
		}
	}
	// The TD schema does not know registration (a Discovery extension); the
	// hub sets created, modified and retrieved itself, but a client's value
	// of the wrong kind is still an error in the document (tdd-validation-jsonschema).
	for _, key := range []string{"created", "modified", "retrieved"} {
		if val, ok := reg[key]; ok {
			if s, isStr := val.(string); !isStr {
				v.add("/registration/"+key, "must be a string")
			} else if _, err := ParseDateTime(s); err != nil {
				v.add("/registration/"+key, "must be an RFC 3339 date-time")
			}
		}
	}
	if exp, ok := reg["expires"]; ok {
		s, isStr := exp.(string)
		if !isStr {
			v.add("/registration/expires", "must be a string")
		} else if _, err := ParseDateTime(s); err != nil {
			v.add("/registration/expires", "must be an RFC 3339 date-time")
		}
	}
}

// ParseDateTime reads an RFC 3339 date-time. RFC 3339 §5.6 lets the "T"
// separator and the "Z" offset be lower case, which time.RFC3339 refuses,
// so they are upper-cased first; nothing else is changed, so every other
// malformed value still fails.
func ParseDateTime(s string) (time.Time, error) {
	if len(s) > 10 && s[10] == 't' {
		s = s[:10] + "T" + s[11:]
	}
	if n := len(s); n > 0 && s[n-1] == 'z' {
		s = s[:n-1] + "Z"
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("not an RFC 3339 date-time: %w", err)
	}
	return t, nil
}
