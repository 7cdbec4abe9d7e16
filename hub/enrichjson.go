package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// AppendEnrichedJSON appends the enriched TD of t as JSON to dst, built from
// raw, the stored bytes of t: members keep their submitted order and their
// bytes (without insignificant whitespace), and only the hub's own members
// are encoded. This is what GET /things serves; it costs a fraction of
// marshalling the parsed document.
func (t *Thing) AppendEnrichedJSON(dst, raw []byte, now time.Time) []byte {
	members, err := topLevelMembers(raw)
	if err != nil {
		// Stored documents were parsed when accepted; should one not scan,
		// the parsed form still gives a correct answer.
		doc, perr := ParseDocument(raw)
		if perr != nil {
			doc = map[string]any{"id": t.ID}
		}
		b, _ := json.Marshal(t.Enriched(doc, now))
		return append(dst, b...)
	}
	dst = append(dst, '{')
	first := true
	sep := func() {
		if !first {
			dst = append(dst, ',')
		}
		first = false
	}
	for _, m := range members {
		switch string(m.key) { // no allocation: the compiler compares in place
		case "@context":
			b, ok := enrichedContextJSON(raw[m.valueStart:m.end])
			if !ok {
				continue
			}
			sep()
			dst = append(dst, `"@context":`...)
			dst = append(dst, b...)
		case "registration", "lmos:presence", "lmos:origin", "lmos:verified":
			// The hub's say replaces the client's.
		default:
			sep()
			dst = appendCompact(dst, raw[m.start:m.end])
		}
	}
	b, _ := json.Marshal(t.enrichment(now))
	if len(b) > 2 {
		sep()
		dst = append(dst, b[1:len(b)-1]...) // the members, without braces
	}
	return append(dst, '}')
}

// Most Things of a hub share a handful of @context values, so the enriched
// form of each is kept instead of decoded and encoded on every read. The
// cache is bounded in entries and in key size: a client cannot grow it.
const (
	ctxCacheEntries = 64
	ctxCacheKeyMax  = 512
)

var ctxCache struct {
	sync.RWMutex
	m map[string][]byte
}

// enrichedContextJSON is the JSON of enrichedContext for the @context value
// raw; false when raw is not JSON.
func enrichedContextJSON(raw []byte) ([]byte, bool) {
	ctxCache.RLock()
	b, ok := ctxCache.m[string(raw)] // no allocation for the lookup
	ctxCache.RUnlock()
	if ok {
		return b, true
	}
	var ctx any
	if json.Unmarshal(raw, &ctx) != nil {
		return nil, false
	}
	b, err := json.Marshal(enrichedContext(ctx))
	if err != nil {
		return nil, false
	}
	if len(raw) <= ctxCacheKeyMax {
		ctxCache.Lock()
		if ctxCache.m == nil {
			ctxCache.m = make(map[string][]byte, ctxCacheEntries)
		}
		if len(ctxCache.m) < ctxCacheEntries {
			ctxCache.m[string(raw)] = b
		}
		ctxCache.Unlock()
	}
	return b, true
}

type registrationJSON struct {
	Created   string      `json:"created"`
	Modified  string      `json:"modified"`
	Expires   string      `json:"expires,omitempty"`
	TTL       json.Number `json:"ttl,omitempty"`
	Retrieved string      `json:"retrieved"`
}

type presenceJSON struct {
	Status string `json:"status"`
	Since  string `json:"since"`
	Via    Source `json:"via,omitempty"`
}

// enrichmentJSON holds the members Enriched adds, in the order they follow
// the document's own members.
type enrichmentJSON struct {
	Registration registrationJSON `json:"registration"`
	Presence     presenceJSON     `json:"lmos:presence"`
	Origin       Origin           `json:"lmos:origin"`
	Verified     string           `json:"lmos:verified,omitempty"`
}

func (t *Thing) enrichment(now time.Time) enrichmentJSON {
	e := enrichmentJSON{
		Registration: registrationJSON{Created: formatTime(t.Meta.Created), Modified: formatTime(t.Meta.Modified), Retrieved: formatTime(now)},
		Presence:     presenceJSON{Status: t.Meta.Presence.Status, Since: formatTime(t.Meta.Presence.Since), Via: t.Meta.Presence.Via},
		Origin:       t.Meta.Origin,
		Verified:     t.Meta.Verified,
	}
	if !t.Meta.Expires.IsZero() {
		e.Registration.Expires = formatTime(t.Meta.Expires)
	}
	if t.Meta.TTL > 0 {
		e.Registration.TTL = json.Number(jsonInt(t.Meta.TTL))
	}
	return e
}

type jsonMember struct {
	key        []byte
	start      int // the opening quote of the key
	valueStart int
	end        int // just after the value
}

var errScan = errors.New("not a JSON object")

// topLevelMembers finds the members of the JSON object raw without
// decoding their values.
func topLevelMembers(raw []byte) ([]jsonMember, error) {
	i := skipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, errScan
	}
	i = skipWS(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil, nil
	}
	var out []jsonMember
	for {
		if i >= len(raw) || raw[i] != '"' {
			return nil, errScan
		}
		ks := i
		ke, ok := skipString(raw, i)
		if !ok {
			return nil, errScan
		}
		// Only a few key names matter to callers; copying every key into a
		// string would be most of the scan's cost, so keys stay bytes.
		key := raw[ks+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 { // escaped key: let encoding/json decode it
			var k string
			if json.Unmarshal(raw[ks:ke], &k) != nil {
				return nil, errScan
			}
			key = []byte(k)
		}
		i = skipWS(raw, ke)
		if i >= len(raw) || raw[i] != ':' {
			return nil, errScan
		}
		vs := skipWS(raw, i+1)
		ve, ok := skipValue(raw, vs)
		if !ok {
			return nil, errScan
		}
		out = append(out, jsonMember{key: key, start: ks, valueStart: vs, end: ve})
		i = skipWS(raw, ve)
		if i >= len(raw) {
			return nil, errScan
		}
		switch raw[i] {
		case ',':
			i = skipWS(raw, i+1)
		case '}':
			return out, nil
		default:
			return nil, errScan
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j, j > i
	}
}

// appendCompact appends src without whitespace outside strings.
func appendCompact(dst, src []byte) []byte {
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			end, ok := skipString(src, i)
			if !ok {
				return append(dst, src[i:]...)
			}
			dst = append(dst, src[i:end]...)
			i = end - 1
			continue
		}
		dst = append(dst, c)
	}
	return dst
}
