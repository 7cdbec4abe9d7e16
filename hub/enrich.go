package hub

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// Context URIs the hub recognises or adds.
const (
	ContextTD11      = "https://www.w3.org/2022/wot/td/v1.1"
	ContextTD10      = "https://www.w3.org/2019/wot/td/v1"
	ContextDiscovery = "https://www.w3.org/2022/wot/discovery"
	ContextLMOS      = "https://eclipse.dev/lmos/protocol/v1"
)

// Enriched returns doc, the Thing's document, as the directory serves it:
// the discovery context added, registration information, and the
// lmos:presence, lmos:origin and lmos:verified hub extensions. Only the top
// level is copied; doc is not changed.
func (t *Thing) Enriched(doc map[string]any, now time.Time) map[string]any {
	out := make(map[string]any, len(doc)+4)
	for k, v := range doc {
		out[k] = v
	}
	if c, ok := doc["@context"]; ok {
		out["@context"] = enrichedContext(c)
	}
	reg := map[string]any{
		"created":   formatTime(t.Meta.Created),
		"modified":  formatTime(t.Meta.Modified),
		"retrieved": formatTime(now),
	}
	if !t.Meta.Expires.IsZero() {
		reg["expires"] = formatTime(t.Meta.Expires)
	}
	if t.Meta.TTL > 0 {
		reg["ttl"] = json.Number(strconv.FormatInt(t.Meta.TTL, 10))
	}
	out["registration"] = reg
	presence := map[string]any{"status": t.Meta.Presence.Status, "since": formatTime(t.Meta.Presence.Since)}
	if t.Meta.Presence.Via != "" {
		presence["via"] = string(t.Meta.Presence.Via)
	}
	out["lmos:presence"] = presence
	origin := map[string]any{"source": string(t.Meta.Origin.Source)}
	if t.Meta.Origin.Hub != "" {
		origin["hub"] = t.Meta.Origin.Hub
	}
	out["lmos:origin"] = origin
	if t.Meta.Verified != "" {
		out["lmos:verified"] = t.Meta.Verified
	} else {
		delete(out, "lmos:verified") // only the hub may claim verification
	}
	return out
}

// lmosContext is the term definition that lets a JSON-LD processor expand
// the lmos:* members the hub adds to every TD it serves.
var lmosContext = map[string]any{"lmos": ContextLMOS}

// enrichedContext is ctx with what the hub's additions need: the discovery
// context (registration) and the lmos prefix (lmos:presence, lmos:origin).
// A context that already defines lmos keeps its own definition.
func enrichedContext(ctx any) any {
	switch c := ctx.(type) {
	case string:
		if c == ContextDiscovery {
			return []any{c, lmosContext}
		}
		return []any{c, ContextDiscovery, lmosContext}
	case []any:
		hasDiscovery := slices.Contains(c, any(ContextDiscovery))
		hasLMOS := slices.ContainsFunc(c, func(e any) bool {
			m, ok := e.(map[string]any)
			if !ok {
				return false
			}
			_, ok = m["lmos"]
			return ok
		})
		if hasDiscovery && hasLMOS {
			return c
		}
		out := make([]any, 0, len(c)+2)
		// TD 1.1 requires the TD context first; discovery goes right after
		// the plain URIs, before any prefix-definition objects.
		i := 0
		for i < len(c) {
			if _, ok := c[i].(string); !ok {
				break
			}
			i++
		}
		out = append(out, c[:i]...)
		if !hasDiscovery {
			out = append(out, ContextDiscovery)
		}
		out = append(out, c[i:]...)
		if !hasLMOS {
			out = append(out, lmosContext)
		}
		return out
	default:
		return ctx
	}
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
