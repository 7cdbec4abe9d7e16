package hub

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
)

// AppendEnrichedJSON appends the enriched TD of t as JSON to dst, built from
// raw, the stored bytes of t: members keep their submitted order and their
// bytes (without insignificant whitespace), and only the hub's own members
// are encoded. This is what GET /things serves; it costs a fraction of
// marshalling the parsed document.
func (t *Thing) AppendEnrichedJSON(dst, raw []byte, now time.Time) []byte {
	members, err := jsonx.Members(raw)
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
		switch string(m.Key) { // no allocation: the compiler compares in place
		case "@context":
			b, ok := enrichedContextJSON(raw[m.ValueStart:m.End])
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
			dst = jsonx.AppendCompact(dst, raw[m.Start:m.End])
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
		e.Registration.TTL = json.Number(strconv.FormatInt(t.Meta.TTL, 10))
	}
	return e
}
